package count

import (
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestDir counts a package written for the purpose.
func TestDir(t *testing.T) {
	dir := t.TempDir()
	src := `package p

// T is a type.
type T struct {
	// A is documented.
	A int
	B, c int
	D
}

// D is embedded.
type D struct{}

// I is an interface.
type I interface {
	// M is documented.
	M()
	N()
}

func (T) Exported()   {}
func (T) String() string { return "" }
func (t) Hidden()     {}

type t struct{}

const X, y = 1, 2

// F is a function.
func F() {}
`
	if err := os.WriteFile(filepath.Join(dir, "p.go"), []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	c, err := Dir(dir)
	if err != nil {
		t.Fatal(err)
	}
	// Names: T, D, I, X, F. Methods: T.Exported, T.String, I.M, I.N.
	// Fields: T.A, T.B, T.D.
	if c.Names != 5 || c.Methods != 4 || c.Fields != 3 {
		t.Errorf("Dir = %d names, %d methods, %d fields; want 5, 4, 3", c.Names, c.Methods, c.Fields)
	}
	want := "I.N T.B T.D T.Exported X"
	if got := strings.Join(c.Undocumented, " "); got != want {
		t.Errorf("undocumented = %q; want %q", got, want)
	}
}

// TestDedupeDocumented: every exported name of the dedupe packages has a
// doc comment.
func TestDedupeDocumented(t *testing.T) {
	root := filepath.Join("..", "..", "..", "pkg", "dedupe")
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil || !d.IsDir() || d.Name() == "testdata" {
			return err
		}
		c, err := Dir(path)
		if err != nil {
			return err
		}
		for _, u := range c.Undocumented {
			t.Errorf("%s: %s has no doc comment", path, u)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// apiBudget is issue 16's bound on the exported API a user of the dedupe
// packages sees: every package under pkg/dedupe but internal ones, names,
// methods and fields together. Issue 21 added two (MaxResultBytes and
// ErrResultTooLarge, so that a result Do cannot store is an error a
// caller can name). Issue 25 added 19: in pkg/dedupe, ErrMismatch and
// DoOptions.RejectMismatch (so that a caller can answer a key reused with
// another payload with a 422), IntentFrom (a function's own intent, to
// send downstream), Run (Do for a typed value) and ClientKey (a key from a
// client's Idempotency-Key string), less DoOptions.Fingerprint (Do takes
// the Intent); jsonce.Consume (handlers whose context ends on Stop); and
// the package httponce, 14 (Middleware, Options and its 10 fields, the
// header names HeaderKey and HeaderReplayed). Wave 3 added one,
// Keyer.LookupIntent: the intent and a field of the payload from one
// canonicalization, where Intent and canon.Lookup take two (the consumer's
// key.status read it twice per trigger, on the gate's hot path). Issue 34
// added four: dedupe.ErrClosed (a closed ledger's error, which users
// could not name), dedupe.MaybeDone (an error after which the work may
// have happened, so that the retry is told TakenOver), and httponce's
// ErrNoClient and Options.SharedKeys (Middleware refuses options that
// cannot tell clients apart, unless one key space is chosen knowingly).
// Issue 39 added one: jskv.Options.ClockSkew (a lapsed claim is taken over
// only that long after its lease, as the consumer's ledger.max_clock_skew
// has it, so that a process whose clock runs ahead does not run the work
// while its holder still may).
const apiBudget = 116

// TestDedupeAPIBudget: the user-visible dedupe packages stay within
// apiBudget exported identifiers.
func TestDedupeAPIBudget(t *testing.T) {
	root := filepath.Join("..", "..", "..", "pkg", "dedupe")
	var total Counts
	per := map[string]int{}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return err
		}
		if d.Name() == "testdata" || d.Name() == "internal" {
			return filepath.SkipDir
		}
		c, err := Dir(path)
		if err != nil {
			return err
		}
		per[path] = c.Total()
		total.Add(c)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if total.Total() > apiBudget {
		t.Errorf("the dedupe packages export %d identifiers (%v); the budget is %d", total.Total(), per, apiBudget)
	}
}

// llmcacheBudget bounds the exported API of package llmcache itself, and
// llmcacheAllBudget that of every package under pkg/llmcache, names,
// methods and fields together. Issue 38 took llmcache from 157 to 97 (233
// to 169 with its subpackages): the per-step counters, the store's summary,
// a stored answer and its usage, the tokens spent on an intent, and the
// request reading and estimation the proxy, the admin service and the rate
// limiter share with the cache moved to internal/llmhook, and Prices.Cost
// became unexported; BudgetStore (Store's budget methods, which a store
// may now leave out) is one name more, Options.StoreRetry (deprecated,
// bounding nothing) one less, and badgerstore.New took an Options
// (CloseDB) for its bool, and jsstore spells its options' errors and
// defaults as the other stores do (an error wrapping
// llmcache.ErrInvalidOptions, the defaults in the Options docs), less its
// own ErrInvalidOptions and five Default constants. What stays is what a user embeds the cache for: the
// transport and HTTP client in front of go-openai, a Call per request, a
// token budget, spend limits, and the Store a shared store implements.
const (
	llmcacheBudget    = 97
	llmcacheAllBudget = 169
)

// TestLLMCacheAPIBudget: package llmcache, and the llmcache packages
// together, stay within their budgets of exported identifiers.
func TestLLMCacheAPIBudget(t *testing.T) {
	root := filepath.Join("..", "..", "..", "pkg", "llmcache")
	var total Counts
	per := map[string]int{}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return err
		}
		if d.Name() == "testdata" || d.Name() == "internal" {
			return filepath.SkipDir
		}
		c, err := Dir(path)
		if err != nil {
			return err
		}
		per[path] = c.Total()
		total.Add(c)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if n := per[root]; n > llmcacheBudget {
		t.Errorf("package llmcache exports %d identifiers; the budget is %d", n, llmcacheBudget)
	}
	if total.Total() > llmcacheAllBudget {
		t.Errorf("the llmcache packages export %d identifiers (%v); the budget is %d", total.Total(), per, llmcacheAllBudget)
	}
}

// TestLLMCacheDocumented: every exported name of the llmcache packages has
// a doc comment.
func TestLLMCacheDocumented(t *testing.T) {
	root := filepath.Join("..", "..", "..", "pkg", "llmcache")
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil || !d.IsDir() || d.Name() == "testdata" {
			return err
		}
		c, err := Dir(path)
		if err != nil {
			return err
		}
		for _, u := range c.Undocumented {
			t.Errorf("%s: %s has no doc comment", path, u)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
