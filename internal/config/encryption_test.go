package config

import (
	"errors"
	"os"
	"slices"
	"strings"
	"testing"
)

// TestEncryptionKeyFile: encryption.key_file is a key of the file and of
// the environment, and is explained, naming what it covers and what not;
// with both stores on JetStream KV it seals the cache's answers.
func TestEncryptionKeyFile(t *testing.T) {
	example, err := os.ReadFile("../../examples/oncegate.yaml")
	if err != nil {
		t.Fatal(err)
	}
	c, err := ParseEnv(append(slices.Clip(example), "encryption:\n  key_file: /run/secrets/oncegate.key\n"...), "test.yaml", nil)
	if err != nil {
		t.Fatal(err)
	}
	if c.Encryption.KeyFile != "/run/secrets/oncegate.key" {
		t.Errorf("key_file = %q", c.Encryption.KeyFile)
	}
	var x strings.Builder
	if err := c.Explain(&x); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(x.String(), "encrypted at rest with the key in /run/secrets/oncegate.key") {
		t.Errorf("Explain does not mention the key file:\n%s", x.String())
	}
	c, err = ParseEnv(example, "example.yaml", []string{"ONCEGATE_ENCRYPTION_KEY_FILE=/k"})
	if err != nil || c.Encryption.KeyFile != "/k" {
		t.Errorf("ONCEGATE_ENCRYPTION_KEY_FILE: key_file = %q, %v", c.Encryption.KeyFile, err)
	}
	if _, err := ParseEnv(append(slices.Clip(example), "encryption:\n  key: abc\n"...), "typo.yaml", nil); !errors.Is(err, ErrUnknownKey) {
		t.Errorf("encryption.key: error = %v; want ErrUnknownKey", err)
	}
	c = Default()
	c.NATS.URL = "nats://nats.internal:4222"
	c.Ledger.Store, c.LLM.Cache.Store = StoreKV, StoreKV
	c.Encryption.KeyFile = "/k"
	if err := c.Validate(); err != nil {
		t.Fatalf("a key file with the KV ledger and cache: %v", err)
	}
	x.Reset()
	if err := c.Explain(&x); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"LLM cache answers sealed (AES-GCM) in JetStream KV with the key in /k", "the KV ledger's notes and responses (the model steps' answers, the effects' bodies) sealed"} {
		if !strings.Contains(x.String(), want) {
			t.Errorf("Explain with the KV stores lacks %q:\n%s", want, x.String())
		}
	}
}
