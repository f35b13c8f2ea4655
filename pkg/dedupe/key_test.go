package dedupe_test

import (
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/oncegate/oncegate/pkg/canon"
	"github.com/oncegate/oncegate/pkg/dedupe"
)

func mustKeyer(t testing.TB, spec dedupe.KeySpec) *dedupe.Keyer {
	t.Helper()
	k, err := dedupe.NewKeyer(spec)
	if err != nil {
		t.Fatalf("NewKeyer(%+v): %v", spec, err)
	}
	return k
}

func mustIntent(t testing.TB, k *dedupe.Keyer, runID, payload string) dedupe.Intent {
	t.Helper()
	in, err := k.RunIntent(runID, []byte(payload))
	if err != nil {
		t.Fatalf("RunIntent(%q, %s): %v", runID, payload, err)
	}
	return in
}

const alert = `{"alert":{"id":"cpu-high/web-1","occurrence":3,"severity":"page"},"delivery_id":"d-81","sent_at":"2026-11-29T07:00:00Z"}`

// TestKeyGolden pins keys for fixed specs and payloads. Ledgers store keys
// for days: a release that changed them would let retries that straddle
// the upgrade run their effects twice. If this test fails, the change is
// breaking and needs a new key domain version, not a new golden value.
func TestKeyGolden(t *testing.T) {
	for _, tt := range []struct {
		spec    dedupe.KeySpec
		key, fp string
	}{
		{dedupe.KeySpec{Pipeline: "alerts", Step: "triage", Fields: []string{"/alert/id"}, Version: "/alert/occurrence"},
			"1f5995b5af42c1ec52f20e557e0c0573", "787accb752eeb1ffe43884eceef31538"},
		{dedupe.KeySpec{Pipeline: "alerts", Step: "triage", Volatile: []string{"/delivery_id", "/sent_at"}, SHA256: true},
			"35fb94a40fbd99d4fbfda38108be0cb5", "dddbb780d41fd628bb70cf8d4fb3b086"},
		{dedupe.KeySpec{Pipeline: "alerts", Step: "triage", PerRun: true},
			"6077d7fb8a15902bcb13849123de8494", "787accb752eeb1ffe43884eceef31538"},
	} {
		in := mustIntent(t, mustKeyer(t, tt.spec), "run-1", alert)
		if in.Key.String() != tt.key || in.Fingerprint.String() != tt.fp {
			t.Errorf("spec %+v:\nkey         %s\nfingerprint %s\nwant\nkey         %s\nfingerprint %s",
				tt.spec, in.Key, in.Fingerprint, tt.key, tt.fp)
		}
	}
}

func TestKeySameWork(t *testing.T) {
	byFields := mustKeyer(t, dedupe.KeySpec{Pipeline: "alerts", Step: "triage", Fields: []string{"/alert/id"}, Version: "/alert/occurrence"})
	byVolatile := mustKeyer(t, dedupe.KeySpec{Pipeline: "alerts", Step: "triage", Volatile: []string{"/delivery_id", "/sent_at"}})
	for _, tt := range []struct {
		name      string
		a, b      string
		sameKeyF  bool // same key under byFields
		sameKeyV  bool // same key under byVolatile
		samePrint bool
	}{
		{"member order and whitespace",
			alert,
			"{ \"sent_at\":\"2026-11-29T07:00:00Z\", \"delivery_id\":\"d-81\",\n\"alert\": {\"severity\":\"page\",\"occurrence\":3.0,\"id\":\"cpu-high\\/web-1\"}}",
			true, true, true},
		{"redelivery with new delivery id and timestamp",
			alert,
			strings.NewReplacer("d-81", "d-82", "07:00:00", "07:00:09").Replace(alert),
			true, true, false},
		{"new occurrence",
			alert,
			strings.Replace(alert, `"occurrence":3`, `"occurrence":4`, 1),
			false, false, false},
		{"other alert",
			alert,
			strings.Replace(alert, "web-1", "web-2", 1),
			false, false, false},
		{"severity changed: same alert under fields, new work under volatile",
			alert,
			strings.Replace(alert, `"page"`, `"ticket"`, 1),
			true, false, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			fa, fb := mustIntent(t, byFields, "", tt.a), mustIntent(t, byFields, "", tt.b)
			va, vb := mustIntent(t, byVolatile, "", tt.a), mustIntent(t, byVolatile, "", tt.b)
			if got := fa.Key == fb.Key; got != tt.sameKeyF {
				t.Errorf("fields spec: same key = %v; want %v", got, tt.sameKeyF)
			}
			if got := va.Key == vb.Key; got != tt.sameKeyV {
				t.Errorf("volatile spec: same key = %v; want %v", got, tt.sameKeyV)
			}
			if got := fa.Fingerprint == fb.Fingerprint; got != tt.samePrint {
				t.Errorf("same fingerprint = %v; want %v", got, tt.samePrint)
			}
			if fa.Fingerprint != va.Fingerprint {
				t.Errorf("fingerprint depends on the spec: %v vs %v", fa.Fingerprint, va.Fingerprint)
			}
		})
	}
}

