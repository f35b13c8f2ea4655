package standin_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	openai "github.com/sashabaranov/go-openai"

	"github.com/oncegate/oncegate/internal/standin"
)

var fixedClock = func() time.Time { return time.Unix(1700000000, 0) }

// newTestServer serves a Server built from opts on an httptest.Server and
// returns it with a go-openai client pointed at it. Both are closed by
// t.Cleanup, hanging requests first.
func newTestServer(t *testing.T, opts standin.Options) (*standin.Server, *openai.Client, *httptest.Server) {
	t.Helper()
	s, err := standin.New(opts)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	ts := httptest.NewServer(s)
	t.Cleanup(func() {
		s.Close()
		ts.Close()
	})
	cfg := openai.DefaultConfig("test-key")
	cfg.BaseURL = ts.URL + "/v1"
	cfg.HTTPClient = ts.Client()
	return s, openai.NewClientWithConfig(cfg), ts
}

func chatRequest(prompt string) openai.ChatCompletionRequest {
	return openai.ChatCompletionRequest{
		Model: "gpt-test",
		Messages: []openai.ChatCompletionMessage{
			{Role: openai.ChatMessageRoleSystem, Content: "You summarise tickets."},
			{Role: openai.ChatMessageRoleUser, Content: prompt},
		},
	}
}

func TestChatIsDeterministic(t *testing.T) {
	_, c, ts := newTestServer(t, standin.Options{Clock: fixedClock})
	ctx := context.Background()
	req := chatRequest("The printer on floor 3 is on fire again.")

	a, err := c.CreateChatCompletion(ctx, req)
	if err != nil {
		t.Fatalf("CreateChatCompletion: %v", err)
	}
	b, err := c.CreateChatCompletion(ctx, req)
	if err != nil {
		t.Fatalf("CreateChatCompletion: %v", err)
	}
	if len(a.Choices) != 1 || len(b.Choices) != 1 {
		t.Fatalf("choices = %d, %d; want 1, 1", len(a.Choices), len(b.Choices))
	}
	got, want := b.Choices[0].Message.Content, a.Choices[0].Message.Content
	if got != want {
		t.Errorf("second content = %q; want %q", got, want)
	}
	if !strings.HasPrefix(got, standin.Label+" ") {
		t.Errorf("content = %q; want prefix %q", got, standin.Label)
	}
	if a.ID != b.ID || !strings.HasPrefix(a.ID, "chatcmpl-") {
		t.Errorf("ids = %q, %q; want equal chatcmpl- ids", a.ID, b.ID)
	}
	if a.Model != req.Model || a.SystemFingerprint != standin.Fingerprint || a.Object != "chat.completion" {
		t.Errorf("model, fingerprint, object = %q, %q, %q; want %q, %q, chat.completion",
			a.Model, a.SystemFingerprint, a.Object, req.Model, standin.Fingerprint)
	}
	if a.Created != fixedClock().Unix() {
		t.Errorf("created = %d; want %d", a.Created, fixedClock().Unix())
	}
	if a.Choices[0].FinishReason != openai.FinishReasonStop || a.Choices[0].Message.Role != "assistant" {
		t.Errorf("finish reason, role = %q, %q; want stop, assistant", a.Choices[0].FinishReason, a.Choices[0].Message.Role)
	}
	u := a.Usage
	if u.PromptTokens <= 0 || u.CompletionTokens <= 0 || u.TotalTokens != u.PromptTokens+u.CompletionTokens {
		t.Errorf("usage = %+v; want positive counts that add up", u)
	}
	if b.Usage != u {
		t.Errorf("second usage = %+v; want %+v", b.Usage, u)
	}
	// Prompt estimate: 3 + Σ(4 + ceil((len(role)+len(content))/4)).
	wantPrompt := 3 + 4 + (len("system")+len("You summarise tickets.")+3)/4 + 4 + (len("user")+len(req.Messages[1].Content)+3)/4
	if u.PromptTokens != wantPrompt {
		t.Errorf("prompt tokens = %d; want %d", u.PromptTokens, wantPrompt)
	}
	if n := len(strings.Fields(strings.TrimPrefix(got, standin.Label))) + 1; u.CompletionTokens != n {
		t.Errorf("completion tokens = %d; want %d (words + label)", u.CompletionTokens, n)
	}

	// The raw bytes are identical too.
	body, _ := json.Marshal(req)
	raw := func() []byte {
		resp, err := ts.Client().Post(ts.URL+"/v1/chat/completions", "application/json", bytes.NewReader(body))
		if err != nil {
			t.Fatalf("POST: %v", err)
		}
		defer resp.Body.Close()
		if resp.Header.Get("X-Oncegate-Standin") != "1" {
			t.Errorf("X-Oncegate-Standin = %q; want 1", resp.Header.Get("X-Oncegate-Standin"))
		}
		b, _ := io.ReadAll(resp.Body)
		return b
	}
	if r1, r2 := raw(), raw(); !bytes.Equal(r1, r2) {
		t.Errorf("raw answers differ:\n%s\n%s", r1, r2)
	}
}

