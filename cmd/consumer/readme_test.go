package main

import (
	"encoding/json"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"
)

// readmeBlock returns the first ```yaml block of README.md after the
// heading, as the README shows it.
func readmeBlock(t *testing.T, heading string) []byte {
	t.Helper()
	b, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, after, ok := strings.Cut(string(b), "\n"+heading+"\n")
	if !ok {
		t.Fatalf("README.md has no heading %q", heading)
	}
	_, after, ok = strings.Cut(after, "```yaml\n")
	if !ok {
		t.Fatalf("README.md: no yaml block after %q", heading)
	}
	block, _, ok := strings.Cut(after, "```")
	if !ok {
		t.Fatalf("README.md: the yaml block after %q does not end", heading)
	}
	return []byte(block)
}

// TestReadmeGitHubDeploy runs the README's GitHub push → deploy example as
// it stands, its deployer's URL pointed at a test server (as a user points
// it at theirs, with ONCEGATE_PIPELINES_DEPLOYS_EFFECT_URL): the sample
// push (examples/github-push.json, a push of a commit to main) and its
// redelivery start one deploy, with the intent key as its
// Idempotency-Key; the events a repository's webhook also sends (issues,
// a branch deletion, a tag push) are filtered, counted, never
// dead-lettered. The example once had no filter: every event that was not
// a push was dead-lettered missing_field /after (and would fire the
// dead-letter alert), and the sample push was a branch deletion.
func TestReadmeGitHubDeploy(t *testing.T) {
	const secret = "readme-gh-s3cret"
	var mu sync.Mutex
	var keys []string
	deployer := serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || r.URL.Path != "/deploys" || r.Header.Get("Authorization") != "Bearer deploy-t0ken" {
			http.Error(w, "no", http.StatusBadRequest)
			return
		}
		mu.Lock()
		keys = append(keys, r.Header.Get("Idempotency-Key"))
		mu.Unlock()
		w.WriteHeader(http.StatusCreated)
	}))
	t.Setenv("GITHUB_WEBHOOK_SECRET", secret)
	t.Setenv("DEPLOYER_TOKEN", "Bearer deploy-t0ken")
	r := startConfigApp(t, "README.md", readmeBlock(t, "### Webhook automation with an Idempotency-Key"),
		"ONCEGATE_PIPELINES_DEPLOYS_EFFECT_URL="+deployer+"/deploys")

	push, err := os.ReadFile("../../examples/github-push.json")
	if err != nil {
		t.Fatal(err)
	}
	var sample struct {
		After   string `json:"after"`
		Deleted bool   `json:"deleted"`
	}
	if err := json.Unmarshal(push, &sample); err != nil {
		t.Fatal(err)
	}
	if sample.Deleted || strings.Trim(sample.After, "0") == "" {
		t.Errorf("examples/github-push.json: after %q, deleted %v: a branch deletion, not a push of a commit", sample.After, sample.Deleted)
	}
	repo := map[string]any{"id": 1296269, "full_name": "octo-org/octo-repo"}
	body := func(v map[string]any) []byte { b, _ := json.Marshal(v); return b }
	r.post(t, "github", secret, "11111111-cc78-11e3-81ab-000000000001", "push", push)
	r.post(t, "github", secret, "11111111-cc78-11e3-81ab-000000000002", "push", push) // redelivered
	r.post(t, "github", secret, "11111111-cc78-11e3-81ab-000000000003", "issues",
		body(map[string]any{"action": "opened", "issue": map[string]any{"number": 1, "title": "Login fails"}, "repository": repo}))
	r.post(t, "github", secret, "11111111-cc78-11e3-81ab-000000000004", "push",
		body(map[string]any{"ref": "refs/heads/feature", "before": "6113728f27ae82c7b1a177c8d03f9e96e0adf246", "after": strings.Repeat("0", 40),
			"created": false, "deleted": true, "repository": repo, "pusher": map[string]any{"name": "octocat"}}))
	r.post(t, "github", secret, "11111111-cc78-11e3-81ab-000000000005", "push",
		body(map[string]any{"ref": "refs/tags/v1.0.0", "before": strings.Repeat("0", 40), "after": "0d1a26e67d8f5eaf1f6ba5c57fc3c7d91ac0fd1c",
			"created": true, "deleted": false, "repository": repo, "pusher": map[string]any{"name": "octocat"}}))
	waitFor(t, 20*time.Second, "the triggers settled", func() bool { return r.settled(t) })

	filtered, _, dead, _ := r.stats(t, "deploys")
	mu.Lock()
	defer mu.Unlock()
	if len(keys) != 1 || len(keys[0]) != 32 || filtered != 3 || dead != 0 {
		t.Errorf("deploys %d (Idempotency-Keys %q), filtered %d, dead letters %d; want 1 with the intent key, 3 filtered (issues, a deletion, a tag), 0 dead", len(keys), keys, filtered, dead)
	}
}
