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

// TestUnpricedModelRefused: a client with a spend limit, refused
// gpt-4o-mini, is not served gpt-4o for free: a model llm.prices does not
// price is refused 403, naming the model and the setting, never sent; a
// client without a limit is served it.
func TestUnpricedModelRefused(t *testing.T) {
	m, murl := model(t, standin.Options{})
	ps := map[string]config.Price{"gpt-4o-mini": {PromptPerMTok: 10_000, CompletionPerMTok: 10_000}}
	cfg := config.Proxy{Clients: map[string]config.ProxyClient{"alice": {MaxBudget: 2, BudgetDuration: config.Period(24 * time.Hour)}}}
	url, _ := startWith(t, proxy.Options{Config: &cfg, Cache: badgerCacheWith(t, llmcache.Options{Prices: cachePrices(ps)}), BaseURL: murl, Prices: ps})
	oc := client(t, url, aliceKey)
	ctx := context.Background()
	for i := 0; ; i++ {
		req := question(fmt.Sprintf("Alert %d: queue depth high", i))
		req.MaxTokens = 100
		_, err := oc.CreateChatCompletion(ctx, req)
		if err == nil {
			continue
		}
		var ae *openai.APIError
		if !errors.As(err, &ae) || ae.HTTPStatusCode != http.StatusTooManyRequests || i > 20 {
			t.Fatalf("call %d: %v; want alice's limit to refuse gpt-4o-mini in a few calls", i, err)
		}
		break
	}
	sent := m.Stats().Completions
	for i := range 20 {
		req := question(fmt.Sprintf("Alert %d: queue depth high", i))
		req.Model = "gpt-4o"
		req.MaxTokens = 100
		_, err := oc.CreateChatCompletion(ctx, req)
		var ae *openai.APIError
		if !errors.As(err, &ae) || ae.HTTPStatusCode != http.StatusForbidden || ae.Code != "model_not_priced" ||
			!strings.Contains(ae.Message, `"gpt-4o"`) || !strings.Contains(ae.Message, "llm.prices") {
			t.Fatalf("gpt-4o, call %d: %v; want 403 model_not_priced naming gpt-4o and llm.prices", i, err)
		}
	}
	if n := m.Stats().Completions; n != sent {
		t.Errorf("the model answered %d calls for gpt-4o; want none", n-sent)
	}
	req := question("Alert 0: queue depth high")
	req.Model = "gpt-4o"
	if _, err := client(t, url, bobKey).CreateChatCompletion(ctx, req); err != nil {
		t.Errorf("bob, without a limit, asking gpt-4o: %v", err)
	}
}

// TestModelsAllowList: with proxy.models set, a model it does not list is
// refused 403 (a chat completion) or 404 (its retrieval), never sent.
func TestModelsAllowList(t *testing.T) {
	p := serveProvider(t, standinModel(t, standin.Options{}))
	url, _ := start(t, config.Proxy{Models: []string{"gpt-4o-mini"}}, badgerCache(t), p.url)
	req := question("Alert 1")
	req.Model = "gpt-4o"
	_, err := client(t, url, aliceKey).CreateChatCompletion(context.Background(), req)
	var ae *openai.APIError
	if !errors.As(err, &ae) || ae.HTTPStatusCode != http.StatusForbidden || ae.Code != "model_not_allowed" ||
		!strings.Contains(ae.Message, `"gpt-4o"`) || !strings.Contains(ae.Message, "proxy.models") {
		t.Errorf("gpt-4o: %v; want 403 model_not_allowed naming gpt-4o and proxy.models", err)
	}
	if st, b := raw(t, url, http.MethodGet, "/v1/models/gpt-4o", aliceKey, ""); st != http.StatusNotFound {
		t.Errorf("GET /v1/models/gpt-4o: %d %s; want 404", st, b)
	}
	if got := p.got(); len(got) != 0 {
		t.Errorf("the provider got %q; want nothing", got)
	}
	if _, err := client(t, url, aliceKey).CreateChatCompletion(context.Background(), question("Alert 1")); err != nil {
		t.Errorf("gpt-4o-mini: %v", err)
	}
}
