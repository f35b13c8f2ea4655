package config

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/oncegate/oncegate/internal/secretfile"
)

// Proxy configures the OpenAI-compatible proxy: an HTTP endpoint that
// agents and services in any language call as they would call their model
// provider (/v1/chat/completions, streamed or not, and /v1/models), which
// answers through the LLM cache (llm.cache, shared by every replica with
// llm.cache.store: kv), paced by llm.rate_limit, with llm.base_url's
// endpoint and key behind it. It is off unless Listen is set (or the run
// command's -proxy flag gives an address).
//
// Clients authenticate with keys of their own, from KeysFile; the
// provider's key (llm.api_key_env) never leaves the process. A request's
// Idempotency-Key or X-Oncegate-Intent header names the intent of the call
// (an agent's step): its retries get its first answer, byte for byte, and
// pay once across replicas; BudgetTokens caps the tokens of one intent.
// MaxBudget and BudgetDuration cap what each client key spends, in US
// dollars at llm.prices, per period (as LiteLLM's max_budget and
// budget_duration); a call past a limit is answered 429, never sent. A
// client under a limit is refused (403) a model llm.prices does not
// price, and a call that sets no max_tokens reserves CompletionTokens
// (or the model's llm.prices max_output_tokens). Models, if set, is the
// list of models any client may call.
type Proxy struct {
	// Listen is the address the proxy serves on, such as
	// "127.0.0.1:8081"; without a host (":8081") it is on loopback, and
	// every interface must be asked for ("0.0.0.0:8081"). Empty (the
	// default) turns the proxy off.
	Listen string `yaml:"listen"`
	// KeysFile names the file of client keys: one client per line, its
	// name, then blanks, then its key (at least 20 characters); blank
	// lines and lines starting with # are skipped. Names are lower-case
	// letters, digits, '-' and '_'. The file must be readable by its owner
	// alone. Required with Listen.
	KeysFile string `yaml:"keys_file"`
	// SharedAnswers lets every client key be answered from the answers
	// paid by the others, for the same request. The default keeps each
	// client's answers to itself.
	SharedAnswers bool `yaml:"shared_answers"`
	// BudgetTokens caps the tokens spent on one intent (the calls that
	// share an Idempotency-Key or X-Oncegate-Intent, from one client); 0
	// (the default) means no cap.
	BudgetTokens int64 `yaml:"budget_tokens"`
	// MaxBudget is the most each client key may spend per BudgetDuration,
	// in US dollars at llm.prices; 0 (the default) means no limit.
	// Clients can set it per key.
	MaxBudget float64 `yaml:"max_budget"`
	// BudgetDuration is the period of MaxBudget, such as "1d" or "30d";
	// periods are counted from the Unix epoch (a day ends at midnight
	// UTC). 0 (the default) is one period that never ends.
	BudgetDuration Period `yaml:"budget_duration"`
	// Clients sets MaxBudget and BudgetDuration per client name.
	Clients map[string]ProxyClient `yaml:"clients"`
	// MaxBodyBytes bounds a request body; a larger one is answered 413.
	// The default is 8MiB.
	MaxBodyBytes ByteSize `yaml:"max_body_bytes"`
	// Models, if set, are the only models the proxy serves: a chat
	// completion for another is answered 403 (model_not_allowed), and
	// GET /v1/models/{id} for another 404, neither sent. Names match the
	// request's model exactly. Empty (the default) serves any model the
	// provider does.
	Models []string `yaml:"models"`
	// CompletionTokens is what a call under a spend limit (MaxBudget) or
	// an intent's budget (BudgetTokens) that sets neither max_tokens nor
	// max_completion_tokens reserves for its answer, per choice, before it
	// is sent; the reservation is settled to the answer's real usage
	// after. The model's llm.prices max_output_tokens is used when it is
	// smaller or CompletionTokens is 0 (the default). A call under a
	// spend limit with neither is refused 400 (max_tokens_required).
	// Below the model's output limit, an answer longer than this passes
	// the limit by its excess.
	CompletionTokens int64 `yaml:"completion_tokens"`
}

// ProxyClient is one client key's spend limit; a zero field takes the
// proxy's.
type ProxyClient struct {
	// MaxBudget is the most the client may spend per BudgetDuration, in
	// US dollars. The default is proxy.max_budget.
	MaxBudget float64 `yaml:"max_budget"`
	// BudgetDuration is the client's period. The default is
	// proxy.budget_duration.
	BudgetDuration Period `yaml:"budget_duration"`
}

