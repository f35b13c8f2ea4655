package config

import (
	"fmt"
	"math"
	"reflect"
	"slices"
	"time"
)

// LLM configures the model endpoint and the response cache.
type LLM struct {
	// BaseURL is an OpenAI-compatible endpoint (OpenAI, Azure, vLLM,
	// Ollama, llama.cpp server). Empty (the default) is no endpoint: a
	// configuration with a model step, or the proxy, then needs Standin,
	// or it is refused at start and by config check.
	BaseURL string `yaml:"base_url"`
	// Standin answers the model steps (and the proxy) with the built-in
	// offline stand-in model, which makes its answers up and labels them
	// as such, instead of an endpoint: for trying a configuration out,
	// never for real work. It must be asked for by name (true), and it
	// excludes BaseURL. The default is false; the demo sets it.
	Standin bool `yaml:"standin"`
	// APIKeyEnv names the environment variable holding the API key; the
	// key itself is never in the file. The variable must be set when
	// BaseURL is not on loopback (set it empty, or APIKeyEnv to "", for an
	// endpoint that takes no key). The default is "OPENAI_API_KEY".
	APIKeyEnv string `yaml:"api_key_env"`
	// Model is the model steps use unless they name one. The default is
	// "gpt-4o-mini".
	Model string `yaml:"model"`
	// Timeout bounds one model call. The default is 60s.
	Timeout time.Duration `yaml:"timeout"`
	// Cache configures the response cache.
	Cache Cache `yaml:"cache"`
	// RateLimit is the endpoint's request and token budgets; off by
	// default. See ratelimit.go.
	RateLimit RateLimit `yaml:"rate_limit"`
	// Prices are the USD prices per million tokens, by model, for the
	// cost and savings figures and the spend limits (step.max_budget,
	// proxy.max_budget). The entry "*" prices every model not listed. A
	// prices key in the file replaces the whole list. The default, used
	// only when the file names no prices, is one built-in example
	// (gpt-4o-mini at OpenAI's list price of July 2024), marked as such
	// by config check: prices change, so set your provider's.
	Prices map[string]Price `yaml:"prices"`
}

// Cache configures the LLM response cache.
type Cache struct {
	// TTL is how long an answer is kept. The default is 24h.
	TTL time.Duration `yaml:"ttl"`
	// MaxEntryBytes bounds one cached answer; larger answers are returned
	// but not cached. The default is 1MiB.
	MaxEntryBytes ByteSize `yaml:"max_entry_bytes"`
	// BudgetTokens caps the tokens spent on one intent key, across all its
	// retries; 0 (the default) means no cap. Steps inherit it.
	BudgetTokens int64 `yaml:"budget_tokens"`
	// Store is where answers and budgets are kept: StoreBadger (the local
	// Badger directory, one process) or StoreKV (JetStream KV buckets
	// shared by every replica, with one model call per miss across them).
	// The default is StoreKV when ledger.store is StoreKV, else
	// StoreBadger. See cache_store.go.
	Store string `yaml:"store"`
	// Endpoint names the model endpoint in cache keys, so that answers
	// from one endpoint are never served for another. The default, empty,
	// is llm.base_url (the stand-in model is "oncegate-standin").
	Endpoint string `yaml:"endpoint"`
	// KV configures the buckets, when Store is StoreKV.
	KV CacheKV `yaml:"kv"`
	// Share puts a model step's calls through the cache keyed by the
	// rendered prompt, so that triggers of different intents that send the
	// same prompt share one answer. Without it (the default), a pipeline
	// with a ledger keeps each answer in its intent's ledger record, where
	// a retry, a takeover or a redrive of the intent finds it, and its
	// calls do not touch the cache's store (budgets and spend limits still
	// apply); a pipeline without a ledger (gate-window) keeps its answers
	// in the cache, keyed by the intent.
	Share bool `yaml:"share"`
}

// Price is what a model costs, in USD per million tokens.
type Price struct {
	// PromptPerMTok is the price of a million prompt tokens, in USD.
	PromptPerMTok float64 `yaml:"prompt_per_mtok"`
	// CompletionPerMTok is the price of a million completion tokens, in
	// USD.
	CompletionPerMTok float64 `yaml:"completion_per_mtok"`
	// MaxOutputTokens is the most completion tokens the model writes in
	// one answer (its output limit, from the provider's model card); 0
	// (the default) means unknown. A proxy call under a spend limit that
	// sets no max_tokens reserves this many completion tokens per choice
	// (or proxy.completion_tokens, if smaller).
	MaxOutputTokens int64 `yaml:"max_output_tokens"`
}

// Defaults of the llm section.
const (
	DefaultAPIKeyEnv     = "OPENAI_API_KEY"
	DefaultModel         = "gpt-4o-mini"
	DefaultLLMTimeout    = 60 * time.Second
	DefaultCacheTTL      = 24 * time.Hour
	DefaultMaxEntryBytes = ByteSize(1 << 20)
)

// defaultPrices are the prices filled in when the file has no llm.prices:
// one example, not a price list to trust. Explain and config check mark
// it as built in, with its date.
func defaultPrices() map[string]Price {
	return map[string]Price{
		"gpt-4o-mini": {PromptPerMTok: 0.15, CompletionPerMTok: 0.60, MaxOutputTokens: 16_384},
	}
}

// DefaultPricesAsOf is when the built-in example price (defaultPrices) was
// OpenAI's list price.
const DefaultPricesAsOf = "2024-07"

