package main

import (
	"bytes"
	"regexp"
	"strings"
	"testing"
)

// TestShort runs the short form: every kind on both stores, each intent's
// effect done once, and a row per cell.
func TestShort(t *testing.T) {
	var out bytes.Buffer
	if err := run(&out, []string{"-short"}); err != nil {
		t.Fatalf("run -short: %v\n%s", err, out.String())
	}
	s := out.String()
	if strings.Contains(s, "effects for") {
		t.Errorf("an intent's effect was not done exactly once:\n%s", s)
	}
	for _, store := range []string{"kv", "badger"} {
		for _, kind := range allKinds {
			row := regexp.MustCompile(`(?m)^\s*` + regexp.QuoteMeta(kind) + `\s+` + store + `\s+[0-9.]+`)
			if !row.MatchString(s) {
				t.Errorf("no row for %s on %s:\n%s", kind, store, s)
			}
		}
	}
}
