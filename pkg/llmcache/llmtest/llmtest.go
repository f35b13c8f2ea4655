// Package llmtest runs a fake OpenAI-compatible model server for tests and
// examples: no network, no API key, deterministic answers with usage, plain
// and streamed.
//
//	model, err := llmtest.NewServer(llmtest.Options{})
//	...
//	defer model.Close()
//	cfg := openai.DefaultConfig("unused")
//	cfg.BaseURL = model.URL
//
// It serves POST /v1/chat/completions (a JSON answer, or with "stream":
// true server-sent events ending in "data: [DONE]", and with
// "stream_options": {"include_usage": true} a last chunk with the usage)
// and GET /v1/models. The answer is a function of the model and the
// messages: the same request gets the same bytes, a different prompt a
// different answer, and a stream reassembles to the plain answer. Every
// answer's content starts with "[stand-in model]". Usage is counted
// deterministically (not by a real tokenizer): per message 4 tokens plus
// one per 4 bytes, plus 3; one completion token per word. max_tokens (or
// max_completion_tokens) cuts the answer to that many tokens, with
// finish_reason "length".
//
// It is the stand-in model that Oncegate's consumer answers model steps
// with when no endpoint is configured.
package llmtest

import (
	"time"

	"github.com/oncegate/oncegate/internal/standin"
)

// Options configures [NewServer]. The zero value answers at once and lists
// one model.
type Options struct {
	// Latency is added to every chat completion. The default is none.
	Latency time.Duration
	// Models are the model ids GET /v1/models lists; chat completions
	// accept any model and echo it. The default is "oncegate-standin".
	Models []string
}

// Server is a fake model listening on a loopback port.
type Server struct {
	// URL is the base URL to give an OpenAI client, such as
	// "http://127.0.0.1:34567/v1".
	URL string

	s    *standin.Server
	stop func() error
}

// NewServer starts a fake model on a loopback port. Close stops it.
func NewServer(opts Options) (*Server, error) {
	s, err := standin.New(standin.Options{Latency: opts.Latency, Models: opts.Models})
	if err != nil {
		return nil, err
	}
	url, stop, err := s.Start("127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	return &Server{URL: url, s: s, stop: stop}, nil
}

// Close stops the server: it closes its listener and connections and
// waits for it.
func (s *Server) Close() error { return s.stop() }

// Stats counts what a [Server] answered.
type Stats struct {
	Completions int64 // chat completions answered, streamed or not
	Streams     int64 // of Completions, those streamed
	// PromptTokens and CompletionTokens sum the usage of the Completions.
	PromptTokens, CompletionTokens int64
}

// Stats returns the counts so far.
func (s *Server) Stats() Stats {
	st := s.s.Stats()
	return Stats{Completions: st.Completions, Streams: st.Streams, PromptTokens: st.PromptTokens, CompletionTokens: st.CompletionTokens}
}