// TestKeyDomains checks that keys of different steps, scopes, hashes and
// specs differ for one payload, including specs whose names would run
// together if they were concatenated.
func TestKeyDomains(t *testing.T) {
	specs := []dedupe.KeySpec{
		{Pipeline: "alerts", Step: "triage"},
		{Pipeline: "alerts", Step: "notify"},
		{Pipeline: "alert", Step: "striage"},
		{Pipeline: "alertst", Step: "riage"},
		{Pipeline: "alerts", Step: "triage", SHA256: true},
		{Pipeline: "alerts", Step: "triage", PerRun: true},
		{Pipeline: "alerts", Step: "triage", Fields: []string{"/alert"}},
		{Pipeline: "alerts", Step: "triage", Fields: []string{"/alert/id", "/alert/occurrence"}},
		{Pipeline: "alerts", Step: "triage", Fields: []string{"/alert/occurrence", "/alert/id"}},
		{Pipeline: "alerts", Step: "triage", Fields: []string{"/alert/id"}, Version: "/alert/occurrence"},
		{Pipeline: "alerts", Step: "triage", Volatile: []string{"/nothing"}},
	}
	seen := map[dedupe.Key]int{}
	for i, spec := range specs {
		in := mustIntent(t, mustKeyer(t, spec), "r1", alert)
		if j, dup := seen[in.Key]; dup {
			t.Errorf("spec %d %+v and spec %d %+v give the same key %v", i, spec, j, specs[j], in.Key)
		}
		seen[in.Key] = i
	}
}

func TestKeyRunScope(t *testing.T) {
	k := mustKeyer(t, dedupe.KeySpec{Pipeline: "p", Step: "s", PerRun: true})
	if _, err := k.Intent([]byte(alert)); !errors.Is(err, dedupe.ErrNoRunID) {
		t.Errorf("Intent without run id: error = %v; want ErrNoRunID", err)
	}
	a, b := mustIntent(t, k, "run-1", alert), mustIntent(t, k, "run-2", alert)
	if a.Key == b.Key {
		t.Errorf("runs run-1 and run-2 share key %v", a.Key)
	}
	if again := mustIntent(t, k, "run-1", alert); again.Key != a.Key {
		t.Errorf("resumed run-1: key %v; want %v", again.Key, a.Key)
	}
	// Input scope ignores the run id: that is its point.
	in := mustKeyer(t, dedupe.KeySpec{Pipeline: "p", Step: "s"})
	if x, y := mustIntent(t, in, "run-1", alert), mustIntent(t, in, "run-2", alert); x != y {
		t.Errorf("input-scoped keys differ between runs: %v, %v", x, y)
	}
}