// DefaultProxyMaxBody is the proxy's default request body limit.
const DefaultProxyMaxBody = ByteSize(8 << 20)

// ProxyOn reports whether the proxy is configured to serve.
func (c *Config) ProxyOn() bool { return c.Proxy.Listen != "" }

// Limited reports whether any client key may have a spend limit:
// MaxBudget, or a client's own.
func (p *Proxy) Limited() bool {
	if p.MaxBudget > 0 {
		return true
	}
	for _, c := range p.Clients {
		if c.MaxBudget > 0 {
			return true
		}
	}
	return false
}

// Allowed reports whether the proxy serves model (Models lists it, or is
// empty).
func (p *Proxy) Allowed(model string) bool {
	return len(p.Models) == 0 || slices.Contains(p.Models, model)
}

// Limit returns client's spend limit: the most it may spend per period,
// and the period (0 when Max is 0: no limit).
func (p *Proxy) Limit(client string) (max float64, period time.Duration) {
	max, period = p.MaxBudget, time.Duration(p.BudgetDuration)
	if c, ok := p.Clients[client]; ok {
		if c.MaxBudget != 0 {
			max = c.MaxBudget
		}
		if c.BudgetDuration != 0 {
			period = time.Duration(c.BudgetDuration)
		}
	}
	return max, period
}

func (c *Config) proxyDefaults() {
	setDefault(c, "proxy.max_body_bytes", &c.Proxy.MaxBodyBytes, DefaultProxyMaxBody)
}

func (v *validator) proxy() {
	p := &v.c.Proxy
	if p.Listen != "" {
		if err := checkListen(p.Listen, false); err != nil {
			v.add("proxy.listen", err)
		}
		if p.KeysFile == "" {
			v.add("proxy.keys_file", missing("a file of client keys: the proxy serves only clients with a key"))
		}
	}
	if p.BudgetTokens < 0 {
		v.add("proxy.budget_tokens", invalid("must be 0 or more, got %d", p.BudgetTokens))
	}
	budget := func(path string, max float64, d Period) {
		if !(max >= 0) {
			v.add(path+".max_budget", invalid("must be 0 or more US dollars, got %v", max))
		}
		if d < 0 {
			v.add(path+".budget_duration", invalid("must be 0 or more, got %s", d))
		}
	}
	budget("proxy", p.MaxBudget, p.BudgetDuration)
	for name, c := range p.Clients {
		if !ValidClientName(name) {
			v.add("proxy.clients."+name, invalid("%q is not a client name: lower-case letters, digits, '-' and '_'", name))
		}
		budget("proxy.clients."+name, c.MaxBudget, c.BudgetDuration)
	}
	if p.MaxBodyBytes <= 0 {
		v.add("proxy.max_body_bytes", invalid("must be positive"))
	}
	if p.CompletionTokens < 0 {
		v.add("proxy.completion_tokens", invalid("must be 0 or more, got %d", p.CompletionTokens))
	}
	for i, m := range p.Models {
		switch {
		case strings.TrimSpace(m) != m || m == "":
			v.add(indexPath("proxy.models", i), invalid("%q is not a model name", m))
		case slices.Index(p.Models, m) < i:
			v.add(indexPath("proxy.models", i), invalid("%q is listed twice", m))
		}
	}
}

// ProxyWarnings are what config check says about the proxy's spend
// limits and models that is not an error: the models a client under a
// limit will be refused, and calls without max_tokens that will be, and a
// limit counted at the built-in example price.
func (c *Config) ProxyWarnings() []string {
	p := &c.Proxy
	if !p.Limited() {
		return nil
	}
	prices := c.LLM.Prices
	var out []string
	if c.meta.isDefault("llm.prices", prices) {
		out = append(out, fmt.Sprintf("proxy: the spend limits are counted at llm.prices' built-in example (gpt-4o-mini at OpenAI's list price of %s), not your provider's prices: set llm.prices", DefaultPricesAsOf))
	}
	_, star := prices["*"]
	models := p.Models
	if len(models) == 0 {
		models = slices.Sorted(mapKeys(prices))
		if !star {
			out = append(out, fmt.Sprintf("proxy: clients with a spend limit are refused every model llm.prices does not price (it prices %s); list the models clients may call in proxy.models",
				strings.Join(quoteAll(models), ", ")))
		}
	}
	for _, m := range models {
		pr, ok := prices[m]
		if !ok && !star {
			out = append(out, fmt.Sprintf("proxy: proxy.models lists %q, which llm.prices does not price: clients with a spend limit are refused it", m))
			continue
		}
		if !ok {
			pr = prices["*"]
		}
		if p.CompletionTokens == 0 && pr.MaxOutputTokens == 0 {
			at := "llm.prices[" + m + "].max_output_tokens"
			if !ok {
				at = "llm.prices[*].max_output_tokens"
			}
			out = append(out, fmt.Sprintf("proxy: a call to %q from a client with a spend limit that sets no max_tokens is refused: set proxy.completion_tokens or %s", m, at))
		}
	}
	return out
}

