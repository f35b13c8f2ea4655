package spec_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/oncegate/oncegate/internal/ingress/spec"
)

// TestSourceValidate: a source's problems are reported at its own keys,
// each wrapping ErrInvalid or ErrMissing; the caller's checks are applied
// to the environment variables and the URL it names, their errors passed
// on as they are; every preset as a user writes it is valid.
func TestSourceValidate(t *testing.T) {
	errCheck := errors.New("the caller's check")
	checks := spec.Checks{
		EnvName: func(name string) error {
			if name == "BAD" {
				return errCheck
			}
			return nil
		},
		URL: func(u string) error {
			if u == "ftp://x" {
				return errCheck
			}
			return nil
		},
	}
	sig := spec.Signature{Header: "X-Sig"}
	tests := []struct {
		name    string
		src     spec.Source
		field   string
		wantErr error
	}{
		{"unknown kind", spec.Source{Kind: "gitlap", SecretEnv: "X"}, "kind", spec.ErrInvalid},
		{"no scheme", spec.Source{SecretEnv: "X"}, "signature.header", spec.ErrMissing},
		{"no secret", spec.Source{Kind: "github"}, "secret_env", spec.ErrMissing},
		{"secret env the caller refuses", spec.Source{Kind: "github", SecretEnv: "BAD"}, "secret_env", errCheck},
		{"tenant env the caller refuses", spec.Source{Kind: "github", TenantSecretEnv: map[string]string{"acme": "BAD"}}, "tenant_secret_env[acme]", errCheck},
		{"bad tenant", spec.Source{Kind: "github", TenantSecretEnv: map[string]string{".acme": "X"}}, "tenant_secret_env[.acme]", spec.ErrInvalid},
		{"basic without a user", spec.Source{Kind: "alertmanager", Auth: spec.AuthBasic, SecretEnv: "X"}, "user", spec.ErrMissing},
		{"shorthand off hmac", spec.Source{Kind: "github", SecretEnv: "X", Header: "X-Sig"}, "header", spec.ErrInvalid},
		{"bad algorithm", spec.Source{SecretEnv: "X", Signature: spec.Signature{Header: "X-Sig", Algorithm: "md5"}}, "signature.algorithm", spec.ErrInvalid},
		{"body unsigned", spec.Source{SecretEnv: "X", Signature: spec.Signature{Header: "X-Sig", Signed: "{id}"}}, "signature.signed", spec.ErrInvalid},
		{"bad delivery", spec.Source{SecretEnv: "X", Signature: sig, Delivery: []string{"ok:no", "digest"}}, "delivery[0]", spec.ErrInvalid},
		{"reserved copy", spec.Source{SecretEnv: "X", Signature: sig, CopyHeaders: []string{"X-Ok", "nats-msg-id"}}, "copy_headers[1]", spec.ErrInvalid},
		{"public URL the caller refuses", spec.Source{Kind: "twilio", SecretEnv: "X", PublicURL: "ftp://x"}, "public_url", errCheck},
		{"url signed without a public URL", spec.Source{Kind: "twilio", SecretEnv: "X"}, "public_url", spec.ErrMissing},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			errs := tt.src.Validate(checks)
			for _, fe := range errs {
				if fe.Field == tt.field && errors.Is(fe, tt.wantErr) {
					return
				}
			}
			t.Errorf("Validate(%+v) = %v; want a %v at %s", tt.src, errs, tt.wantErr, tt.field)
		})
	}
	for _, k := range spec.Kinds() {
		s := spec.Source{Name: k, Kind: k, SecretEnv: "X"}
		if k == "twilio" {
			s.PublicURL = "https://hooks.example.com"
		}
		if errs := s.Validate(spec.Checks{}); len(errs) > 0 {
			t.Errorf("preset %s: Validate = %v; want no problem", k, errs)
		}
	}
	open := spec.Source{Kind: spec.KindHMAC, Auth: spec.AuthNone}
	if errs := open.Validate(spec.Checks{}); len(errs) > 0 {
		t.Errorf("an hmac source with auth: none: %v; want no problem", errs)
	}
	if got := fmt.Sprint(&spec.FieldError{Field: "user", Err: errCheck}); got != "user: the caller's check" {
		t.Errorf("FieldError.Error() = %q", got)
	}
}