func TestChatDifferentPromptsDiffer(t *testing.T) {
	_, c, _ := newTestServer(t, standin.Options{})
	reqs := map[string]openai.ChatCompletionRequest{
		"base":   chatRequest("hello"),
		"prompt": chatRequest("hello!"),
		"model":  func() openai.ChatCompletionRequest { r := chatRequest("hello"); r.Model = "other"; return r }(),
		"role": func() openai.ChatCompletionRequest {
			r := chatRequest("hello")
			r.Messages[0].Role = "developer"
			return r
		}(),
		"extra": func() openai.ChatCompletionRequest {
			r := chatRequest("hello")
			r.Messages = append(r.Messages, r.Messages[1])
			return r
		}(),
		"parts":       {Model: "gpt-test", Messages: []openai.ChatCompletionMessage{{Role: "user", MultiContent: []openai.ChatMessagePart{{Type: "text", Text: "hel"}, {Type: "text", Text: "lo there"}}}}},
		"long-prompt": chatRequest(strings.Repeat("a long and winding prompt ", 50)),
	}
	seen := map[string]string{}
	for name, req := range reqs {
		resp, err := c.CreateChatCompletion(context.Background(), req)
		if err != nil {
			t.Fatalf("%s: CreateChatCompletion: %v", name, err)
		}
		content := resp.Choices[0].Message.Content
		if other, ok := seen[content]; ok {
			t.Errorf("%s and %s both got %q", name, other, content)
		}
		seen[content] = name
		t.Logf("%s: %s", name, content)
	}
}

// stream reads a whole stream and returns the reassembled content, the
// finish reason, the usage chunk's usage (nil if none) and the chunk count.
func stream(t *testing.T, c *openai.Client, req openai.ChatCompletionRequest) (string, openai.FinishReason, *openai.Usage, int) {
	t.Helper()
	req.Stream = true
	st, err := c.CreateChatCompletionStream(context.Background(), req)
	if err != nil {
		t.Fatalf("CreateChatCompletionStream: %v", err)
	}
	defer st.Close()
	var (
		content strings.Builder
		finish  openai.FinishReason
		usage   *openai.Usage
		n       int
	)
	for {
		ch, err := st.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("Recv after %d chunks: %v", n, err)
		}
		n++
		if ch.SystemFingerprint != standin.Fingerprint || ch.Model != req.Model || ch.Object != "chat.completion.chunk" {
			t.Errorf("chunk %d: fingerprint, model, object = %q, %q, %q", n, ch.SystemFingerprint, ch.Model, ch.Object)
		}
		if usage != nil {
			t.Errorf("chunk %d after the usage chunk", n)
		}
		if ch.Usage != nil {
			if len(ch.Choices) != 0 {
				t.Errorf("usage chunk has %d choices; want 0", len(ch.Choices))
			}
			usage = ch.Usage
		}
		for _, c := range ch.Choices {
			content.WriteString(c.Delta.Content)
			if c.FinishReason != "" {
				finish = c.FinishReason
			}
		}
	}
	return content.String(), finish, usage, n
}

