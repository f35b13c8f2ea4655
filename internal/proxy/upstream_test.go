package proxy_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"

	openai "github.com/sashabaranov/go-openai"

	"github.com/oncegate/oncegate/internal/config"
	"github.com/oncegate/oncegate/internal/logbuf"
	"github.com/oncegate/oncegate/internal/proxy"
)

// refusing is a provider that refuses the proxy's key as OpenAI does, with
// status and the masked key in the message.
func refusing(status int) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		fmt.Fprintf(w, `{"error":{"message":"Incorrect API key provided: sk-prov*****ider. You can find your API key at https://platform.openai.com/account/api-keys. Project proj_Q2x9LmZr77ab3 org-Hk1vB2n3M4q5.","type":"invalid_request_error","param":null,"code":"invalid_api_key"}}`)
	})
}

// TestUpstreamAuthFailure: when the provider refuses the proxy's own key
// (401 or 403), a go-openai client sees a 502 APIError that says so, with
// none of the provider's text (never the 401 that blames its own key),
// on chat completions and the model routes; the proxy logs it at ERROR
// and counts it.
func TestUpstreamAuthFailure(t *testing.T) {
	for _, status := range []int{http.StatusUnauthorized, http.StatusForbidden} {
		t.Run(fmt.Sprint(status), func(t *testing.T) {
			p := serveProvider(t, refusing(status))
			var logs logbuf.Buffer
			cfg := config.Proxy{}
			url, metrics := startWith(t, proxy.Options{Config: &cfg, Cache: badgerCache(t), BaseURL: p.url, Prices: prices,
				Logger: slog.New(slog.NewTextHandler(&logs, nil))})
			oc := client(t, url, aliceKey)
			ctx := context.Background()
			check := func(what string, err error) {
				t.Helper()
				var ae *openai.APIError
				if !errors.As(err, &ae) || ae.HTTPStatusCode != http.StatusBadGateway || ae.Code != "upstream_auth_failed" ||
					!strings.Contains(ae.Message, "provider refused") {
					t.Errorf("%s: %v; want a 502 upstream_auth_failed APIError", what, err)
					return
				}
				for _, leak := range []string{"sk-prov", "Incorrect API key", "proj_", "org-"} {
					if strings.Contains(ae.Message, leak) {
						t.Errorf("%s: the message %q holds the provider's %q", what, ae.Message, leak)
					}
				}
			}
			_, err := oc.CreateChatCompletion(ctx, question("hello"))
			check("chat", err)
			req := question("hello, streamed")
			req.Stream = true
			_, err = oc.CreateChatCompletionStream(ctx, req)
			check("stream", err)
			_, err = oc.ListModels(ctx)
			check("models", err)
			_, err = oc.GetModel(ctx, "gpt-4o-mini")
			check("model", err)
			if got := gather(t, metrics)[`oncegate_proxy_requests_total{client="alice",outcome="upstream_auth"}`]; got != 4 {
				t.Errorf("upstream_auth count %v; want 4", got)
			}
			out := logs.String()
			if n := strings.Count(out, "level=ERROR"); n != 4 || !strings.Contains(out, "refused the proxy's credentials") ||
				!strings.Contains(out, fmt.Sprintf("status=%d", status)) || strings.Contains(out, "sk-prov") {
				t.Errorf("logs %q; want four ERROR records naming the status, without the provider's text", out)
			}
		})
	}
}

// TestUpstreamErrorRedacted: the provider's other errors reach the client
// with their status, type and code, but without the provider's key, a
// masked key, or the account's organization and project ids.
func TestUpstreamErrorRedacted(t *testing.T) {
	p := serveProvider(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusBadRequest)
		io.WriteString(w, `{"error":{"message":"Rate limit reached for gpt-4o-mini in organization org-Hk1vB2n3M4q5 (project proj_Q2x9LmZr77ab3) with key sk-provider, also known as sk-prov*****ider.","type":"tokens","param":null,"code":"rate_limit_exceeded"}}`)
	}))
	url, _ := start(t, config.Proxy{}, badgerCache(t), p.url)
	for _, call := range []func(*openai.Client) error{
		func(oc *openai.Client) error {
			_, err := oc.CreateChatCompletion(context.Background(), question("hello"))
			return err
		},
		func(oc *openai.Client) error { _, err := oc.ListModels(context.Background()); return err },
	} {
		err := call(client(t, url, aliceKey))
		var ae *openai.APIError
		if !errors.As(err, &ae) || ae.HTTPStatusCode != http.StatusBadRequest || ae.Code != "rate_limit_exceeded" || ae.Type != "tokens" {
			t.Errorf("%v; want the provider's 400 rate_limit_exceeded", err)
			continue
		}
		for _, leak := range []string{"sk-provider", "sk-prov*", "Hk1vB2n3M4q5", "Q2x9LmZr77ab3"} {
			if strings.Contains(ae.Message, leak) {
				t.Errorf("message %q holds %q", ae.Message, leak)
			}
		}
		if want := "Rate limit reached for gpt-4o-mini in organization org-[redacted] (project proj_[redacted]) with key [redacted], also known as sk-[redacted]."; ae.Message != want {
			t.Errorf("message %q; want %q", ae.Message, want)
		}
	}
}
