package jsstore_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	openai "github.com/sashabaranov/go-openai"

	"github.com/oncegate/oncegate/internal/llmhook"
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

func connect(t testing.TB, url string, opts ...nats.Option) jetstream.JetStream {
	t.Helper()
	nc, err := nats.Connect(url, append([]nats.Option{nats.Name(t.Name()), nats.MaxReconnects(-1), nats.ReconnectWait(50 * time.Millisecond)}, opts...)...)
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
		for _, s := range llmhook.Stats(c) {
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
	sa, _ := llmhook.Spent(a, "n", "intent-1")
	sb, _ := llmhook.Spent(b, "n", "intent-1")
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
	if st := llmhook.Stats(c); len(st) != 1 || st[0].Unavailable != 1 {
		t.Errorf("Stats %+v; want one Unavailable", st)
	}
}

// TestExpiredAnswerOneCall: the answers bucket keeps an answer past the
// cache's TTL (its own TTL has a margin), so a key whose answer expired
// still has a head, and a released fill claim. Two replicas that miss on
// it at once must claim the fill as for a new key: the model, which counts
// its own calls, answers once, and both callers get that answer.
func TestExpiredAnswerOneCall(t *testing.T) {
	s := natstest.RunServer(t)
	m := startModel(t, standin.Options{Latency: 300 * time.Millisecond})
	so := jsstore.Options{Bucket: "expired", Lease: 2 * time.Second}
	req := triage("Replica lag 40s on db-4")

	// An answer stored two hours ago with a TTL of one: expired now.
	past := openCache(t, connect(t, s.ClientURL()), so, llmcache.Options{
		TTL: time.Hour, Clock: func() time.Time { return time.Now().Add(-2 * time.Hour) }})
	if _, err := client(t, past, m.URL).CreateChatCompletion(context.Background(), req); err != nil {
		t.Fatal(err)
	}
	replicas := []*llmcache.Cache{
		openCache(t, connect(t, s.ClientURL()), so, llmcache.Options{}),
		openCache(t, connect(t, s.ClientURL()), so, llmcache.Options{}),
	}
	before := m.Stats().Completions
	var wg sync.WaitGroup
	answers, hows := make([]string, 4), make([]string, 4)
	errs := make([]error, 4)
	start := make(chan struct{})
	for i := range 4 {
		wg.Go(func() {
			<-start
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			r, err := client(t, replicas[i%2], m.URL).CreateChatCompletion(ctx, req)
			if err != nil {
				errs[i] = err
				return
			}
			answers[i], hows[i] = r.Choices[0].Message.Content, r.Header().Get(llmcache.HeaderCache)
		})
	}
	close(start)
	wg.Wait()
	for i := range 4 {
		if errs[i] != nil {
			t.Fatalf("caller %d: %v", i, errs[i])
		}
		if answers[i] != answers[0] {
			t.Errorf("caller %d got %q; want %q", i, answers[i], answers[0])
		}
	}
	if n := m.Stats().Completions - before; n != 1 {
		t.Errorf("model calls for the expired answer = %d (callers: %v); want 1", n, hows)
	}
}

// TestHeldAnswerSurvivesRestart: the NATS server goes down while the model
// answers, so the answer's write fails. The answer was paid for: it is held
// in the process and written once the server is back. Asked again before
// the restart (from memory) and after it (from the bucket, on this replica
// and another), the model, which counts its own calls, is not called again.
// The connection buffers nothing while it reconnects (a write buffered then
// may be flushed to the server after all, or lost with it). (Until issue 38
// the cache also took a deprecated Options.StoreRetry of a nanosecond here,
// to show that it bounded nothing; the option is gone.)
func TestHeldAnswerSurvivesRestart(t *testing.T) {
	s, dir, port := serverOnDisk(t)
	m := startModel(t, standin.Options{})
	model := downingModel(t, s, m)
	url := model.URL + "/v1"

	so := jsstore.Options{Bucket: "held", Timeout: time.Second}
	co := llmcache.Options{}
	c := openCache(t, connect(t, s.ClientURL(), nats.ReconnectBufSize(-1)), so, co)
	req := triage("Certificate for api.example.com expires in 2 days")
	ask := func(c *llmcache.Cache, when string) (string, string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		r, err := client(t, c, url).CreateChatCompletion(ctx, req)
		if err != nil {
			t.Errorf("%s: %v", when, err)
			return "", ""
		}
		return r.Choices[0].Message.Content, r.Header().Get(llmcache.HeaderCacheKey)
	}
	first, key := ask(c, "the first call, the server going down")
	if first == "" {
		t.Fatal("no first answer")
	}
	held := func() (n int64) {
		for _, st := range llmhook.Stats(c) {
			n += st.Held
		}
		return n
	}
	if n := held(); n != 1 {
		t.Errorf("Stats().Held = %d while the server is down; want 1", n)
	}
	if got, _ := ask(c, "asked again while the server is down"); got != first {
		t.Errorf("asked again while the server is down: %q; want the held answer %q", got, first)
	}
	if n := m.Stats().Completions; n != 1 {
		t.Errorf("model calls before the restart = %d; want 1", n)
	}

	natstest.RunServer(t, func(o *server.Options) { o.StoreDir, o.Port = dir, port }) // on the same port and store; the test's cleanup stops it
	js := connect(t, s.ClientURL())
	deadline := time.Now().Add(15 * time.Second)
	if err := waitStored(js, "held", "a."+key, deadline); err != nil {
		t.Errorf("the held answer was not in the bucket 15s after the restart: %v", err)
	}
	for held() != 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if n := held(); n != 0 {
		t.Errorf("Stats().Held = %d once the answer is stored; want 0", n)
	}
	if got, _ := ask(c, "asked again after the restart"); got != first {
		t.Errorf("asked again after the restart: %q; want %q", got, first)
	}
	other := openCache(t, js, so, co)
	if got, _ := ask(other, "another replica, after the restart"); got != first {
		t.Errorf("another replica after the restart: %q; want %q", got, first)
	}
	if n := m.Stats().Completions; n != 1 {
		t.Errorf("model calls = %d; want 1: a paid answer was paid again", n)
	}
}

const (
	holdChildNATS  = "JSSTORE_HOLD_NATS"
	holdChildModel = "JSSTORE_HOLD_MODEL"
	holdChildDir   = "JSSTORE_HOLD_DIR"
)

// TestHoldChild is the process TestPaidAnswerOutlivesKill kills: it asks
// the model, whose answer comes as the NATS server goes down, says which
// answer it got, and waits to be killed.
func TestHoldChild(t *testing.T) {
	url := os.Getenv(holdChildNATS)
	if url == "" {
		t.Skip("run by TestPaidAnswerOutlivesKill")
	}
	c := openCache(t, connect(t, url, nats.ReconnectBufSize(-1)), jsstore.Options{Bucket: "hold", Timeout: time.Second},
		llmcache.Options{Endpoint: "model", HoldDir: os.Getenv(holdChildDir)})
	r, err := client(t, c, os.Getenv(holdChildModel)).CreateChatCompletion(context.Background(), triage("Queue depth 12k on orders"))
	if err != nil {
		t.Fatal(err)
	}
	fmt.Printf("answer %s %q\n", r.Header().Get(llmcache.HeaderCacheKey), r.Choices[0].Message.Content)
	time.Sleep(time.Minute)
	t.Fatal("not killed")
}

// TestPaidAnswerOutlivesKill (the full soaks' tokens past the bound): a
// replica got the model's answer as the NATS server went down, so the
// answer's write could not land, and was killed (SIGKILL) before the
// server came back. The answer lived only in its memory: the next process
// found nothing, and the intent's retry paid the model again. With a
// HoldDir the answer waits on the replica's disk: the replica's next
// process stores it, and another replica's call is a hit. The model,
// which counts its own calls, answers once.
func TestPaidAnswerOutlivesKill(t *testing.T) {
	s, dir, port := serverOnDisk(t)
	m := startModel(t, standin.Options{})
	model := downingModel(t, s, m)

	hold := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^TestHoldChild$", "-test.count=1")
	cmd.Env = append(os.Environ(), holdChildNATS+"="+s.ClientURL(), holdChildModel+"="+model.URL+"/v1", holdChildDir+"="+hold)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	got := make(chan []string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if f := strings.Fields(sc.Text()); len(f) >= 2 && f[0] == "answer" {
				got <- f
				break
			}
		}
		io.Copy(io.Discard, out)
	}()
	var key string
	select {
	case f := <-got:
		key = f[1]
	case <-time.After(30 * time.Second):
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatal("the child got no answer")
	}
	// The child has its answer, and the server is down: its write has not
	// landed.
	cmd.Process.Kill()
	cmd.Wait()

	natstest.RunServer(t, func(o *server.Options) { o.StoreDir, o.Port = dir, port }) // on the same port and store; the test's cleanup stops it
	js := connect(t, s.ClientURL())
	so := jsstore.Options{Bucket: "hold", Timeout: time.Second}
	openCache(t, js, so, llmcache.Options{Endpoint: "model", HoldDir: hold}) // the replica's next process
	if err := waitStored(js, "hold", "a."+key, time.Now().Add(10*time.Second)); err != nil {
		t.Errorf("the killed replica's answer is not in the bucket 10s after its next start: %v", err)
	}
	other := openCache(t, js, so, llmcache.Options{Endpoint: "model"})
	r, err := client(t, other, model.URL+"/v1").CreateChatCompletion(context.Background(), triage("Queue depth 12k on orders"))
	if err != nil {
		t.Fatal(err)
	}
	if how := r.Header().Get(llmcache.HeaderCache); how != "hit" {
		t.Errorf("another replica's call: %s; want a hit", how)
	}
	if n := m.Stats().Completions; n != 1 {
		t.Errorf("model calls = %d; want 1: the killed replica's paid answer was paid again", n)
	}
	if left, _ := os.ReadDir(hold); len(left) != 0 {
		t.Errorf("%d files left in HoldDir once the answer is stored; want none", len(left))
	}
}