// llmDefaults fills in the llm section: the endpoint, the cache (its
// store too), the rate limit and the prices.
func (c *Config) llmDefaults() {
	m := &c.LLM
	setDefault(c, "llm.base_url", &m.BaseURL, "")
	setDefault(c, "llm.api_key_env", &m.APIKeyEnv, DefaultAPIKeyEnv)
	setDefault(c, "llm.model", &m.Model, DefaultModel)
	setDefault(c, "llm.timeout", &m.Timeout, DefaultLLMTimeout)
	setDefault(c, "llm.cache.ttl", &m.Cache.TTL, DefaultCacheTTL)
	setDefault(c, "llm.cache.max_entry_bytes", &m.Cache.MaxEntryBytes, DefaultMaxEntryBytes)
	setDefault(c, "llm.cache.budget_tokens", &m.Cache.BudgetTokens, 0)
	setDefault(c, "llm.cache.share", &m.Cache.Share, false)
	c.cacheStoreDefaults()
	c.rateLimitDefaults()
	setDefault(c, "llm.prices", &m.Prices, defaultPrices())
}

// llm checks the llm section: the endpoint, its key, the cache, the rate
// limit and the prices.
func (v *validator) llm() {
	m := &v.c.LLM
	if m.BaseURL != "" {
		if err := checkURL(m.BaseURL, "http", "https"); err != nil {
			v.add("llm.base_url", err)
		}
		if m.Standin {
			v.add("llm.standin", invalid("the stand-in model answers instead of llm.base_url's endpoint: set one, not both"))
		}
	}
	if m.APIKeyEnv != "" {
		if err := checkEnvName(m.APIKeyEnv); err != nil {
			v.add("llm.api_key_env", err)
		}
	}
	if m.Model == "" {
		v.add("llm.model", missing("a model is required"))
	}
	v.positive("llm.timeout", m.Timeout)
	v.positive("llm.cache.ttl", m.Cache.TTL)
	if m.Cache.MaxEntryBytes <= 0 {
		v.add("llm.cache.max_entry_bytes", invalid("must be positive, got %d", m.Cache.MaxEntryBytes))
	}
	if m.Cache.BudgetTokens < 0 {
		v.add("llm.cache.budget_tokens", invalid("must be 0 (no cap) or positive, got %d", m.Cache.BudgetTokens))
	}
	v.cacheStore()
	v.rateLimit()
	for _, model := range slices.Sorted(mapKeys(m.Prices)) {
		p := m.Prices[model]
		at := keyPath("llm.prices", model)
		if model == "" {
			v.add(at, invalid("a price needs a model name"))
		}
		for _, f := range []struct {
			key string
			val float64
		}{{"prompt_per_mtok", p.PromptPerMTok}, {"completion_per_mtok", p.CompletionPerMTok}} {
			if f.val < 0 || math.IsInf(f.val, 0) || math.IsNaN(f.val) {
				v.add(joinPath(at, f.key), invalid("must be a finite price of 0 or more, got %v", f.val))
			}
		}
		if p.MaxOutputTokens < 0 {
			v.add(joinPath(at, "max_output_tokens"), invalid("must be 0 (unknown) or more, got %d", p.MaxOutputTokens))
		}
	}
}

// llm explains the llm section: the endpoint, its key, the cache and the
// rate limit.
func (x *explainer) llm() {
	c := x.c
	m := &c.LLM
	endpoint := x.d("llm.base_url", m.BaseURL, c.ModelEndpoint())
	if m.Standin {
		endpoint = x.d("llm.standin", m.Standin, c.ModelEndpoint())
	}
	x.row("llm", endpoint,
		"model "+x.d("llm.model", m.Model, m.Model),
		"timeout "+x.d("llm.timeout", m.Timeout, formatDuration(m.Timeout)))
	key := "no API key"
	if m.APIKeyEnv != "" {
		key = "API key from $" + m.APIKeyEnv
	}
	x.row("", x.d("llm.api_key_env", m.APIKeyEnv, key))
	x.row("llm cache", "ttl "+x.d("llm.cache.ttl", m.Cache.TTL, formatDuration(m.Cache.TTL)),
		"max entry "+x.d("llm.cache.max_entry_bytes", m.Cache.MaxEntryBytes, m.Cache.MaxEntryBytes.String()),
		"token budget per intent "+x.d("llm.cache.budget_tokens", m.Cache.BudgetTokens, budgetText(m.Cache.BudgetTokens)))
	share := "steps' answers kept in their intents' ledger records"
	if m.Cache.Share {
		share = "steps' answers shared by identical prompts"
	}
	x.row("", x.d("llm.cache.share", m.Cache.Share, share))
	x.explainRateLimit()
}

// prices explains llm.prices, marking the built-in example as such.
func (x *explainer) prices() {
	m := &x.c.LLM
	if len(m.Prices) == 0 {
		x.row("prices", "none (costs are not reported)")
	}
	for i, model := range slices.Sorted(mapKeys(m.Prices)) {
		label := ""
		if i == 0 {
			label = "prices"
		}
		p := m.Prices[model]
		text := fmt.Sprintf("%s: $%v prompt, $%v completion per million tokens", model, p.PromptPerMTok, p.CompletionPerMTok)
		if p.MaxOutputTokens > 0 {
			text += fmt.Sprintf(", at most %d output tokens", p.MaxOutputTokens)
		}
		if x.c.meta.isDefault("llm.prices", m.Prices) {
			text += " (built-in example, OpenAI's list price of " + DefaultPricesAsOf + ": set your provider's)"
		}
		x.row(label, text)
	}
}

// The llm section's api_key are refused with their reason: secrets are not read from the file.
func init() {
	refused[reflect.TypeFor[LLM]()] = map[string]string{
		"api_key": "the API key is not read from the config file: name the environment variable that holds it with api_key_env (default OPENAI_API_KEY)",
	}
}