func quoteAll(ss []string) []string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = strconv.Quote(s)
	}
	return out
}

// ValidClientName reports whether s can name a proxy client in a keys
// file and in proxy.clients.
func ValidClientName(s string) bool { return secretfile.ValidName(s) }

func (x *explainer) proxy() {
	p := &x.c.Proxy
	state := "off (set proxy.listen, or run -proxy ADDR)"
	if p.Listen != "" {
		state = "http://" + p.Listen + "/v1 (OpenAI-compatible), client keys from " + p.KeysFile
	}
	answers := "each client's own"
	if p.SharedAnswers {
		answers = "shared between clients"
	}
	intent := "no cap"
	if p.BudgetTokens > 0 {
		intent = strconv.FormatInt(p.BudgetTokens, 10) + " tokens"
	}
	models := "any the provider serves"
	if len(p.Models) > 0 {
		models = "only " + strings.Join(p.Models, ", ")
	}
	reserve := "the model's max_output_tokens"
	if p.CompletionTokens > 0 {
		reserve = strconv.FormatInt(p.CompletionTokens, 10) + " completion tokens, or the model's max_output_tokens if fewer"
	}
	x.row("OpenAI proxy", x.d("proxy.listen", p.Listen, state),
		"answers "+x.d("proxy.shared_answers", p.SharedAnswers, answers),
		"per intent "+x.d("proxy.budget_tokens", p.BudgetTokens, intent),
		"per client key "+x.d("proxy.max_budget", p.MaxBudget, spendLimit(p.MaxBudget, p.BudgetDuration)))
	x.row("", "models "+x.d("proxy.models", p.Models, models),
		"a call without max_tokens reserves "+x.d("proxy.completion_tokens", p.CompletionTokens, reserve))
	names := make([]string, 0, len(p.Clients))
	for n := range p.Clients {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		max, period := p.Limit(n)
		x.row("  client "+n, spendLimit(max, Period(period)))
	}
}

// spendLimit describes a spend limit.
func spendLimit(max float64, d Period) string {
	switch {
	case max == 0:
		return "no spend limit"
	case d == 0:
		return fmt.Sprintf("$%.2f in all", max)
	}
	return fmt.Sprintf("$%.2f per %s", max, d)
}

// Period is a length of time written as a Go duration ("24h", "90m") or
// in whole days ("30d"), as LiteLLM's budget_duration is.
type Period time.Duration

// String returns the period in days when it is whole days, else as a Go
// duration.
func (p Period) String() string {
	d := time.Duration(p)
	if d > 0 && d%(24*time.Hour) == 0 {
		return strconv.FormatInt(int64(d/(24*time.Hour)), 10) + "d"
	}
	return formatDuration(d)
}

// MarshalText implements encoding.TextMarshaler.
func (p Period) MarshalText() ([]byte, error) { return []byte(p.String()), nil }

// UnmarshalText implements encoding.TextUnmarshaler.
func (p *Period) UnmarshalText(b []byte) error {
	s := strings.TrimSpace(string(b))
	if days, ok := strings.CutSuffix(s, "d"); ok {
		n, err := strconv.ParseInt(days, 10, 64)
		if err != nil || n < 0 || n > 100*365 {
			return fmt.Errorf("invalid period %q: want whole days such as \"30d\", or a Go duration such as \"24h\"", s)
		}
		*p = Period(time.Duration(n) * 24 * time.Hour)
		return nil
	}
	d, err := parseDuration(s)
	if err != nil {
		return fmt.Errorf("invalid period %q: want whole days such as \"30d\", or a Go duration such as \"24h\"", s)
	}
	*p = Period(d)
	return nil
}