func TestStreamMatchesChat(t *testing.T) {
	s, c, _ := newTestServer(t, standin.Options{})
	req := chatRequest("Stream me the summary of ticket 42, please.")
	resp, err := c.CreateChatCompletion(context.Background(), req)
	if err != nil {
		t.Fatalf("CreateChatCompletion: %v", err)
	}

	req.StreamOptions = &openai.StreamOptions{IncludeUsage: true}
	content, finish, usage, n := stream(t, c, req)
	if want := resp.Choices[0].Message.Content; content != want {
		t.Errorf("streamed content = %q; want %q", content, want)
	}
	if finish != openai.FinishReasonStop {
		t.Errorf("finish reason = %q; want stop", finish)
	}
	if usage == nil {
		t.Fatal("no usage chunk with include_usage")
	}
	if *usage != resp.Usage {
		t.Errorf("stream usage = %+v; want %+v", *usage, resp.Usage)
	}
	// role chunk + one per token + finish chunk + usage chunk
	if want := 1 + resp.Usage.CompletionTokens + 1 + 1; n != want {
		t.Errorf("chunks = %d; want %d", n, want)
	}

	req.StreamOptions = nil
	if _, _, usage, _ := stream(t, c, req); usage != nil {
		t.Errorf("usage chunk %+v without include_usage", *usage)
	}
	if st := s.Stats(); st.Completions != 3 || st.Streams != 2 {
		t.Errorf("completions, streams = %d, %d; want 3, 2", st.Completions, st.Streams)
	}
}

func TestMaxTokensTruncates(t *testing.T) {
	_, c, _ := newTestServer(t, standin.Options{})
	full, err := c.CreateChatCompletion(context.Background(), chatRequest("truncate me"))
	if err != nil {
		t.Fatalf("CreateChatCompletion: %v", err)
	}
	tests := []struct {
		name       string
		max        int
		completion bool // set max_completion_tokens rather than max_tokens
		wantFinish openai.FinishReason
		wantTokens int
	}{
		{"max_tokens 1 keeps the label", 1, false, openai.FinishReasonLength, 1},
		{"max_tokens 3", 3, false, openai.FinishReasonLength, 3},
		{"max_completion_tokens 4", 4, true, openai.FinishReasonLength, 4},
		{"limit equal to the answer", full.Usage.CompletionTokens, false, openai.FinishReasonStop, full.Usage.CompletionTokens},
		{"limit above the answer", 1000, true, openai.FinishReasonStop, full.Usage.CompletionTokens},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req := chatRequest("truncate me")
			if tt.completion {
				req.MaxCompletionTokens = tt.max
			} else {
				req.MaxTokens = tt.max
			}
			resp, err := c.CreateChatCompletion(context.Background(), req)
			if err != nil {
				t.Fatalf("CreateChatCompletion: %v", err)
			}
			got := resp.Choices[0].Message.Content
			if resp.Choices[0].FinishReason != tt.wantFinish || resp.Usage.CompletionTokens != tt.wantTokens {
				t.Errorf("finish, tokens = %q, %d; want %q, %d", resp.Choices[0].FinishReason, resp.Usage.CompletionTokens, tt.wantFinish, tt.wantTokens)
			}
			if !strings.HasPrefix(full.Choices[0].Message.Content, got) || !strings.HasPrefix(got, standin.Label) {
				t.Errorf("content = %q; want a prefix of %q starting with the label", got, full.Choices[0].Message.Content)
			}
			content, finish, _, _ := stream(t, c, req)
			if content != got || finish != tt.wantFinish {
				t.Errorf("stream = %q, %q; want %q, %q", content, finish, got, tt.wantFinish)
			}
		})
	}
}

type outcome int

const (
	okOutcome outcome = iota
	errorOutcome
	timeoutOutcome
	rateLimitOutcome
)

