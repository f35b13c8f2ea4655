package config

// Encryption configures encryption at rest: the Badger stores in DataDir
// (the ledger with ledger.store: badger, the LLM cache with
// llm.cache.store: badger), encrypted by Badger with AES, and the model's
// answers in JetStream KV — the LLM cache's (llm.cache.store: kv) and
// what the KV ledger's records quote of the work (ledger.store: kv): their
// notes, the model steps' answers, and their results' responses, the
// effects' bodies — sealed with AES-GCM before they reach the servers.
//
// One key serves them all. They sit in the same directory, on the same disk,
// are read by the same process and are exposed by the same accidents (a
// copied disk, a backup, a debug archive of the data directory), so a
// second key would add a secret to provision, rotate and back up without
// separating anything; and one setting cannot leave one store in plain
// text while the other is encrypted. What is not covered: the JetStream
// streams (triggers, effects, dead letters, the outbox) and the rest of
// the KV ledger's records (the intent's state, owner, times, downstream
// id, a failure's reason); encrypt those in the NATS server's
// configuration.
type Encryption struct {
	// KeyFile names a file holding the AES key: exactly 16, 24 or 32 raw
	// bytes (AES-128, -192 or -256), such as
	// `(umask 077; head -c 32 /dev/urandom > oncegate.key)` writes. The
	// file must not be readable or writable by its group or others (the
	// start and config check refuse it, and say `chmod 600`). A Badger
	// store written with the key cannot be opened without it, and one
	// written without a key cannot be opened with one; a KV cache bucket
	// sealed with it refuses a replica without it, or with another. The
	// default, empty, stores in plain text.
	KeyFile string `yaml:"key_file"`
}

// encryption explains what encryption.key_file encrypts, and what not.
func (x *explainer) encryption() {
	c := x.c
	if k := c.Encryption.KeyFile; k != "" {
		var what []string
		switch {
		case c.Ledger.Store == StoreBadger && c.LLM.Cache.Store == StoreBadger:
			what = append(what, "Badger ledger and cache encrypted at rest")
		case c.Ledger.Store == StoreBadger:
			what = append(what, "Badger ledger encrypted at rest", "LLM cache answers sealed (AES-GCM) in JetStream KV")
		case c.LLM.Cache.Store == StoreBadger:
			what = append(what, "Badger LLM cache encrypted at rest")
		default:
			what = append(what, "LLM cache answers sealed (AES-GCM) in JetStream KV")
		}
		what[len(what)-1] += " with the key in " + x.d("encryption.key_file", k, k)
		if c.Ledger.Store == StoreKV {
			what = append(what, "the KV ledger's notes and responses (the model steps' answers, the effects' bodies) sealed (AES-GCM), not the rest of its records")
		}
		what = append(what, "not the JetStream streams (triggers, effects, dead letters): encrypt those in the NATS server")
		x.row("encryption", what...)
	}
}
