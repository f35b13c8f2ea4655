package standin_test

import (
	"context"
	"net/http"
	"sync"
	"testing"

	openai "github.com/sashabaranov/go-openai"

	"github.com/oncegate/oncegate/internal/standin"
)

// TestStartSpeaksHTTP2 checks that a started stand-in answers HTTP/1.1 and,
// through Transport, HTTP/2 with prior knowledge.
func TestStartSpeaksHTTP2(t *testing.T) {
	s, err := standin.New(standin.Options{})
	if err != nil {
		t.Fatal(err)
	}
	url, stop, err := s.Start("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer stop()

	for _, tc := range []struct {
		name      string
		transport *http.Transport
		proto     int
	}{
		{"http/1.1", http.DefaultTransport.(*http.Transport).Clone(), 1},
		{"h2c", standin.Transport(), 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			defer tc.transport.CloseIdleConnections()
			var mu sync.Mutex
			protos := map[int]int{}
			rt := roundTripFunc(func(r *http.Request) (*http.Response, error) {
				resp, err := tc.transport.RoundTrip(r)
				if err == nil {
					mu.Lock()
					protos[resp.ProtoMajor]++
					mu.Unlock()
				}
				return resp, err
			})
			cfg := openai.DefaultConfig("test-key")
			cfg.BaseURL = url
			cfg.HTTPClient = &http.Client{Transport: rt}
			client := openai.NewClientWithConfig(cfg)
			var wg sync.WaitGroup
			for range 8 {
				wg.Go(func() {
					if _, err := client.CreateChatCompletion(context.Background(), chatRequest("disk full on db-3")); err != nil {
						t.Error(err)
					}
				})
			}
			wg.Wait()
			if protos[tc.proto] != 8 {
				t.Errorf("answers by HTTP major version: %v; want all 8 over %d", protos, tc.proto)
			}
		})
	}
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }
