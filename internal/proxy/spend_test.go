package proxy_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	openai "github.com/sashabaranov/go-openai"

	"github.com/oncegate/oncegate/internal/config"
	"github.com/oncegate/oncegate/internal/proxy"
	"github.com/oncegate/oncegate/internal/standin"
	"github.com/oncegate/oncegate/pkg/llmcache"
)

// expensive prices gpt-4o-mini at $0.01 a prompt token and $0.10 a
// completion token, and nothing else: a stand-in answer (20 to 34 tokens)
// costs $2 to $3.40.
var expensive = map[string]config.Price{"gpt-4o-mini": {PromptPerMTok: 10_000, CompletionPerMTok: 100_000}}

// gate holds every chat completion at the provider until released, so
// that calls are in flight together.
type gate struct {
	h       http.Handler
	arrived chan struct{}
	release chan struct{}
}

func (g *gate) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if strings.HasSuffix(r.URL.Path, "/chat/completions") {
		g.arrived <- struct{}{}
		select {
		case <-g.release:
		case <-r.Context().Done():
			return
		}
	}
	g.h.ServeHTTP(w, r)
}

// TestSpendLimitWithoutMaxTokens: 8 concurrent calls that set no
// max_tokens, under a $5 limit, against a model whose answers cost $2 to
// $3.40: the calls in flight together reserve a completion allowance each
// (proxy.completion_tokens, else the model's max_output_tokens), so that
// what they spend passes the limit by less than one reservation; with
// neither set, such a call is refused 400, never sent.
func TestSpendLimitWithoutMaxTokens(t *testing.T) {
	for _, tt := range []struct {
		name       string
		completion int64 // proxy.completion_tokens
		maxOutput  int64 // llm.prices' max_output_tokens
		want       int   // calls answered
	}{
		{"proxy.completion_tokens", 40, 0, 1},
		{"max_output_tokens", 0, 40, 1},
		{"the smaller of the two", 4000, 40, 1},
		{"neither", 0, 0, 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			m := standinModel(t, standin.Options{})
			g := &gate{h: m, arrived: make(chan struct{}, 8), release: make(chan struct{})}
			p := serveProvider(t, g)
			ps := map[string]config.Price{}
			for k, v := range expensive {
				v.MaxOutputTokens = tt.maxOutput
				ps[k] = v
			}
			cfg := config.Proxy{MaxBudget: 5, BudgetDuration: config.Period(24 * time.Hour), CompletionTokens: tt.completion}
			url, _ := startWith(t, proxy.Options{Config: &cfg, Cache: badgerCacheWith(t, llmcache.Options{Prices: cachePrices(ps)}), BaseURL: p.url, Prices: ps})
			oc := client(t, url, aliceKey)

			type result struct {
				err error
			}
			results := make(chan result, 8)
			for i := range 8 {
				go func() {
					_, err := oc.CreateChatCompletion(context.Background(), question(fmt.Sprintf("Incident %d: write the postmortem", i)))
					results <- result{err}
				}()
			}
			// Release the provider once every call is either at the
			// provider or answered without it.
			var arrived, answered int
			var errs []error
			deadline := time.After(30 * time.Second)
			for arrived+answered < 8 {
				select {
				case <-g.arrived:
					arrived++
				case r := <-results:
					answered++
					errs = append(errs, r.err)
				case <-deadline:
					t.Fatalf("%d calls at the provider and %d answered after 30s; want 8 between them", arrived, answered)
				}
			}
			close(g.release)
			for answered < 8 {
				r := <-results
				answered++
				errs = append(errs, r.err)
			}
			var ok, refused int
			for _, err := range errs {
				var ae *openai.APIError
				switch {
				case err == nil:
					ok++
				case tt.want > 0 && errors.As(err, &ae) && ae.HTTPStatusCode == http.StatusTooManyRequests && ae.Type == "spend_limit_exceeded":
					refused++
				case tt.want == 0 && errors.As(err, &ae) && ae.HTTPStatusCode == http.StatusBadRequest && ae.Code == "max_tokens_required" &&
					strings.Contains(ae.Message, "proxy.completion_tokens") && strings.Contains(ae.Message, "max_output_tokens"):
					refused++
				default:
					t.Errorf("call: %v", err)
				}
			}
			st := m.Stats()
			spent := float64(st.PromptTokens)*0.01 + float64(st.CompletionTokens)*0.10
			// One reservation: the prompt (under 20 tokens) and 40
			// completion tokens.
			if limit := 5 + 20*0.01 + 40*0.10; spent > limit || ok != tt.want || refused != 8-tt.want || st.Completions != int64(ok) {
				t.Errorf("8 calls at once: %d answered, %d refused, %d sent, $%.2f spent; want %d answered, $%.2f at most",
					ok, refused, st.Completions, spent, tt.want, limit)
			}
		})
	}
}