// TestCloseWithHeldAnswer: a cache closed while it holds an answer its
// store refuses tries the write once more, then gives it up (counted as
// not stored), and Close returns.
func TestCloseWithHeldAnswer(t *testing.T) {
	s := natstest.RunServer(t)
	m := startModel(t, standin.Options{})
	st, err := jsstore.New(context.Background(), connect(t, s.ClientURL(), nats.ReconnectBufSize(-1)), jsstore.Options{Bucket: "closing", Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	c, err := llmcache.NewStore(st, llmcache.Options{})
	if err != nil {
		t.Fatal(err)
	}
	model := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.Shutdown()
		s.WaitForShutdown()
		m.ServeHTTP(w, r)
	}))
	t.Cleanup(model.Close)
	if _, err := client(t, c, model.URL+"/v1").CreateChatCompletion(context.Background(), triage("Pod crash-looping: api-7")); err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if st := llmhook.Stats(c); len(st) != 1 || st[0].Held != 0 || st[0].NotStored != 1 || st[0].Stored != 0 {
		t.Errorf("after Close: %+v; want Held 0, NotStored 1, Stored 0", st)
	}
}

// rawValues returns every value under the answers bucket's keys matching
// filter, as the servers hold them.
func rawValues(t *testing.T, js jetstream.JetStream, bucket string) map[string][]byte {
	t.Helper()
	ctx := context.Background()
	kv, err := js.KeyValue(ctx, bucket)
	if err != nil {
		t.Fatal(err)
	}
	keys, err := kv.ListKeys(ctx)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]byte{}
	for k := range keys.Keys() {
		if e, err := kv.Get(ctx, k); err == nil {
			out[k] = e.Value()
		}
	}
	return out
}

