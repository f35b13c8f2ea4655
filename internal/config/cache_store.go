package config

import "time"

// Defaults of the shared LLM cache's buckets.
const (
	DefaultCacheKVBucket = "oncegate-llm-cache"
	DefaultCacheLease    = 30 * time.Second
)

// CacheKV configures the LLM cache's JetStream KV buckets: answers and
// fill claims in Bucket, token budgets in Bucket + "-budgets".
type CacheKV struct {
	// Bucket is the answers bucket's name. The default is
	// "oncegate-llm-cache".
	Bucket string `yaml:"bucket"`
	// Replicas is the buckets' replication factor, 1 to 5. The default is
	// ledger.kv.replicas.
	Replicas int `yaml:"replicas"`
	// Lease is how long a replica's claim to fill a miss holds without
	// renewal: the others wait for its answer, and take over after this
	// long if it died. A longer lease only delays the takeover after a
	// crash; a shorter one risks paying twice when the bucket stalls (a
	// leader election) or a node is cut off while a call is in flight. The
	// default is 30s, as the ledger's.
	Lease time.Duration `yaml:"lease"`
}

func (c *Config) cacheStoreDefaults() {
	k := &c.LLM.Cache
	store := StoreBadger
	if c.Ledger.Store == StoreKV {
		store = StoreKV
	}
	setDefault(c, "llm.cache.store", &k.Store, store)
	setDefault(c, "llm.cache.endpoint", &k.Endpoint, "")
	setDefault(c, "llm.cache.kv.bucket", &k.KV.Bucket, DefaultCacheKVBucket)
	setDefault(c, "llm.cache.kv.replicas", &k.KV.Replicas, c.Ledger.KV.Replicas)
	setDefault(c, "llm.cache.kv.lease", &k.KV.Lease, DefaultCacheLease)
}

func (v *validator) cacheStore() {
	k := &v.c.LLM.Cache
	v.oneOf("llm.cache.store", k.Store, StoreBadger, StoreKV)
	if k.Store != StoreKV {
		return
	}
	if err := checkBucketName(k.KV.Bucket); err != nil {
		v.add("llm.cache.kv.bucket", err)
	}
	if k.KV.Replicas < 1 || k.KV.Replicas > 5 {
		v.add("llm.cache.kv.replicas", invalid("must be 1 to 5, got %d", k.KV.Replicas))
	} else if v.c.NATS.URL == "" && k.KV.Replicas > 1 {
		v.add("llm.cache.kv.replicas", invalid("the embedded server is a single node: replicas must be 1, got %d", k.KV.Replicas))
	}
	v.positive("llm.cache.kv.lease", k.KV.Lease)
}
