package natsrun_test

import (
	"testing"

	"github.com/oncegate/oncegate/internal/natsrun"
)

func TestRedact(t *testing.T) {
	tests := []struct {
		name, in, want string
	}{
		{"no user info", "nats://127.0.0.1:4222", "nats://127.0.0.1:4222"},
		{"user and password", "nats://alice:s3cret@host:4222", "nats://alice:xxxxx@host:4222"},
		{"token", "nats://t0ken@host:4222", "nats://xxxxx@host:4222"},
		{"empty password", "nats://alice:@host:4222", "nats://alice:xxxxx@host:4222"},
		{"at sign in password", "tls://alice:p@ss@host:4222", "tls://alice:xxxxx@host:4222"},
		{"path after host", "wss://alice:pw@host:443/nats?x=1", "wss://alice:xxxxx@host:443/nats?x=1"},
		{"at sign in path only", "ws://host:80/a@b", "ws://host:80/a@b"},
		{"no scheme", "alice:pw@host:4222", "alice:xxxxx@host:4222"},
		{"no scheme token", "t0ken@host:4222", "xxxxx@host:4222"},
		{"several", "nats://a:pw1@h1:4222, nats://h2:4222,nats://tok@h3", "nats://a:xxxxx@h1:4222, nats://h2:4222,nats://xxxxx@h3"},
		{"unparseable", "nats://alice:p%zz@host:port", "nats://alice:xxxxx@host:port"},
		{"empty", "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := natsrun.Redact(tt.in); got != tt.want {
				t.Errorf("Redact(%q) = %q; want %q", tt.in, got, tt.want)
			}
		})
	}
}
