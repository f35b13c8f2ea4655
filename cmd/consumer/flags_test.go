package main

import (
	"errors"
	"flag"
	"io"
	"slices"
	"testing"
)

// TestParseArgs: flags count wherever they stand among the arguments (they
// were silently ignored after the first argument), "--" ends them, and a
// bad flag anywhere is a usage error.
func TestParseArgs(t *testing.T) {
	for _, tt := range []struct {
		name    string
		args    []string
		wantPos []string
		wantCfg string
		wantJS  bool
		wantErr bool
	}{
		{"flags first", []string{"-config", "a.yaml", "-json", "show", "12"}, []string{"show", "12"}, "a.yaml", true, false},
		{"flags last", []string{"show", "12", "-json", "-config", "a.yaml"}, []string{"show", "12"}, "a.yaml", true, false},
		{"flags between", []string{"show", "-config=a.yaml", "12", "-json"}, []string{"show", "12"}, "a.yaml", true, false},
		{"double dash", []string{"-json", "--", "-config", "x"}, []string{"-config", "x"}, "", true, false},
		{"no flags", []string{"12-20"}, []string{"12-20"}, "", false, false},
		{"bad flag last", []string{"show", "12", "-nosuch"}, nil, "", false, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			fs := flag.NewFlagSet("t", flag.ContinueOnError)
			fs.SetOutput(io.Discard)
			cfg := fs.String("config", "", "")
			js := fs.Bool("json", false, "")
			pos, err := parseArgs(fs, tt.args)
			if tt.wantErr {
				if !errors.As(err, new(usageError)) {
					t.Fatalf("parseArgs(%q) error = %v; want a usage error", tt.args, err)
				}
				return
			}
			if err != nil || !slices.Equal(pos, tt.wantPos) || *cfg != tt.wantCfg || *js != tt.wantJS {
				t.Errorf("parseArgs(%q) = %q, %v (config %q, json %v); want %q (config %q, json %v)", tt.args, pos, err, *cfg, *js, tt.wantPos, tt.wantCfg, tt.wantJS)
			}
		})
	}
}
