package llmcache

// Estimate is what a chat completion request may spend, counted before it
// is sent.
type Estimate struct {
	// Prompt is the prompt tokens, counted with the offline tokenizer of
	// the request's model (o200k_base for a model it does not know).
	Prompt int64
	// MaxCompletion is the completion tokens the request allows: n times
	// max_completion_tokens (else max_tokens); 0 when the request sets no
	// cap.
	MaxCompletion int64
}

// EstimateRequest reads the body of a chat completion request and returns
// what it may spend, as the cache counts it before an upstream call. It
// returns an error wrapping [ErrInvalidRequest] if body is not a JSON
// request object.
func EstimateRequest(body []byte) (Estimate, error) {
	q, err := parseRequest(body)
	if err != nil {
		return Estimate{}, err
	}
	e := Estimate{Prompt: estimatePrompt(q)}
	if q.MaxTokens > 0 {
		e.MaxCompletion = q.N * q.MaxTokens
	}
	return e, nil
}