// TestSealedAnswers: with Options.Key the answers (whole, and cut into
// chunks) reach the servers sealed: no raw value, read with nats.go, holds
// the answer's text, and another replica with the key reads them. A store
// without the key, or with another, is refused on a sealed bucket; a
// plain bucket given a key is sealed from then on, its plain answers read
// as misses.
func TestSealedAnswers(t *testing.T) {
	s := natstest.RunServer(t)
	m := startModel(t, standin.Options{})
	js := connect(t, s.ClientURL())
	key := bytes.Repeat([]byte{0x42}, 32)
	so := jsstore.Options{Bucket: "sealed", ChunkBytes: 1024, Key: key}
	a := openCache(t, js, so, llmcache.Options{})
	long := `{"model":"m","stream":true,"messages":[{"role":"user","content":"` + strings.Repeat("explain the outage at length ", 60) + `"}]}`
	short := `{"model":"m","messages":[{"role":"user","content":"Disk 91% full on db-9"}]}`
	var texts []string
	for _, body := range []string{long, short} {
		how, b := postRaw(t, a, m.URL, body)
		if how != "miss" {
			t.Fatalf("first call: %s; want miss", how)
		}
		id := regexp.MustCompile(`chatcmpl-standin-[0-9a-f]+`).Find(b)
		if id == nil || !bytes.Contains(b, []byte("[stand-in model]")) {
			t.Fatalf("answer %q: want the stand-in's", b)
		}
		texts = append(texts, string(id), "[stand-in model]")
	}
	raw := rawValues(t, js, "sealed")
	chunks := 0
	for k, v := range raw {
		if strings.HasPrefix(k, "p.") {
			chunks++
		}
		for _, text := range texts {
			if bytes.Contains(v, []byte(text)) {
				t.Errorf("raw value %s holds %q", k, text)
			}
		}
	}
	if chunks == 0 {
		t.Errorf("no chunks among %d values: the long answer was not cut", len(raw))
	}

	b := openCache(t, connect(t, s.ClientURL()), so, llmcache.Options{})
	for _, body := range []string{long, short} {
		if how, _ := postRaw(t, b, m.URL, body); how != "hit" {
			t.Errorf("another replica with the key: %s; want hit", how)
		}
	}
	if sum, err := llmhook.Summarize(b); err != nil || sum.Answers != 2 {
		t.Errorf("Summary through the key: %+v, %v; want 2 answers", sum, err)
	}
	if n := m.Stats().Completions; n != 2 {
		t.Errorf("model calls = %d; want 2", n)
	}

	for _, tt := range []struct {
		name string
		key  []byte
	}{{"no key", nil}, {"another key", bytes.Repeat([]byte{0x43}, 32)}} {
		_, err := jsstore.New(context.Background(), js, jsstore.Options{Bucket: "sealed", Key: tt.key})
		if !errors.Is(err, llmcache.ErrEncryptionKey) {
			t.Errorf("%s on a sealed bucket: New error = %v; want ErrEncryptionKey", tt.name, err)
		}
	}
	if _, err := jsstore.New(context.Background(), js, jsstore.Options{Bucket: "sealed", Key: key[:20]}); !errors.Is(err, llmcache.ErrInvalidOptions) {
		t.Errorf("a 20-byte key: New error = %v; want ErrInvalidOptions", err)
	}

	// A plain bucket, then the key: its plain answer is a miss, asked
	// again and written sealed; a store without the key is refused after.
	plain := openCache(t, js, jsstore.Options{Bucket: "plain"}, llmcache.Options{})
	postRaw(t, plain, m.URL, short)
	sealed := openCache(t, js, jsstore.Options{Bucket: "plain", Key: key}, llmcache.Options{})
	if how, _ := postRaw(t, sealed, m.URL, short); how != "miss" {
		t.Errorf("a plain answer read with the key: %s; want miss", how)
	}
	for k, v := range rawValues(t, js, "plain") {
		if strings.HasPrefix(k, "a.") && bytes.Contains(v, []byte("[stand-in model]")) {
			t.Errorf("after the key, raw value %s is still plain", k)
		}
	}
	if _, err := jsstore.New(context.Background(), js, jsstore.Options{Bucket: "plain"}); !errors.Is(err, llmcache.ErrEncryptionKey) {
		t.Errorf("no key on a bucket sealed since: New error = %v; want ErrEncryptionKey", err)
	}
}

