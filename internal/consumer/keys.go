package consumer

import (
	"crypto/sha256"

	"github.com/oncegate/oncegate/pkg/dedupe"
)

// EffectKey is the key a named effect of intent k is sent under (its
// Idempotency-Key, Nats-Msg-Id or outbox entry): the intent key for a
// pipeline's single effect.
func EffectKey(k dedupe.Key, effect string) dedupe.Key {
	if effect == "" {
		return k
	}
	return deriveKey("oncegate/effect", k, effect)
}

// OpenStatus is the status whose work is keyed by the identity itself.
const OpenStatus = "firing"

// StatusKey is the key of the work on an intent identity in a status: the
// identity itself for a trigger without a status or with OpenStatus (so
// that a firing keeps the key it has without key.status, and the work of
// a pipeline that adds key.status is not done again), and a key derived
// from the identity and the status for any other (a resolve).
func StatusKey(identity dedupe.Key, status string) dedupe.Key {
	if status == "" || status == OpenStatus {
		return identity
	}
	return deriveKey("oncegate/status", identity, status)
}

func deriveKey(domain string, k dedupe.Key, name string) dedupe.Key {
	h := sha256.New()
	h.Write([]byte(domain + "\x00" + name + "\x00"))
	h.Write(k[:])
	var d dedupe.Key
	copy(d[:], h.Sum(nil))
	return d
}