// TestSpendLimitHugeMaxTokens: a max_tokens or n so large that the
// reservation would overflow (beyond 2^53 the cache refuses the request
// as unkeyable) is refused by the spend limit, never sent, and leaves the
// limit whole for the calls after it.
func TestSpendLimitHugeMaxTokens(t *testing.T) {
	m, murl := model(t, standin.Options{})
	url, _ := start(t, config.Proxy{MaxBudget: 5, BudgetDuration: config.Period(24 * time.Hour)}, badgerCache(t), murl)
	for _, body := range []string{
		`{"model":"gpt-4o-mini","max_tokens":9007199254740992,"messages":[{"role":"user","content":"a"}]}`,
		`{"model":"gpt-4o-mini","max_completion_tokens":9007199254740991,"messages":[{"role":"user","content":"b"}]}`,
		`{"model":"gpt-4o-mini","n":4294967296,"max_tokens":4294967296,"messages":[{"role":"user","content":"c"}]}`,
		`{"model":"gpt-4o-mini","n":3,"max_tokens":4503599627370496,"messages":[{"role":"user","content":"d"}]}`,
	} {
		st, _, b := post(t, url, aliceKey, body)
		if _, code, _ := errorOf(b); st != http.StatusTooManyRequests || code != "spend_limit_exceeded" {
			t.Errorf("%s: %d %s; want 429 spend_limit_exceeded", body, st, b)
		}
	}
	// $0.01 a token: 1,000 tokens are past $5.
	st, _, b := post(t, url, aliceKey, `{"model":"gpt-4o-mini","max_tokens":1000,"messages":[{"role":"user","content":"e"}]}`)
	if st != http.StatusTooManyRequests {
		t.Errorf("a call of 1,000 tokens after them: %d %s; want 429", st, b)
	}
	if n := m.Stats().Completions; n != 0 {
		t.Errorf("the model answered %d calls; want none", n)
	}
}

// TestAmbiguousMembers: a request whose members a provider could read
// otherwise than the proxy (a member named as a field the proxy reads
// but for its case, which Go decoders match, or the same member twice) is
// refused 400 and never sent: it could name one model or max_tokens to
// the proxy's price and limits, and another to the provider.
func TestAmbiguousMembers(t *testing.T) {
	m, murl := model(t, standin.Options{})
	cfg := config.Proxy{MaxBudget: 5, BudgetDuration: config.Period(24 * time.Hour)}
	url, _ := startWith(t, proxy.Options{Config: &cfg, Cache: badgerCacheWith(t, llmcache.Options{Prices: cachePrices(expensive)}), BaseURL: murl, Prices: expensive})
	for _, body := range []string{
		`{"model":"gpt-4o","Model":"gpt-4o-mini","max_tokens":10,"messages":[{"role":"user","content":"a"}]}`,
		`{"MODEL":"gpt-4o-mini","max_tokens":10,"messages":[{"role":"user","content":"b"}]}`,
		`{"model":"gpt-4o-mini","max_tokens":4000,"MAX_TOKENS":1,"messages":[{"role":"user","content":"c"}]}`,
		`{"model":"gpt-4o-mini","max_to\u212Aens":1,"messages":[{"role":"user","content":"d"}]}`,
		`{"model":"gpt-4o-mini","max_tokens":1,"messages":[{"role":"user","content":"` + strings.Repeat("long ", 2000) + `","Content":"e"}]}`,
		`{"model":"gpt-4o-mini","max_tokens":1,"messages":[{"role":"user","content":[{"type":"text","text":"` + strings.Repeat("long ", 2000) + `","Text":"f"}]}]}`,
	} {
		st, _, b := post(t, url, aliceKey, body)
		if st != http.StatusBadRequest {
			t.Errorf("%.90s…: %d %s; want 400", body, st, b)
		}
	}
	if n := m.Stats().Requests; n != 0 {
		t.Errorf("the model got %d requests; want none", n)
	}
}

// TestTooLargeToCheck: a request too large for the cache to key is not
// sent past a spend limit unchecked: it is refused 413.
func TestTooLargeToCheck(t *testing.T) {
	m, murl := model(t, standin.Options{})
	cache := badgerCacheWith(t, llmcache.Options{Prices: cachePrices(prices), MaxRequestBytes: 4096})
	url, _ := start(t, config.Proxy{Clients: map[string]config.ProxyClient{"alice": {MaxBudget: 5, BudgetDuration: config.Period(24 * time.Hour)}}}, cache, murl)
	body := `{"model":"gpt-4o-mini","max_tokens":4000,"messages":[{"role":"user","content":"` + strings.Repeat("word ", 1000) + `"}]}`
	st, _, b := post(t, url, aliceKey, body)
	if _, code, _ := errorOf(b); st != http.StatusRequestEntityTooLarge || code != "request_too_large" {
		t.Errorf("a request of %d bytes past a $5 limit: %d %s; want 413 request_too_large", len(body), st, b)
	}
	if n := m.Stats().Requests; n != 0 {
		t.Errorf("the model got %d requests; want none", n)
	}
	// Without a limit (bob) it goes past the cache, as before.
	if st, _, b := post(t, url, bobKey, body); st != http.StatusOK {
		t.Errorf("without a limit: %d %.100s; want 200, past the cache", st, b)
	}
}