// runFaults sends n sequential requests and classifies what the client saw.
// runFaults sends n requests one at a time and classifies each outcome. A
// request the server chose to hang is recognised by the server's own count
// of injected hangs, not by a client timeout, so a slow machine cannot turn
// a slow answer into a "timeout": the client cancels it once the server says
// it is hanging.
func runFaults(s *standin.Server, c *openai.Client, n int) ([]outcome, error) {
	out := make([]outcome, n)
	for i := range n {
		hangsBefore := s.Stats().Timeouts
		ctx, cancel := context.WithCancel(context.Background())
		errc := make(chan error, 1)
		go func() {
			_, err := c.CreateChatCompletion(ctx, chatRequest("fault injection"))
			errc <- err
		}()
		var err error
		deadline := time.After(10 * time.Second)
		tick := time.NewTicker(time.Millisecond)
	wait:
		for {
			select {
			case err = <-errc:
				break wait
			case <-tick.C:
				if s.Stats().Timeouts > hangsBefore {
					cancel()
				}
			case <-deadline:
				cancel()
				tick.Stop()
				return nil, fmt.Errorf("request %d: no answer and no injected hang after 10s", i)
			}
		}
		tick.Stop()
		cancel()
		var apiErr *openai.APIError
		switch {
		case err == nil:
			out[i] = okOutcome
		case errors.Is(err, context.Canceled) && s.Stats().Timeouts > hangsBefore:
			out[i] = timeoutOutcome
		case errors.As(err, &apiErr) && apiErr.HTTPStatusCode == 500:
			out[i] = errorOutcome
		case errors.As(err, &apiErr) && apiErr.HTTPStatusCode == 429:
			out[i] = rateLimitOutcome
		default:
			return nil, fmt.Errorf("request %d: unexpected error %w", i, err)
		}
	}
	return out, nil
}

func TestFaultRates(t *testing.T) {
	const n = 200
	opts := standin.Options{Seed: 7, ErrorRate: 0.1, TimeoutRate: 0.05, RateLimitRate: 0.2}
	s1, c1, _ := newTestServer(t, opts)
	s2, c2, _ := newTestServer(t, opts)
	var (
		got2 []outcome
		err2 error
		done = make(chan struct{})
	)
	go func() { got2, err2 = runFaults(s2, c2, n); close(done) }()
	got1, err1 := runFaults(s1, c1, n)
	<-done
	if err := errors.Join(err1, err2); err != nil {
		t.Fatal(err)
	}

	for i := range got1 {
		if got1[i] != got2[i] {
			t.Fatalf("request %d: outcome %d on one server, %d on the other with the same seed", i, got1[i], got2[i])
		}
	}
	var count [4]int64
	for _, o := range got1 {
		count[o]++
	}
	for _, s := range []*standin.Server{s1, s2} {
		st := s.Stats()
		if st.Completions != count[okOutcome] || st.ServerErrors != count[errorOutcome] ||
			st.Timeouts != count[timeoutOutcome] || st.RateLimited != count[rateLimitOutcome] || st.Requests != n {
			t.Errorf("stats = %+v; client saw ok %d, 500 %d, timeout %d, 429 %d of %d",
				st, count[okOutcome], count[errorOutcome], count[timeoutOutcome], count[rateLimitOutcome], n)
		}
	}
	// The counts for seed 7; they change only if the generator or the
	// order of draws does.
	if want := [4]int64{126, 20, 11, 43}; count != want {
		t.Errorf("counts (ok, 500, timeout, 429) = %v; want %v", count, want)
	}
	for o, rate := range map[outcome]float64{errorOutcome: opts.ErrorRate, timeoutOutcome: opts.TimeoutRate, rateLimitOutcome: opts.RateLimitRate} {
		mean := rate * n
		if tol := 4*math.Sqrt(mean*(1-rate)) + 1; math.Abs(float64(count[o])-mean) > tol {
			t.Errorf("outcome %d: %d of %d; want %v ± %.0f", o, count[o], n, mean, tol)
		}
	}
}

