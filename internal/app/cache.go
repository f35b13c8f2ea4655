package app

import (
	"context"
	"fmt"
	"path/filepath"
	"time"

	"github.com/oncegate/oncegate/internal/config"
	"github.com/oncegate/oncegate/pkg/llmcache"
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
	if cfg.LLM.BaseURL == "" {
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
		c, err := llmcache.OpenEncrypted(dir, key, o)
		return c, keyError(cfg, "LLM cache", dir, err)
	}
	kv := cfg.LLM.Cache.KV
	st, err := jsstore.New(ctx, a.JS, jsstore.Options{
		Bucket: kv.Bucket, Replicas: kv.Replicas, Lease: kv.Lease,
		TTL:       cfg.LLM.Cache.TTL + time.Hour,
		BudgetTTL: cfg.Ledger.Retention + time.Hour,
	})
	if err != nil {
		return nil, fmt.Errorf("app: llm cache: %w", err)
	}
	return llmcache.NewStore(st, o)
}