func TestKeyBadPayload(t *testing.T) {
	k := mustKeyer(t, dedupe.KeySpec{Pipeline: "p", Step: "s", Fields: []string{"/alert/id"}, Version: "/alert/occurrence",
		Limits: canon.Options{MaxBytes: 4096}})
	for _, tt := range []struct {
		name    string
		payload string
		want    error
	}{
		{"not json", "alert fired", canon.ErrSyntax},
		{"empty", "", canon.ErrSyntax},
		{"duplicate member", `{"alert":{"id":"a","id":"b","occurrence":1}}`, canon.ErrDuplicateName},
		{"missing field", `{"alert":{"occurrence":1}}`, canon.ErrNotFound},
		{"missing version", `{"alert":{"id":"a"}}`, canon.ErrNotFound},
		{"too large", `{"alert":{"id":"` + strings.Repeat("x", 5000) + `","occurrence":1}}`, canon.ErrTooLarge},
		{"too deep", strings.Repeat("[", 100) + strings.Repeat("]", 100), canon.ErrTooDeep},
		{"invalid utf-8", "{\"alert\":{\"id\":\"\xff\",\"occurrence\":1}}", canon.ErrInvalidUTF8},
		{"unsafe integer id", `{"alert":{"id":9007199254740993,"occurrence":1}}`, canon.ErrInexactInteger},
		{"trailing data", `{"alert":{"id":"a","occurrence":1}} {}`, canon.ErrTrailingData},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := k.Intent([]byte(tt.payload))
			if !errors.Is(err, tt.want) {
				t.Errorf("Intent(%.40q) error = %v; want %v", tt.payload, err, tt.want)
			}
		})
	}
}

func TestNewKeyerErrors(t *testing.T) {
	for _, spec := range []dedupe.KeySpec{
		{Step: "s"},
		{Pipeline: "p"},
		{Pipeline: "p", Step: "s", Fields: []string{"/a"}, Volatile: []string{"/b"}},
		{Pipeline: "p", Step: "s", Fields: []string{"a"}},
		{Pipeline: "p", Step: "s", Volatile: []string{"/a~2"}},
		{Pipeline: "p", Step: "s", Version: "no-slash"},
		{Pipeline: "p", Step: "s", Limits: canon.Options{MaxDepth: -1}},
	} {
		if _, err := dedupe.NewKeyer(spec); !errors.Is(err, dedupe.ErrInvalidKeySpec) {
			t.Errorf("NewKeyer(%+v) error = %v; want ErrInvalidKeySpec", spec, err)
		}
	}
}

func TestParseKey(t *testing.T) {
	k := mustIntent(t, mustKeyer(t, dedupe.KeySpec{Pipeline: "p", Step: "s"}), "", alert).Key
	got, err := dedupe.ParseKey(k.String())
	if err != nil || got != k {
		t.Fatalf("ParseKey(%q) = %v, %v; want %v", k.String(), got, err, k)
	}
	text, _ := k.MarshalText()
	var back dedupe.Key
	if err := back.UnmarshalText(text); err != nil || back != k {
		t.Errorf("UnmarshalText(MarshalText(%v)) = %v, %v", k, back, err)
	}
	for _, s := range []string{"", "00", strings.Repeat("0", 31), strings.Repeat("0", 33), strings.ToUpper(k.String()),
		strings.Repeat("g", 32), k.String()[:31] + " ", "0x" + k.String()[2:]} {
		if _, err := dedupe.ParseKey(s); !errors.Is(err, dedupe.ErrInvalidKey) {
			t.Errorf("ParseKey(%q) error = %v; want ErrInvalidKey", s, err)
		}
	}
}

func FuzzParseKey(f *testing.F) {
	f.Add("0123456789abcdef0123456789abcdef")
	f.Add("0123456789ABCDEF0123456789abcdef")
	f.Add("")
	f.Fuzz(func(t *testing.T, s string) {
		k, err := dedupe.ParseKey(s)
		if err != nil {
			if !errors.Is(err, dedupe.ErrInvalidKey) {
				t.Fatalf("ParseKey(%q) error %v does not wrap ErrInvalidKey", s, err)
			}
			return
		}
		if k.String() != s {
			t.Fatalf("ParseKey(%q).String() = %q", s, k.String())
		}
	})
}

// FuzzIntent feeds arbitrary payloads to a Keyer: it must never panic, and a
// payload it accepts must key the same after canonicalization.
func FuzzIntent(f *testing.F) {
	f.Add([]byte(alert))
	f.Add([]byte(`{"alert":{"id":1e400}}`))
	f.Add([]byte(`[]`))
	k := mustKeyer(f, dedupe.KeySpec{Pipeline: "p", Step: "s", Volatile: []string{"/sent_at", "/a/0"}})
	f.Fuzz(func(t *testing.T, payload []byte) {
		in, err := k.Intent(payload)
		if err != nil {
			return
		}
		c, err := canon.Append(nil, payload)
		if err != nil {
			t.Fatalf("Keyer accepted %q but canon.Append rejects it: %v", payload, err)
		}
		again, err := k.Intent(c)
		if err != nil || again != in {
			t.Fatalf("canonical form %q keys to %v, %v; the original to %v", c, again, err, in)
		}
	})
}