func TestRateLimitIsAPIError(t *testing.T) {
	_, c, ts := newTestServer(t, standin.Options{RateLimitRate: 1, RetryAfter: 1500 * time.Millisecond})
	_, err := c.CreateChatCompletion(context.Background(), chatRequest("too fast"))
	var apiErr *openai.APIError
	if !errors.As(err, &apiErr) {
		t.Fatalf("error = %v (%T); want *openai.APIError", err, err)
	}
	if apiErr.HTTPStatusCode != http.StatusTooManyRequests || apiErr.Code != "rate_limit_exceeded" || apiErr.Type != "requests" ||
		!strings.HasPrefix(apiErr.Message, "standin: ") {
		t.Errorf("APIError = %+v; want 429 rate_limit_exceeded of type requests", apiErr)
	}

	resp, err := ts.Client().Post(ts.URL+"/v1/chat/completions", "application/json",
		strings.NewReader(`{"model":"m","messages":[{"role":"user","content":"x"}]}`))
	if err != nil {
		t.Fatalf("POST: %v", err)
	}
	resp.Body.Close()
	if got := resp.Header.Get("Retry-After"); resp.StatusCode != 429 || got != "2" {
		t.Errorf("status, Retry-After = %d, %q; want 429, \"2\"", resp.StatusCode, got)
	}
}

