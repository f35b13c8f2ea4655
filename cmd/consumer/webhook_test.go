package main

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"testing"
)

// The headers `webhook sign` prints are the ones GitHub would send: the
// signature is checked here with crypto/hmac, independently of the
// ingress's code.
func TestWebhookSign(t *testing.T) {
	t.Setenv("GITHUB_WEBHOOK_SECRET", "It's a Secret to Everybody")
	out, stderr, err := runCmd(t, "Hello, World!", "webhook", "sign", "-source", "github", "-id", "72d3162e-cc78-11e3-81ab-4c9367dc0958")
	if err != nil {
		t.Fatalf("webhook sign: %v\n%s", err, stderr)
	}
	h := map[string]string{}
	for line := range strings.Lines(out) {
		k, v, ok := strings.Cut(strings.TrimSpace(line), ": ")
		if !ok {
			t.Fatalf("line %q is not a header", line)
		}
		h[strings.ToLower(k)] = v
	}
	m := hmac.New(sha256.New, []byte("It's a Secret to Everybody"))
	m.Write([]byte("Hello, World!"))
	if want := "sha256=" + hex.EncodeToString(m.Sum(nil)); h["x-hub-signature-256"] != want {
		t.Errorf("X-Hub-Signature-256 = %q; want %q", h["x-hub-signature-256"], want)
	}
	if h["x-github-delivery"] != "72d3162e-cc78-11e3-81ab-4c9367dc0958" || h["x-github-event"] != "push" || h["content-type"] != "application/json" {
		t.Errorf("headers = %v", h)
	}

	t.Setenv("GITHUB_WEBHOOK_SECRET", "")
	if _, _, err := runCmd(t, "{}", "webhook", "sign", "-source", "github"); err == nil || !strings.Contains(err.Error(), "GITHUB_WEBHOOK_SECRET is not set") {
		t.Errorf("without the secret: %v; want it to name the variable", err)
	}
	if _, _, err := runCmd(t, "{}", "webhook", "sign", "-source", "gitlab"); err == nil || !strings.Contains(err.Error(), "github, alertmanager") {
		t.Errorf("an unknown source: %v; want the sources listed", err)
	}
}
