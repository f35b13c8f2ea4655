package admin

import (
	"github.com/nats-io/nats.go/jetstream"

	"github.com/oncegate/oncegate/internal/ledger"
	"github.com/oncegate/oncegate/pkg/dedupe"
)

// SetTestHooks sets the hooks a redrive runs after it read an intent's
// record (before it clears it) and after it cleared it (before it
// republishes the trigger).
func SetTestHooks(a *Admin, read, cleared func(dedupe.Key)) {
	a.testHookRead, a.testHookCleared = read, cleared
}

// WrapJetStream has a read JetStream through wrap's answer.
func WrapJetStream(a *Admin, wrap func(jetstream.JetStream) jetstream.JetStream) {
	a.js = wrap(a.js)
}

// ParseDetail is parseDetail, the reading of a dead letter's detail.
var ParseDetail = parseDetail

// WrapLedger has a use the ledger through wrap's answer.
func WrapLedger(a *Admin, wrap func(ledger.Ledger) ledger.Ledger) {
	a.opts.Ledger = wrap(a.opts.Ledger)
}