func TestKeyerConcurrent(t *testing.T) {
	k := mustKeyer(t, dedupe.KeySpec{Pipeline: "p", Step: "s", Fields: []string{"/alert/id"}})
	want := mustIntent(t, k, "", alert)
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 500; i++ {
				if got, err := k.Intent([]byte(alert)); err != nil || got != want {
					t.Errorf("concurrent Intent = %v, %v; want %v", got, err, want)
					return
				}
			}
		}()
	}
	wg.Wait()
}

func TestKeyerAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("sync.Pool drops items under the race detector")
	}
	k := mustKeyer(t, dedupe.KeySpec{Pipeline: "p", Step: "s", Fields: []string{"/alert/id"}, Version: "/alert/occurrence"})
	payload := []byte(alert)
	k.Intent(payload)
	if n := testing.AllocsPerRun(1000, func() { k.Intent(payload) }); n > 0 {
		t.Errorf("Intent allocates %v times per call; want 0", n)
	}
}

// TestLookupIntent: LookupIntent gives the intent RunIntent and
// HeaderIntent give, and the value at the pointer from the same canonical
// form (canonical JSON, whatever the payload's spelling), or not found; a
// payload that is not I-JSON fails as it does for Intent.
func TestLookupIntent(t *testing.T) {
	status, err := canon.ParsePointer("/status")
	if err != nil {
		t.Fatal(err)
	}
	plain, err := dedupe.NewKeyer(dedupe.KeySpec{Pipeline: "alerts", Step: "triage", Fields: []string{"/fp"}})
	if err != nil {
		t.Fatal(err)
	}
	headed, err := dedupe.NewKeyer(dedupe.KeySpec{Pipeline: "alerts", Step: "triage", Fields: []string{"/fp"}, Headers: []string{"Oncegate-Event"}})
	if err != nil {
		t.Fatal(err)
	}
	header := func(name string) string {
		if name == "Oncegate-Event" {
			return "alert"
		}
		return ""
	}
	for _, tc := range []struct {
		name    string
		k       *dedupe.Keyer
		header  func(string) string
		payload string
		value   string // "" with ok false
		err     error
	}{
		{name: "present", k: plain, payload: `{"fp":"a1","status":"resolved"}`, value: `"resolved"`},
		{name: "spelled otherwise", k: plain, payload: "{ \"status\" : \"\\u0072esolved\",\n \"fp\":\"a1\" }", value: `"resolved"`},
		{name: "not a string", k: plain, payload: `{"fp":"a1","status":1.50}`, value: `1.5`},
		{name: "absent", k: plain, payload: `{"fp":"a1"}`},
		{name: "headers", k: headed, header: header, payload: `{"fp":"a1","status":"firing"}`, value: `"firing"`},
		{name: "headers, no function", k: headed, payload: `{"fp":"a1"}`, err: dedupe.ErrMissingHeader},
		{name: "not JSON", k: plain, payload: `{"fp":`, err: canon.ErrSyntax},
		{name: "duplicate member", k: plain, payload: `{"fp":"a","fp":"b"}`, err: canon.ErrDuplicateName},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in, v, ok, err := tc.k.LookupIntent("", tc.header, []byte(tc.payload), status)
			if tc.err != nil {
				if !errors.Is(err, tc.err) {
					t.Fatalf("err = %v; want %v", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := string(v); ok != (tc.value != "") || got != tc.value {
				t.Errorf("value %q, %v; want %q", got, ok, tc.value)
			}
			var want dedupe.Intent
			if tc.header != nil {
				want, err = tc.k.HeaderIntent("", tc.header, []byte(tc.payload))
			} else {
				want, err = tc.k.Intent([]byte(tc.payload))
			}
			if err != nil || in != want {
				t.Errorf("intent %v; want %v (%v), as Intent gives", in, want, err)
			}
		})
	}
}
