package jsstore_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	openai "github.com/sashabaranov/go-openai"

	"github.com/oncegate/oncegate/internal/natstest"
	"github.com/oncegate/oncegate/internal/standin"
	"github.com/oncegate/oncegate/pkg/llmcache"
	"github.com/oncegate/oncegate/pkg/llmcache/jsstore"
)

// model is a stand-in model served over loopback HTTP.
type model struct {
	*standin.Server
	URL string
}

func startModel(t *testing.T, opts standin.Options) *model {
	t.Helper()
	s, err := standin.New(opts)
	if err != nil {
		t.Fatalf("standin.New: %v", err)
	}
	url, stop, err := s.Start("127.0.0.1:0")
	if err != nil {
		t.Fatalf("standin Start: %v", err)
	}
	t.Cleanup(func() { stop() })
	return &model{s, url}
}

func connect(t testing.TB, url string) jetstream.JetStream {
	t.Helper()
	nc, err := nats.Connect(url, nats.Name(t.Name()), nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	if err != nil {
		t.Fatalf("connecting to %s: %v", url, err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return js
}

// openCache opens a cache on a store in the shared buckets.
func openCache(t testing.TB, js jetstream.JetStream, so jsstore.Options, co llmcache.Options) *llmcache.Cache {
	t.Helper()
	st, err := jsstore.New(context.Background(), js, so)
	if err != nil {
		t.Fatalf("jsstore.New: %v", err)
	}
	c, err := llmcache.NewStore(st, co)
	if err != nil {
		t.Fatalf("NewStore: %v", err)
	}
	t.Cleanup(func() {
		if err := c.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return c
}

func client(t testing.TB, c *llmcache.Cache, baseURL string) *openai.Client {
	t.Helper()
	tr := &http.Transport{MaxIdleConnsPerHost: 64}
	t.Cleanup(tr.CloseIdleConnections)
	cfg := openai.DefaultConfig("sk-test")
	cfg.BaseURL = baseURL
	cfg.HTTPClient = c.HTTPClient(&http.Client{Transport: tr})
	return openai.NewClientWithConfig(cfg)
}

func triage(prompt string) openai.ChatCompletionRequest {
	return openai.ChatCompletionRequest{
		Model: "gpt-4o-mini",
		Messages: []openai.ChatCompletionMessage{
			{Role: openai.ChatMessageRoleSystem, Content: "You triage alerts."},
			{Role: openai.ChatMessageRoleUser, Content: prompt},
		},
	}
}

// TestHundredMissesOneCall sends 100 identical requests at once through
// three caches, each on its own server of a three-node cluster, sharing R3
// buckets: the model answers once, and every caller gets that answer.
func TestHundredMissesOneCall(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a three-server cluster")
	}
	servers := natstest.RunCluster(t, 3)
	m := startModel(t, standin.Options{Latency: 200 * time.Millisecond})
	clients := make([]*openai.Client, 3)
	caches := make([]*llmcache.Cache, 3)
	for i, s := range servers {
		caches[i] = openCache(t, connect(t, s.ClientURL()), jsstore.Options{Replicas: 3}, llmcache.Options{})
		clients[i] = client(t, caches[i], m.URL)
	}
	req := triage("Disk /var is 93% full on db-2.")
	var wg sync.WaitGroup
	answers := make([]string, 100)
	hows := make([]string, 100)
	errs := make([]error, 100)
	start := make(chan struct{})
	for i := range 100 {
		wg.Go(func() {
			<-start
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			r, err := clients[i%3].CreateChatCompletion(ctx, req)
			if err != nil {
				errs[i] = err
				return
			}
			answers[i] = r.Choices[0].Message.Content
			hows[i] = r.Header().Get(llmcache.HeaderCache)
		})
	}
	close(start)
	wg.Wait()
	count := map[string]int{}
	for i := range 100 {
		if errs[i] != nil {
			t.Fatalf("request %d: %v", i, errs[i])
		}
		if answers[i] != answers[0] || answers[i] == "" {
			t.Errorf("answer %d = %q; want %q", i, answers[i], answers[0])
		}
		count[hows[i]]++
	}
	if got := m.Stats().Completions; got != 1 {
		t.Errorf("upstream calls = %d; want 1", got)
	}
	var shared int64
	for _, c := range caches {
		for _, s := range c.Stats() {
			shared += s.Shared
		}
	}
	t.Logf("100 identical misses over 3 replicas: %v; %d shared", count, shared)
	if count["miss"] != 1 {
		t.Errorf("%d callers report a miss; want 1", count["miss"])
	}
}

// TestStreamReplayAcrossReplicas streams an answer through one cache and
// replays it through another on the same buckets, byte for byte, whole and
// chunked.
func TestStreamReplayAcrossReplicas(t *testing.T) {
	s := natstest.RunServer(t)
	m := startModel(t, standin.Options{})
	for _, chunk := range []int{0, 1024} {
		t.Run(fmt.Sprintf("chunk=%d", chunk), func(t *testing.T) {
			so := jsstore.Options{Bucket: fmt.Sprintf("replay-%d", chunk), ChunkBytes: chunk}
			a := openCache(t, connect(t, s.ClientURL()), so, llmcache.Options{})
			b := openCache(t, connect(t, s.ClientURL()), so, llmcache.Options{})
			before := m.Stats().Completions
			body := `{"model":"m","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"` +
				strings.Repeat("tell me a long story about certificates ", 60) + `"}]}`
			how1, b1 := postRaw(t, a, m.URL, body)
			how2, b2 := postRaw(t, b, m.URL, body)
			if how1 != "miss" || how2 != "hit" {
				t.Errorf("cache header %q then %q; want miss then hit", how1, how2)
			}
			if !bytes.Equal(b1, b2) || !bytes.HasSuffix(b1, []byte("data: [DONE]\n\n")) {
				t.Errorf("replayed stream differs: %d bytes then %d", len(b1), len(b2))
			}
			if chunk > 0 && len(b1) <= chunk {
				t.Fatalf("answer of %d bytes is not chunked at %d", len(b1), chunk)
			}
			// And through go-openai's stream reader.
			req := triage("Certificate expires in 3 days")
			req.Stream = true
			got1, got2 := readStream(t, client(t, a, m.URL), req), readStream(t, client(t, b, m.URL), req)
			if got1 == "" || got1 != got2 {
				t.Errorf("streamed text %q then %q", got1, got2)
			}
			if n := m.Stats().Completions - before; n != 2 {
				t.Errorf("upstream calls = %d; want 2", n)
			}
		})
	}
}

func postRaw(t *testing.T, c *llmcache.Cache, baseURL, body string) (string, []byte) {
	t.Helper()
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	hc := c.HTTPClient(&http.Client{Transport: tr})
	resp, err := hc.Post(baseURL+"/chat/completions", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatalf("POST: %v", err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("status %d, read: %v", resp.StatusCode, err)
	}
	return resp.Header.Get(llmcache.HeaderCache), b
}

func readStream(t *testing.T, oc *openai.Client, req openai.ChatCompletionRequest) string {
	t.Helper()
	st, err := oc.CreateChatCompletionStream(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	var text strings.Builder
	for {
		r, err := st.Recv()
		if errors.Is(err, io.EOF) {
			return text.String()
		}
		if err != nil {
			t.Fatalf("Recv: %v", err)
		}
		for _, c := range r.Choices {
			text.WriteString(c.Delta.Content)
		}
	}
}

// TestEndpointInKey: the same request to two endpoints through one shared
// cache is two answers; one configured endpoint name shares them.
func TestEndpointInKey(t *testing.T) {
	s := natstest.RunServer(t)
	m1 := startModel(t, standin.Options{})
	m2 := startModel(t, standin.Options{})
	js := connect(t, s.ClientURL())
	c := openCache(t, js, jsstore.Options{Bucket: "endpoints"}, llmcache.Options{})
	req := triage("Queue depth 10k on billing")
	for i, m := range []*model{m1, m2, m1} {
		r, err := client(t, c, m.URL).CreateChatCompletion(context.Background(), req)
		if err != nil {
			t.Fatal(err)
		}
		want := []string{"miss", "miss", "hit"}[i]
		if got := r.Header().Get(llmcache.HeaderCache); got != want {
			t.Errorf("call %d to %s: %s; want %s", i, m.URL, got, want)
		}
	}
	if a, b := m1.Stats().Completions, m2.Stats().Completions; a != 1 || b != 1 {
		t.Errorf("upstream calls %d and %d; want 1 and 1", a, b)
	}
	named := openCache(t, js, jsstore.Options{Bucket: "endpoints"}, llmcache.Options{Endpoint: "triage-model"})
	for i, m := range []*model{m1, m2} {
		r, err := client(t, named, m.URL).CreateChatCompletion(context.Background(), req)
		if err != nil {
			t.Fatal(err)
		}
		if got, want := r.Header().Get(llmcache.HeaderCache), []string{"miss", "hit"}[i]; got != want {
			t.Errorf("named endpoint, call %d: %s; want %s", i, got, want)
		}
	}
}

// TestSharedBudget spends one intent's budget from two replicas: together
// they stop at it.
func TestSharedBudget(t *testing.T) {
	s := natstest.RunServer(t)
	m := startModel(t, standin.Options{})
	const budget = 300
	so := jsstore.Options{Bucket: "budget"}
	a := openCache(t, connect(t, s.ClientURL()), so, llmcache.Options{Budget: budget})
	b := openCache(t, connect(t, s.ClientURL()), so, llmcache.Options{Budget: budget})
	ctx := llmcache.WithCall(context.Background(), llmcache.Call{Namespace: "n", Intent: "intent-1", Mode: llmcache.ModeBypass})
	denied := 0
	for i := range 20 {
		c := []*llmcache.Cache{a, b}[i%2]
		req := triage(fmt.Sprintf("retry %d", i))
		req.MaxTokens = 20
		_, err := client(t, c, m.URL).CreateChatCompletion(ctx, req)
		if errors.Is(err, llmcache.ErrBudgetExceeded) {
			denied++
		} else if err != nil {
			t.Fatal(err)
		}
	}
	sa, _ := a.Spent("n", "intent-1")
	sb, _ := b.Spent("n", "intent-1")
	if sa != sb || sa > budget || denied == 0 {
		t.Errorf("spent %d (replica a) and %d (replica b), %d denied; want one figure ≤ %d and some denied", sa, sb, denied, budget)
	}
	t.Logf("20 calls over two replicas: %d denied, %d of %d tokens spent", denied, sa, budget)
}

const (
	childURLEnv   = "JSSTORE_CHILD_NATS"
	childModelEnv = "JSSTORE_CHILD_MODEL"
)

// childLease is the fill claim's lease in the crash test.
const childLease = time.Second

// TestFillerChild is the process TestCrashedFillerLapses kills: it takes the
// fill claim and calls a model that never answers.
func TestFillerChild(t *testing.T) {
	url := os.Getenv(childURLEnv)
	if url == "" {
		t.Skip("run by TestCrashedFillerLapses")
	}
	c := openCache(t, connect(t, url), jsstore.Options{Bucket: "crash", Lease: childLease}, llmcache.Options{Endpoint: "model"})
	client(t, c, os.Getenv(childModelEnv)).CreateChatCompletion(context.Background(), triage("Node db-2 unreachable"))
	t.Fatal("the model answered")
}

// TestCrashedFillerLapses kills (SIGKILL) a process in the middle of its
// fill: another replica waits for the claim to lapse, takes it over and
// calls the model itself.
func TestCrashedFillerLapses(t *testing.T) {
	s := natstest.RunServer(t)
	asked := make(chan struct{}, 1)
	quit := make(chan struct{})
	var handlers sync.WaitGroup
	hang := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		handlers.Add(1)
		defer handlers.Done()
		select {
		case asked <- struct{}{}:
		default:
		}
		select {
		case <-r.Context().Done():
		case <-quit:
		}
	})}
	ln := listen(t)
	go hang.Serve(ln)
	t.Cleanup(func() { close(quit); hang.Close(); handlers.Wait() })

	cmd := exec.Command(os.Args[0], "-test.run=^TestFillerChild$", "-test.count=1")
	cmd.Env = append(os.Environ(), childURLEnv+"="+s.ClientURL(), childModelEnv+"=http://"+ln.Addr().String()+"/v1")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-asked:
	case <-time.After(30 * time.Second):
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatal("the child never called the model")
	}
	cmd.Process.Kill()
	cmd.Wait()

	m := startModel(t, standin.Options{})
	js := connect(t, s.ClientURL())
	c := openCache(t, js, jsstore.Options{Bucket: "crash", Lease: childLease},
		llmcache.Options{Endpoint: "model", SharedWait: time.Minute})
	// The dead filler's claim, as it last renewed it.
	kv, err := js.KeyValue(context.Background(), "crash")
	if err != nil {
		t.Fatal(err)
	}
	keys, err := kv.ListKeysFiltered(context.Background(), "f.*")
	if err != nil {
		t.Fatal(err)
	}
	var claims []jetstream.KeyValueEntry
	for k := range keys.Keys() {
		e, err := kv.Get(context.Background(), k)
		if err != nil {
			t.Fatal(err)
		}
		claims = append(claims, e)
	}
	if len(claims) != 1 {
		t.Fatalf("%d fill claims in the bucket; want the dead filler's one", len(claims))
	}
	begin := time.Now()
	r, err := client(t, c, m.URL).CreateChatCompletion(context.Background(), triage("Node db-2 unreachable"))
	took := time.Since(begin)
	if err != nil {
		t.Fatal(err)
	}
	if how := r.Header().Get(llmcache.HeaderCache); how != "miss" || m.Stats().Completions != 1 {
		t.Errorf("after the filler died: %s with %d upstream calls; want a miss with 1", how, m.Stats().Completions)
	}
	if age := time.Since(claims[0].Created()); age < childLease || took > 30*time.Second {
		t.Errorf("took the fill over %v after the claim's last renewal (waited %v); want after the lease of %v, and long before SharedWait", age, took, childLease)
	}
	t.Logf("the dead filler's claim was taken over after %v of waiting, %v after its last renewal (lease %v)", took, time.Since(claims[0].Created()), childLease)
}

func listen(t *testing.T) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return ln
}

// TestUnreachableStoreRefuses: with the servers gone, a call fails with
// ErrStoreUnavailable instead of paying for an answer that may be stored.
func TestUnreachableStoreRefuses(t *testing.T) {
	s := natstest.RunServer(t)
	m := startModel(t, standin.Options{})
	c := openCache(t, connect(t, s.ClientURL()), jsstore.Options{Bucket: "gone", Timeout: 2 * time.Second}, llmcache.Options{})
	s.Shutdown()
	s.WaitForShutdown()
	_, err := client(t, c, m.URL).CreateChatCompletion(context.Background(), triage("Disk full on db-3"))
	if !errors.Is(err, llmcache.ErrStoreUnavailable) {
		t.Errorf("error %v; want ErrStoreUnavailable", err)
	}
	if n := m.Stats().Completions; n != 0 {
		t.Errorf("upstream calls = %d; want 0", n)
	}
	if st := c.Stats(); len(st) != 1 || st[0].Unavailable != 1 {
		t.Errorf("Stats %+v; want one Unavailable", st)
	}
}