func TestInvalidRequests(t *testing.T) {
	s, _, ts := newTestServer(t, standin.Options{MaxBodyBytes: 200, ErrorRate: 1})
	tests := []struct {
		name, method, path, body string
		wantStatus               int
		wantParam                string
	}{
		{"malformed JSON", "POST", "/v1/chat/completions", `{"model":`, 400, ""},
		{"not an object", "POST", "/v1/chat/completions", `[1,2]`, 400, ""},
		{"trailing data", "POST", "/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":"x"}]} {}`, 400, ""},
		{"missing model", "POST", "/v1/chat/completions", `{"messages":[{"role":"user","content":"x"}]}`, 400, "model"},
		{"missing messages", "POST", "/v1/chat/completions", `{"model":"m"}`, 400, "messages"},
		{"empty messages", "POST", "/v1/chat/completions", `{"model":"m","messages":[]}`, 400, "messages"},
		{"missing role", "POST", "/v1/chat/completions", `{"model":"m","messages":[{"content":"x"}]}`, 400, "messages[0].role"},
		{"numeric content", "POST", "/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":7}]}`, 400, "messages[0].content"},
		{"negative max_tokens", "POST", "/v1/chat/completions", `{"model":"m","max_tokens":-1,"messages":[{"role":"user","content":"x"}]}`, 400, "max_tokens"},
		{"body too large", "POST", "/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":"` + strings.Repeat("x", 300) + `"}]}`, 413, ""},
		{"wrong method", "GET", "/v1/chat/completions", ``, 405, ""},
		{"unknown path", "POST", "/v1/completions", `{}`, 404, ""},
		{"models by POST", "POST", "/v1/models", `{}`, 405, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req, _ := http.NewRequest(tt.method, ts.URL+tt.path, strings.NewReader(tt.body))
			resp, err := ts.Client().Do(req)
			if err != nil {
				t.Fatalf("%s %s: %v", tt.method, tt.path, err)
			}
			defer resp.Body.Close()
			var body struct {
				Error struct {
					Message string  `json:"message"`
					Type    string  `json:"type"`
					Param   *string `json:"param"`
				} `json:"error"`
			}
			if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
				t.Fatalf("decode error body: %v", err)
			}
			e := body.Error
			param := ""
			if e.Param != nil {
				param = *e.Param
			}
			if resp.StatusCode != tt.wantStatus || e.Type != "invalid_request_error" || param != tt.wantParam ||
				!strings.HasPrefix(e.Message, "standin: ") {
				t.Errorf("%s %s %q = %d %+v (param %q); want %d invalid_request_error, param %q, a \"standin: \" message",
					tt.method, tt.path, tt.body, resp.StatusCode, e, param, tt.wantStatus, tt.wantParam)
			}
		})
	}
	// Invalid requests are never faulted (ErrorRate is 1).
	if st := s.Stats(); st.Invalid != int64(len(tests)) || st.ServerErrors != 0 || st.Requests != int64(len(tests)) {
		t.Errorf("stats = %+v; want %d invalid and no server errors", st, len(tests))
	}
}

func TestInvalidRequestThroughClient(t *testing.T) {
	_, c, _ := newTestServer(t, standin.Options{})
	_, err := c.CreateChatCompletion(context.Background(), openai.ChatCompletionRequest{Model: "m"})
	var apiErr *openai.APIError
	if !errors.As(err, &apiErr) || apiErr.HTTPStatusCode != 400 || apiErr.Type != "invalid_request_error" {
		t.Errorf("no messages: error = %v; want a 400 invalid_request_error APIError", err)
	}
}

func TestStatsCount(t *testing.T) {
	s, c, ts := newTestServer(t, standin.Options{})
	ctx := context.Background()
	var wantPrompt, wantCompletion int64
	for _, p := range []string{"one", "two", "one"} {
		resp, err := c.CreateChatCompletion(ctx, chatRequest(p))
		if err != nil {
			t.Fatalf("CreateChatCompletion(%q): %v", p, err)
		}
		wantPrompt += int64(resp.Usage.PromptTokens)
		wantCompletion += int64(resp.Usage.CompletionTokens)
	}
	content, _, _, _ := stream(t, c, chatRequest("streamed"))
	wantPrompt += int64(3 + 4 + (len("system")+len("You summarise tickets.")+3)/4 + 4 + (len("user")+len("streamed")+3)/4)
	wantCompletion += int64(len(strings.Fields(content)) - 1) // the label is two fields, one token
	models, err := c.ListModels(ctx)
	if err != nil {
		t.Fatalf("ListModels: %v", err)
	}
	if len(models.Models) != 1 || models.Models[0].ID != standin.DefaultModel || models.Models[0].OwnedBy != standin.Fingerprint {
		t.Errorf("models = %+v; want [%s]", models.Models, standin.DefaultModel)
	}
	resp, err := ts.Client().Get(ts.URL + "/nope")
	if err != nil {
		t.Fatalf("GET: %v", err)
	}
	resp.Body.Close()

	want := standin.Stats{
		Requests: 6, Completions: 4, Streams: 1, Models: 1, Invalid: 1,
		PromptTokens: wantPrompt, CompletionTokens: wantCompletion,
	}
	if got := s.Stats(); got != want {
		t.Errorf("Stats() = %+v; want %+v", got, want)
	}
}

func TestLatency(t *testing.T) {
	s, c, _ := newTestServer(t, standin.Options{Latency: 30 * time.Millisecond})
	start := time.Now()
	if _, err := c.CreateChatCompletion(context.Background(), chatRequest("slow")); err != nil {
		t.Fatalf("CreateChatCompletion: %v", err)
	}
	if d := time.Since(start); d < 30*time.Millisecond {
		t.Errorf("answered in %v; want at least the 30ms latency", d)
	}

	s, c, _ = newTestServer(t, standin.Options{Latency: time.Hour})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if _, err := c.CreateChatCompletion(ctx, chatRequest("slow")); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("error = %v; want context.DeadlineExceeded", err)
	}
	waitFor(t, func() bool { return s.Stats().Canceled == 1 })
}

// TestTokenInterval: a streamed answer's events come an interval apart, as
// a model's tokens do, and a client that hangs up mid-stream ends it.
func TestTokenInterval(t *testing.T) {
	const interval = 5 * time.Millisecond
	_, c, _ := newTestServer(t, standin.Options{TokenInterval: interval})
	req := chatRequest("paced")
	req.Stream = true
	asked := time.Now()
	st, err := c.CreateChatCompletionStream(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	var at []time.Time
	for {
		_, err := st.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("Recv: %v", err)
		}
		at = append(at, time.Now())
	}
	st.Close()
	// Every event but the first waits for a tick, and the ticker's k-th
	// tick comes no sooner than k intervals after it started, which is
	// after the request was made: the last event cannot arrive sooner than
	// len-1 intervals after the request, however the client's reads are
	// scheduled (a bound on the gaps the client sees would be one on its
	// scheduling).
	if len(at) < 3 {
		t.Fatalf("%d events; want a few", len(at))
	}
	if d, least := at[len(at)-1].Sub(asked), time.Duration(len(at)-1)*interval; d < least {
		t.Errorf("%d events, the last %v after the request; want at least %v (%v apart)", len(at), d, least, interval)
	}

	_, c, _ = newTestServer(t, standin.Options{TokenInterval: time.Hour})
	ctx, cancel := context.WithCancel(context.Background())
	st, err = c.CreateChatCompletionStream(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Recv(); err != nil { // the first event comes at once
		t.Fatalf("first event: %v", err)
	}
	cancel()
	if _, err := st.Recv(); err == nil {
		t.Error("Recv after hanging up mid-stream: no error")
	}
	st.Close()
}

func TestCloseReleasesHangs(t *testing.T) {
	s, c, _ := newTestServer(t, standin.Options{TimeoutRate: 1})
	errc := make(chan error, 1)
	go func() {
		_, err := c.CreateChatCompletion(context.Background(), chatRequest("hang"))
		errc <- err
	}()
	waitFor(t, func() bool { return s.Stats().Timeouts == 1 })
	s.Close()
	var apiErr *openai.APIError
	if err := <-errc; !errors.As(err, &apiErr) || apiErr.HTTPStatusCode != http.StatusServiceUnavailable {
		t.Errorf("error = %v; want a 503 APIError", err)
	}
}

func TestStart(t *testing.T) {
	s, err := standin.New(standin.Options{})
	if err != nil {
		t.Fatal(err)
	}
	url, stop, err := s.Start("127.0.0.1:0")
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	cfg := openai.DefaultConfig("unused")
	cfg.BaseURL = url
	resp, err := openai.NewClientWithConfig(cfg).CreateChatCompletion(context.Background(), chatRequest("started"))
	if err != nil {
		t.Fatalf("CreateChatCompletion: %v", err)
	}
	if !strings.HasPrefix(resp.Choices[0].Message.Content, standin.Label) {
		t.Errorf("content = %q; want the label", resp.Choices[0].Message.Content)
	}
	if err := stop(); err != nil {
		t.Errorf("stop: %v", err)
	}
	if err := stop(); err != nil {
		t.Errorf("second stop: %v", err)
	}
}

func TestOptionsValidate(t *testing.T) {
	tests := []struct {
		name    string
		opts    standin.Options
		wantErr bool
	}{
		{"zero", standin.Options{}, false},
		{"all faults", standin.Options{ErrorRate: 0.5, TimeoutRate: 0.25, RateLimitRate: 0.25}, false},
		{"rate above 1", standin.Options{ErrorRate: 1.5}, true},
		{"negative rate", standin.Options{TimeoutRate: -0.1}, true},
		{"NaN rate", standin.Options{RateLimitRate: math.NaN()}, true},
		{"sum above 1", standin.Options{ErrorRate: 0.6, RateLimitRate: 0.6}, true},
		{"negative latency", standin.Options{Latency: -time.Second}, true},
		{"negative body limit", standin.Options{MaxBodyBytes: -1}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.opts.Validate()
			if (err != nil) != tt.wantErr {
				t.Fatalf("Validate() = %v; want error %v", err, tt.wantErr)
			}
			if err != nil && !strings.HasPrefix(err.Error(), "standin: ") {
				t.Errorf("Validate() = %q; want a \"standin: \" prefix", err)
			}
			if _, err := standin.New(tt.opts); (err != nil) != tt.wantErr {
				t.Errorf("New error = %v; want error %v", err, tt.wantErr)
			}
		})
	}
}

// waitFor polls cond until it holds, failing the test after 5s.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); !cond(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 5s")
		}
	}
}
