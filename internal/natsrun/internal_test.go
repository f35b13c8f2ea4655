package natsrun

import (
	"errors"
	"testing"
	"time"
)

func TestReconnectDelay(t *testing.T) {
	for attempts := -1; attempts <= 40; attempts++ {
		want := reconnectMax
		if n := attempts - 1; n >= 0 && n < 6 {
			want = min(reconnectBase<<n, reconnectMax)
		}
		if attempts <= 0 {
			want = reconnectMax
		}
		for range 20 {
			if got := reconnectDelay(attempts); got < want/2 || got > want {
				t.Fatalf("reconnectDelay(%d) = %v; want within [%v, %v]", attempts, got, want/2, want)
			}
		}
	}
	if d := reconnectDelay(1); d > 250*time.Millisecond {
		t.Errorf("reconnectDelay(1) = %v; want at most 250ms", d)
	}
}

func TestScrubber(t *testing.T) {
	s := newScrubber("pw", "", "alice:pw", "pw", "xxxxx")
	if got, want := s.text("alice:pw and pw"), "xxxxx and xxxxx"; got != want {
		t.Errorf("text = %q; want %q", got, want)
	}
	cause := errors.New("bad alice:pw")
	err := s.err(cause)
	if got, want := err.Error(), "bad xxxxx"; got != want {
		t.Errorf("err = %q; want %q", got, want)
	}
	if !errors.Is(err, cause) {
		t.Errorf("errors.Is(scrubbed, cause) = false; want true")
	}
	if clean := errors.New("nothing secret"); s.err(clean) != clean { //nolint:errorlint // the error itself, not one wrapping it
		t.Errorf("err(clean) is not clean itself")
	}
	if s.err(nil) != nil {
		t.Errorf("err(nil) != nil")
	}
}

func TestURLSecrets(t *testing.T) {
	got := urlSecrets("nats://alice:pw@h1,nats://tok@h2,nats://h3,nats://@h4")
	want := []string{"alice:pw", "pw", "tok"}
	if len(got) != len(want) {
		t.Fatalf("urlSecrets = %q; want %q", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("urlSecrets = %q; want %q", got, want)
		}
	}
}