// TestWaiterThroughRestart: one replica holds a key's fill claim while the
// model answers; another waits on it. The NATS server goes down before the
// answer comes (its write fails, and it is held) and comes back on its
// store. The waiter gets the held answer once it is written, and the model
// is called once. The waiter's watch ends with the server, and nats.go
// starts it again only after missed heartbeats (14s here): the waiter also
// reads the answer every eighth of the lease (3.75s), and has it within
// 10s of the restart.
func TestWaiterThroughRestart(t *testing.T) {
	s, dir, port := serverOnDisk(t)
	m := startModel(t, standin.Options{})
	release := make(chan struct{})
	var calls sync.WaitGroup
	calls.Add(1)
	var first sync.Once
	model := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		first.Do(func() { calls.Done(); <-release })
		m.ServeHTTP(w, r)
	}))
	t.Cleanup(model.Close)
	url := model.URL + "/v1"

	so := jsstore.Options{Bucket: "restart"}
	co := llmcache.Options{FillTimeout: 3 * time.Second, Endpoint: "model"}
	a := openCache(t, connect(t, s.ClientURL()), so, co)
	b := openCache(t, connect(t, s.ClientURL()), so, co)
	req := triage("Disk 91% full on db-3")
	type result struct {
		text string
		err  error
	}
	ask := func(c *llmcache.Cache) <-chan result {
		ch := make(chan result, 1)
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			r, err := client(t, c, url).CreateChatCompletion(ctx, req)
			if err != nil {
				ch <- result{err: err}
				return
			}
			ch <- result{text: r.Choices[0].Message.Content}
		}()
		return ch
	}
	fromA := ask(a)
	calls.Wait() // A holds the claim, the model is answering
	js := connect(t, s.ClientURL())
	fromB := ask(b)
	// B waits once it watches the key: a consumer on the bucket's stream.
	deadline := time.Now().Add(10 * time.Second)
	for {
		st, err := js.Stream(context.Background(), "KV_restart")
		if err == nil && st.CachedInfo().State.Consumers > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("B never watched the key: %v", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	s.Shutdown()
	s.WaitForShutdown()
	close(release)
	ra := <-fromA
	if ra.err != nil {
		t.Fatalf("A: %v", ra.err)
	}
	time.Sleep(time.Second)                                                           // the server stays down a while
	natstest.RunServer(t, func(o *server.Options) { o.StoreDir, o.Port = dir, port }) // on the same port and store; the test's cleanup stops it
	start := time.Now()
	select {
	case rb := <-fromB:
		if rb.err != nil || rb.text != ra.text {
			t.Errorf("B: %q, %v; want A's answer %q", rb.text, rb.err, ra.text)
		}
		if d := time.Since(start); d > 10*time.Second {
			t.Errorf("B answered %v after the restart; want it within 10s (the lease is 30s, B reads the answer every 3.75s)", d.Round(time.Millisecond))
		}
	case <-time.After(45 * time.Second):
		t.Fatal("B had no answer 45s after the restart")
	}
	if n := m.Stats().Completions; n != 1 {
		t.Errorf("model calls = %d; want 1", n)
	}
}

// TestFillLooksAfterItsClaim: an answer stored after the caller's lookup
// but before its claim (here one whose claim entry is gone, so that the
// claim is created afresh) comes back from Fill instead of a claim, as
// llmcache.Filler requires, and the claim it took is released, not left
// to lapse. An expired answer (live says no) is no answer: Fill claims.
func TestFillLooksAfterItsClaim(t *testing.T) {
	s := natstest.RunServer(t)
	js := connect(t, s.ClientURL())
	ctx := context.Background()
	st, err := jsstore.New(ctx, js, jsstore.Options{Bucket: "after"})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	k := llmcache.Key{0xa1}
	if err := st.Put(ctx, k, []byte("the answer"), time.Hour); err != nil {
		t.Fatal(err)
	}
	cl, v, err := st.Fill(ctx, k, time.Second, func([]byte) bool { return true })
	if err != nil || cl != nil || string(v) != "the answer" {
		t.Fatalf("Fill = claim %v, entry %q, %v; want the answer stored before the claim, and no claim", cl != nil, v, err)
	}
	raw := rawValues(t, js, "after")
	if c, ok := raw["f."+k.String()]; !ok || len(c) == 0 || c[0] != 0 {
		t.Errorf("claim entry after Fill found the answer: %v (present %v); want it released", c, ok)
	}

	expired := llmcache.Key{0xa2}
	if err := st.Put(ctx, expired, []byte("an expired answer"), time.Hour); err != nil {
		t.Fatal(err)
	}
	cl, v, err = st.Fill(ctx, expired, time.Second, func([]byte) bool { return false })
	if err != nil || cl == nil || v != nil {
		t.Fatalf("Fill on an expired answer = claim %v, entry %q, %v; want a claim", cl != nil, v, err)
	}
	if err := cl.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// waitStored waits until bucket holds key, or until deadline, when it
// returns the last error of the look.
func waitStored(js jetstream.JetStream, bucket, key string, deadline time.Time) error {
	for {
		kv, err := js.KeyValue(context.Background(), bucket)
		if err == nil {
			if _, err = kv.Get(context.Background(), key); err == nil {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return err
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// serverOnDisk starts a server whose store is in a directory of the
// test's, to be started again on the same directory and port.
func serverOnDisk(t *testing.T) (s *server.Server, dir string, port int) {
	dir = t.TempDir()
	s = natstest.RunServer(t, func(o *server.Options) { o.StoreDir = dir })
	return s, dir, s.Addr().(*net.TCPAddr).Port
}

// downingModel serves m behind a front that shuts s down when the first
// call arrives, before m answers it: the answer's write finds no server.
func downingModel(t *testing.T, s *server.Server, m http.Handler) *httptest.Server {
	var down sync.Once
	model := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		down.Do(func() { s.Shutdown(); s.WaitForShutdown() })
		m.ServeHTTP(w, r)
	}))
	t.Cleanup(model.Close)
	return model
}
