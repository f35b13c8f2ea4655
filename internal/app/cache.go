package app

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"time"

	"github.com/oncegate/oncegate/internal/config"
	"github.com/oncegate/oncegate/pkg/llmcache"
	"github.com/oncegate/oncegate/pkg/llmcache/badgerstore"
	"github.com/oncegate/oncegate/pkg/llmcache/jsstore"
)

// standinEndpoint names the stand-in model in cache keys: its URL changes
// with every start, its answers do not.
const standinEndpoint = "oncegate-standin"

// cacheEndpoint is the model endpoint's name in cache keys: the configured
// one, the stand-in's, or (empty) the base URL the client sends to.
func cacheEndpoint(cfg *config.Config) string {
	if e := cfg.LLM.Cache.Endpoint; e != "" {
		return e
	}
	if cfg.LLM.Standin {
		return standinEndpoint
	}
	return ""
}

// openCache opens the LLM cache in the store llm.cache.store names: the
// data directory's Badger, or JetStream KV buckets shared by every replica.
func (a *App) openCache(ctx context.Context, o llmcache.Options) (*llmcache.Cache, error) {
	cfg := a.Config
	if cfg.LLM.Cache.Store != config.StoreKV {
		key, err := EncryptionKey(cfg)
		if err != nil {
			return nil, err
		}
		dir := filepath.Join(cfg.DataDir, "llm-cache")
		c, err := badgerstore.OpenEncrypted(dir, key, o)
		return c, keyError(cfg, "LLM cache", dir, err)
	}
	// With a key, the answers are sealed with it before they reach the
	// servers (AES-GCM): the bucket, its replicas and their backups hold
	// no answer in plain text.
	key, err := EncryptionKey(cfg)
	if err != nil {
		return nil, err
	}
	defer clear(key)
	kv := cfg.LLM.Cache.KV
	st, err := jsstore.New(ctx, a.JS, jsstore.Options{
		Bucket: kv.Bucket, Replicas: kv.Replicas, Lease: kv.Lease,
		TTL:       cfg.LLM.Cache.TTL + time.Hour,
		BudgetTTL: max(cfg.Ledger.Retention, cfg.LongestBudgetPeriod()) + time.Hour,
		Key:       key,
	})
	if errors.Is(err, llmcache.ErrEncryptionKey) {
		return nil, fmt.Errorf("%w: the LLM cache's KV bucket %s: %w; start with the key its answers were sealed with", ErrEncryptionKey, kv.Bucket, err)
	}
	if err != nil {
		return nil, fmt.Errorf("app: llm cache: %w", err)
	}
	// A paid answer waits on this replica's disk (sealed with the key, if
	// one is set) until the bucket has it, so that a replica killed before
	// its write lands (the servers restarting, say) does not lose it: its
	// next start stores it.
	o.HoldDir, o.HoldKey = filepath.Join(cfg.DataDir, "llm-held"), key
	c, err := llmcache.NewStore(st, o)
	if err != nil {
		st.Close()
		return nil, fmt.Errorf("app: llm cache: %w", err)
	}
	return c, nil
}
