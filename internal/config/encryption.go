package config

// Encryption configures encryption at rest of the Badger stores in
// DataDir: the ledger (ledger.store: badger) and the LLM cache
// (llm.cache.store: badger).
//
// One key serves both. They sit in the same directory, on the same disk,
// are read by the same process and are exposed by the same accidents (a
// copied disk, a backup, a debug archive of the data directory), so a
// second key would add a secret to provision, rotate and back up without
// separating anything; and one setting cannot leave one store in plain
// text while the other is encrypted. The JetStream stores (the embedded
// server's streams, KV ledger and cache) are not covered: encrypt those in
// the NATS server's configuration.
type Encryption struct {
	// KeyFile names a file holding the AES key: exactly 16, 24 or 32 raw
	// bytes (AES-128, -192 or -256), such as `head -c 32 /dev/urandom`
	// writes. A store written with the key cannot be opened without it,
	// and a store written without a key cannot be opened with one. The
	// default, empty, stores in plain text.
	KeyFile string `yaml:"key_file"`
}

// encryption checks that a key file has a store to encrypt.
func (v *validator) encryption() {
	c := v.c
	if c.Encryption.KeyFile == "" {
		return
	}
	if c.Ledger.Store != StoreBadger && c.LLM.Cache.Store != StoreBadger {
		v.add("encryption.key_file", invalid("encrypts the Badger stores, and neither ledger.store nor llm.cache.store is badger; "+
			"encrypt JetStream in the NATS server's configuration instead"))
	}
}
