package config

import (
	"errors"
	"strings"
	"testing"
)

// TestReplyPrefixOverlap checks that a reply prefix under which some
// subject is one Oncegate reads or writes is refused, naming the prefix and
// the subject, with overlap computed on subject semantics (wildcards on
// either side), and that prefixes clear of them all pass.
func TestReplyPrefixOverlap(t *testing.T) {
	oneShot := func(c *Config) {
		e := &c.Pipelines[1].Effect
		e.Class, e.ApprovalSubject = ClassOneShot, "approve.webhooks"
	}
	tests := []struct {
		name    string
		prefix  string
		mutate  func(c *Config)
		subject string // the subject the error must name; "" means the prefix passes
	}{
		{"effect subject", "effects.", nil, "effects.alerts"},
		{"trigger stream", "triggers.", nil, "triggers.>"},
		{"under a trigger subject", "triggers.alerts.", nil, "triggers.>"},
		{"default prefix and an effect under it", "_INBOX.", func(c *Config) { c.Pipelines[0].Effect.Subject = "_INBOX.effects" }, "_INBOX.effects"},
		{"wildcard stream subject", "in.x.", func(c *Config) { c.Stream.Subjects = []string{"triggers.>", "in.*.hooks"} }, "in.*.hooks"},
		{"wildcard stream subject, other token", "in.x.y.", func(c *Config) { c.Stream.Subjects = []string{"triggers.>", "in.*.hooks"} }, ""},
		{"dead letters", "dead.", func(c *Config) { c.Stream.DeadLetterSubject = "dead.{pipeline}" }, "dead.alerts"},
		{"approval subject", "approve.", oneShot, "approve.webhooks"},
		{"ingress subject", "hooks.", func(c *Config) {
			c.Stream.Subjects = []string{"triggers.>", "hooks.>"}
			c.Ingress.Sources[0].Subject = "hooks.github"
		}, "hooks.>"},
		{"server reply mapping", "_R_.", nil, "_R_.>"},
		{"gateway reply mapping", "_GR_.", nil, "_GR_.>"},
		{"JetStream API", "$JS.", nil, "$JS.>"},
		{"outbox", "oncegate.", nil, "oncegate.>"},
		{"clear of everything", "replies.", nil, ""},
		{"default", "_INBOX.", nil, ""},
		{"one token of an effect subject", "effects.alerts.", nil, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := Default()
			if tt.mutate != nil {
				tt.mutate(c)
			}
			c.Stream.ReplyPrefixes = []string{"_INBOX.", tt.prefix}
			err := c.Validate()
			if tt.subject == "" {
				if err != nil {
					t.Fatalf("reply prefix %q: Validate() = %v; want nil", tt.prefix, err)
				}
				return
			}
			fe := findError(t, err, "stream.reply_prefixes[1]", ErrInvalid)
			for _, want := range []string{tt.prefix, tt.subject} {
				if !strings.Contains(fe.Error(), want) {
					t.Errorf("error %q does not name %q", fe.Error(), want)
				}
			}
			var oe *ReplyOverlapError
			if !errors.As(fe, &oe) || oe.Prefix != tt.prefix || oe.Subject != tt.subject {
				t.Errorf("error %v: want a *ReplyOverlapError for prefix %q and subject %q, got %+v", fe, tt.prefix, tt.subject, oe)
			}
		})
	}
}
