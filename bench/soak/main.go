// Command soak drives the real consumer binary through a seeded storm of
// faults and checks, intent by intent, that every effect happened once and
// nothing was lost.
//
// Everything runs as it would in production, on loopback:
//
//   - a nats-server built from the module (github.com/nats-io/nats-server/v2)
//     and run as a separate process with JetStream on (-js -sd STORE -p PORT
//     -a 127.0.0.1, and a config file for sync_interval), so that it can be
//     stopped with SIGTERM or killed with SIGKILL and restarted on its store;
//   - -replicas copies of the consumer binary, built with the
//     oncegate_faults tag, as child processes joined to that server
//     (-nats-url), each with its own -data directory, sharing the JetStream
//     KV ledger (ledger.store: kv) and one durable consumer per pipeline;
//   - the offline stand-in model, served from this process with injected
//     server errors and timeouts (llm.base_url points at it), behind a proxy
//     that counts calls and tokens per intent;
//   - a payment-provider sink that honours Idempotency-Key (it replays the
//     stored response, answers 409 while the first request with a key is in
//     flight, 422 when a key comes back with another body) and logs every
//     call, and sometimes commits a charge and then drops the connection
//     ("charge succeeded, response lost");
//   - a one-shot sink that counts every call (no idempotency support);
//   - the effect stream JetStream sinks publish to (Nats-Msg-Id).
//
// Four pipelines share the work: triage (model step, JetStream effect),
// charges (model step, HTTP payment sink), notify (one-shot HTTP effect
// through the outbox; with -approvals each effect waits for an approval)
// and hooks (gate-ledger, batched JetStream effect). A fifth, poison
// (max_deliver 2), gets -poison triggers that carry Oncegate-Fault: half
// panic when their work reaches the effect, half SIGKILL their process
// there. A sixth, alerts, is the last mile: -alerts (a share of -intents)
// Alertmanager-shaped alerts, each firing (sent 1 to 3 times), 70% of them
// resolved later under the same fingerprint and one in 25 first seen
// resolved. It keys by the alert's identity and status (key.status),
// triages firings with the model and skips the step for resolves
// (skip_when), and routes: critical firings to PagerDuty (the pagerduty
// preset, replayable), other firings to Slack (the slack preset,
// one-shot through the outbox); each resolve goes where its firing went
// (PagerDuty's event_action resolve, or a Slack note), nothing for an
// alert first seen resolved. PagerDuty and Slack are the schema-checking
// receivers of package internal/receiver, served from this process. For
// a share of the critical alerts that resolve (-alerts-race), PagerDuty
// refuses the page until it has the resolve: the forced race of a firing
// retried past its resolve, which must be dropped, never paged after it.
// A storm (-storm, 2,000 by default) of critical alerts within a minute to
// the one routing key, with PagerDuty's quota (120 a minute; the minute
// time scaled by -storm-scale) enforced by its receiver: every alert paged
// once, none dropped by a 429, the drain time reported.
//
// The redrive phase (-redrive, on by default): the payment sink refuses
// every new charge (400) from 25% to 45% of the fault window, so that
// dead letters (permanent_effect) pile up, then it is fixed, and the soak
// runs the consumer binary's bulk redrive (`consumer redrive -filter
// "pipeline=charges reason=permanent_effect handled=yes" -yes -json`: a
// job previewed and started through the replicas' admin service, or run
// by the command when no replica answers, and followed to its end, taken
// over if its runner dies) every 5s while the faults go on, and again once
// everything settled until a pass republishes nothing; what each did with
// each letter is read back from the audit stream. Each pass must be
// answered within 90s whenever a majority of the nodes stays up.
// Each of -intents intents is published 1 to 4 times: exact provider
// retries, redeliveries with a new delivery id and time, and reworded
// duplicates (same key fields, other words). A share (-hostile) are hostile
// payloads that must be dead-lettered: truncated JSON, duplicate names,
// invalid UTF-8, lone surrogates, NaN, integers past 2^53, a byte-order
// mark, trailing data, nesting and arrays past the limits, missing key
// fields.
//
// On a schedule drawn from -seed (printed; the same seed replays the same
// workload and the same schedule, though not the same interleaving): consumer
// replicas are killed with SIGKILL at random instants (-kills; some of the
// restarts are armed with ONCEGATE_CRASH_AT so that the next death lands
// exactly at a point of the flow), paused with SIGSTOP for longer than the
// lease and resumed with SIGCONT (-zombies: a stalled holder that wakes after
// its work was taken over), and the nats-server is restarted, alternately
// with SIGTERM and SIGKILL (-server-restarts), and a replica's ledger clock
// jumps forward by twice the lease (-clock-jumps, SIGUSR1 to an
// oncegate_faults build): it then takes over work that healthy replicas
// hold, and fencing must turn their late commits away. Every replica is
// killed at once and all are kept down for longer than the duplicate
// window of the stream the hooks pipeline's effects land in (-outages,
// -outage-for): a redo of work whose holder died after its effect would
// land past the window, so it must be refused. The ledger blips
// (-ledger-blips): on a cluster its bucket's stream leader steps down; on
// one server every replica's ledger refuses writes for -ledger-blip-for
// (SIGUSR2 to an oncegate_faults build), as a full disk would. With
// -approvals the soak plays the person who approves notify's one-shot
// effects: it approves most soon after they are published, cancels some
// (some of them after approving, as they may be going out), and, with
// -approval-timeout, never approves others, which must be dead-lettered
// not_approved.
//
// When the schedule is over, every process is resumed and the run waits
// until the durable consumers (and the one-shot dispatcher) have nothing
// pending and nothing unacknowledged. Then the replicas drain, and the
// checker reads the effect stream, the dead-letter stream, the sinks' logs
// and the ledger, and classifies every intent:
//
//   - committed: exactly one effect where the sink honours the key, at most
//     one (and exactly one sent) at the one-shot sink;
//   - cancelled: a one-shot effect whose cancel was answered "cancelled",
//     and which was never sent;
//   - dead-lettered, with the reason (every hostile copy must be);
//   - unknown: a one-shot effect whose dispatcher died mid-send, reported
//     with reason unknown_outcome and never resent;
//   - redriven: dead-lettered by the payment sink's refusal, redriven,
//     and committed with exactly one charge (its dead letters are not
//     final outcomes);
//   - lost: no effect and no dead letter;
//   - duplicated: two effects or more.
//
// An alerts intent is classified by the receivers its route names:
// committed when each got exactly one effect (PagerDuty: one effect key,
// however often sent, since PagerDuty collapses events by dedup_key;
// Slack: one message), and so on. A PagerDuty event is attributed by its
// dedup_key alone, which must be the alert's identity as the pipeline's
// keyer derives it: a resolve whose event does not carry its firing's
// dedup_key is unmatched, and its intent lost.
//
// Every replica's processes record each ledger operation they make, its
// invocation and its response (ONCEGATE_FAULTS_LEDGER_HISTORY, package
// internal/ledger/history), and the checker checks these histories for
// linearizability against a sequential model of the ledger, key by key,
// with Porcupine (linearize.go says what the model holds to); for keys
// whose history is not linearizable it writes Porcupine's visualization
// beside the plot (-plot's name with -ledger-history.html).
//
// Lost and duplicated must be zero, and the ledger histories
// linearizable: soak exits 1 otherwise, or if the run did not settle, or if
// a poison intent was not dead-lettered (reason panic or exhausted) within
// max_deliver deliveries, or the replicas were restarted after more deaths
// than the kill poison allows (max_deliver per trigger: no crash loop), or a
// cancel answered "cancelled" was sent all the same, or a dead letter names
// work the ledger has committed, or a ledger claim is still pending after
// everything settled, or an alerts message reached a receiver its route
// does not name, a PagerDuty event named no alert's identity, a resolve
// routed to PagerDuty did not reach it with its firing's dedup_key, a
// resolve caused a model call, or a receiver refused a request, a firing
// reached a receiver after its resolve, a raced firing was not dropped, an
// alert's last state at PagerDuty is not what its firing and resolve make
// it, or an event refused with a 429 never got through; or, in the
// redrive phase, nothing was redriven, a run of the bulk redrive was not
// answered within its bound while a majority of the nodes was up, a dead
// letter was republished by two runs, the last run (every dead letter again, after everything
// settled) republished anything or found a dead letter neither redriven
// nor committed, or a refused intent did not end with exactly one charge.
// It also reports model calls against the minimum (one per
// intent with a model step) and tokens spent against the minimum, and
// draws effects, kills, pauses and restarts over time to -plot.
//
//	go run -C bench ./soak                                            # 10,000 intents, 20 kills, 3 restarts, 3 zombies
//	go run -C bench ./soak -intents 1000 -kills 5 -server-restarts 1  # CI, about two minutes
//	go run -C bench ./soak -intents 1000 -kills 5 -server-restarts 1 -broken   # must fail: lost intents
//	go run -C bench ./soak -intents 1000 -kills 5 -server-restarts 1 -broken-ledger -clock-jumps 30 -zombies 8   # must fail: not linearizable
//	go run -C bench ./soak -seed 1234 -keep                           # replay a seed, keep logs
//
// -broken runs the consumers with ONCEGATE_BROKEN=ack-early, a deliberate
// ack-before-effect bug in the oncegate_faults build; the checker must
// report lost intents. -broken-ledger runs them with
// ONCEGATE_BROKEN=commit-skips-token, a ledger whose commit skips the
// fencing-token check; the linearizability check must fail the run. -consumer-bin runs a consumer binary built elsewhere
// (with -tags oncegate_faults) instead of building one from the module.
// -oneshot-lost makes the one-shot sink act and then drop the response, a
// fault a one-shot effect must survive without being sent twice.
//
// Everything lives in a temporary directory, removed at exit unless -keep;
// every child process is killed at exit, Ctrl-C included. Run it from the
// module (it builds the binaries with go build).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx)
	stop()
	if err != nil {
		if !errors.Is(err, errFailed) {
			fmt.Fprintln(os.Stderr, "soak:", err)
		}
		os.Exit(1)
	}
}

// errFailed is returned when the checker found lost or duplicated work:
// the report says what.
var errFailed = errors.New("soak: the checker failed the run")

type options struct {
	intents        int
	seed           uint64
	kills          int
	serverRestarts int
	zombies        int
	clockJumps     int
	replicas       int
	duration       time.Duration
	hostile        float64
	modelErrors    float64
	modelTimeouts  float64
	modelLatency   time.Duration
	lostResponses  float64
	oneShotLost    float64
	crashPoints    float64
	lease          time.Duration
	ackWait        time.Duration
	maxDeliver     int
	hooksMaxDel    int
	hooksWindow    time.Duration
	syncInterval   string
	settleTimeout  time.Duration
	broken         bool
	brokenLedger   bool
	plot           string
	keep           bool
	logLevel       string
	consumerBin    string
	verbose        bool
	cluster        int
	strictTokens   bool
	partitions     int
	partitionFor   time.Duration
	poison         int
	approvals      bool
	approvalWait   time.Duration
	outages        int
	outageFor      time.Duration
	ledgerBlips    int
	ledgerBlipFor  time.Duration
	alerts         float64
	alertsRace     float64
	storm          int
	stormScale     float64
	redrive        bool
}

// poisonMaxDeliver is the max_deliver of the poison pipeline: each of its
// triggers may take its process down at most this many times.
const poisonMaxDeliver = 2

func parseFlags(args []string) (options, []string, error) {
	var o options
	fs := flag.NewFlagSet("soak", flag.ContinueOnError)
	fs.IntVar(&o.intents, "intents", 10_000, "intents in the workload (each published 1 to 4 times)")
	fs.Uint64Var(&o.seed, "seed", 0, "seed of the workload and the fault schedule (0: pick one and print it)")
	fs.IntVar(&o.kills, "kills", 20, "consumer replicas killed with SIGKILL at random instants")
	fs.IntVar(&o.serverRestarts, "server-restarts", 3, "nats-server restarts, alternately after SIGTERM and SIGKILL")
	fs.IntVar(&o.zombies, "zombies", 3, "replicas paused with SIGSTOP past the lease, then resumed with SIGCONT")
	fs.IntVar(&o.clockJumps, "clock-jumps", 3, "jumps of a replica's ledger clock by twice the lease (it takes live work over; fencing must hold)")
	fs.IntVar(&o.replicas, "replicas", 3, "consumer replicas sharing the JetStream KV ledger")
	fs.DurationVar(&o.duration, "duration", 0, "length of the fault window; the workload is published over its first 80% (0: 10ms per intent, at least 30s)")
	fs.Float64Var(&o.hostile, "hostile", 0.02, "share of intents that are hostile payloads")
	fs.Float64Var(&o.modelErrors, "model-errors", 0.05, "share of model calls answered 500 by the stand-in")
	fs.Float64Var(&o.modelTimeouts, "model-timeouts", 0.02, "share of model calls that hang until the client gives up")
	fs.DurationVar(&o.modelLatency, "model-latency", 2*time.Millisecond, "latency of every model answer")
	fs.Float64Var(&o.lostResponses, "lost-responses", 0.02, "share of new charges whose response the payment sink drops after committing")
	fs.Float64Var(&o.oneShotLost, "oneshot-lost", 0, "share of one-shot calls whose response the one-shot sink drops after acting")
	fs.Float64Var(&o.crashPoints, "crash-points", 0.3, "share of kills whose restart is armed with ONCEGATE_CRASH_AT (a death at a point of the flow)")
	fs.DurationVar(&o.lease, "lease", 3*time.Second, "ledger.lease of the consumers")
	fs.DurationVar(&o.ackWait, "ack-wait", 2*time.Second, "ack_wait of every pipeline")
	fs.IntVar(&o.maxDeliver, "max-deliver", 50, "max_deliver of every pipeline but hooks")
	fs.IntVar(&o.hooksMaxDel, "hooks-max-deliver", 3, "max_deliver of the hooks pipeline, whose backoff is 1s, 2s, 4s: its last delivery comes soon, and a crash there must still dead-letter the trigger, never drop it")
	fs.DurationVar(&o.hooksWindow, "hooks-window", 10*time.Second, "duplicate window of the stream hooks' effects land in (the harness creates it): tight, so that a redo after an outage lands past it unless Oncegate refuses to redo")
	fs.StringVar(&o.syncInterval, "sync-interval", "100ms", "nats-server jetstream sync_interval (a duration or \"always\")")
	fs.DurationVar(&o.settleTimeout, "settle-timeout", 12*time.Minute, "how long to wait, after the fault window, for every trigger to settle (more than the LLM cache's 10m fill timeout: a hung model call can pin an intent that long)")
	fs.BoolVar(&o.broken, "broken", false, "run the consumers with ONCEGATE_BROKEN=ack-early (ack before the effect): the checker must fail the run")
	fs.BoolVar(&o.brokenLedger, "broken-ledger", false, "run the consumers with ONCEGATE_BROKEN=commit-skips-token (the ledger commits without checking the fencing token): the linearizability check of the ledger histories must fail the run")
	fs.StringVar(&o.plot, "plot", "soak.png", "PNG `file` of effects, kills and restarts over time (empty: none)")
	fs.BoolVar(&o.keep, "keep", false, "keep the temporary directory (logs, stores, sink call logs)")
	fs.StringVar(&o.logLevel, "log-level", "info", "log.level of the consumers (debug logs every verdict: with -keep, the trail of each intent)")
	fs.StringVar(&o.consumerBin, "consumer-bin", "", "use this consumer `binary` (built with -tags oncegate_faults) instead of building one")
	fs.BoolVar(&o.verbose, "v", false, "print every fault as it happens")
	fs.IntVar(&o.cluster, "cluster", 0, "run a cluster of this many nats-server nodes (routes through TCP proxies of the harness, streams and buckets with that many replicas) instead of one server; -server-restarts then restart nodes (default 6, including the leaders of the trigger stream and of the ledger bucket)")
	fs.BoolVar(&o.strictTokens, "strict-tokens", true, "fail the run when the tokens spent pass the minimum, plus what the answers lost in flight cost again (see the model-call bound), by more than 0.05% (always reported; -strict-tokens=false reports it only)")
	fs.IntVar(&o.partitions, "partitions", 1, "with -cluster: partitions of one node from the others, for -partition-for each")
	fs.DurationVar(&o.partitionFor, "partition-for", 0, "with -cluster: how long a partition lasts (0: twice the lease)")
	fs.IntVar(&o.poison, "poison", 8, "poison intents (pipeline poison, max_deliver 2), one trigger each, half of which panic at the effect and half SIGKILL their process there (Oncegate-Fault): each must be dead-lettered, panic or exhausted, within max_deliver deliveries, and the processes restart no more often than the soak's kills and the kill triggers' max_deliver allow")
	fs.BoolVar(&o.approvals, "approvals", true, "the notify pipeline's one-shot effects wait for an approval: the soak approves most, cancels some (some as they may be going out) and never approves others; a cancel answered \"cancelled\" must never have its effect sent")
	fs.DurationVar(&o.approvalWait, "approval-timeout", 20*time.Second, "with -approvals: the notify pipeline's approval_timeout, after which an entry never approved is dead-lettered not_approved (0: Oncegate's default, a day, and every entry is approved or cancelled)")
	fs.IntVar(&o.outages, "outages", 1, "outages of every consumer replica at once (all SIGKILLed and kept down for -outage-for), longer than the duplicate window of the stream the hooks pipeline's effects land in")
	fs.DurationVar(&o.outageFor, "outage-for", 0, "how long an outage keeps every replica down (0: the -hooks-window plus 3s)")
	fs.IntVar(&o.ledgerBlips, "ledger-blips", 2, "ledger blips: on a cluster, step-downs of the ledger bucket's stream leader; on one server, windows of -ledger-blip-for during which every replica's ledger writes fail (SIGUSR2 to an oncegate_faults build)")
	fs.DurationVar(&o.ledgerBlipFor, "ledger-blip-for", 4*time.Second, "on one server, how long a ledger blip refuses writes")
	fs.Float64Var(&o.alerts, "alerts", 0.1, "alerts, as a share of -intents, to the alerts pipeline: each fires (1 to 3 triggers), 70% are resolved later under the same fingerprint (key.status; no model call), one in 25 is first seen resolved; routes send critical firings to PagerDuty, the others to Slack, and each resolve where its firing went (PagerDuty's resolve with the firing's dedup_key, or a Slack note; nothing for an alert first seen resolved) (0: none)")
	fs.Float64Var(&o.alertsRace, "alerts-race", 0.25, "share of the critical alerts that resolve whose page PagerDuty refuses (500) until it has their resolve: the forced race of a firing retried past its resolve, which must be dropped, never sent after it")
	fs.IntVar(&o.storm, "storm", 2000, "alerts in a storm to the alerts pipeline's one routing key, all critical, published within a minute (time scaled by -storm-scale) from 30% of the publication window: each must be paged once, none refused with a 429 (PagerDuty's quota, 120 a minute, is scaled alike), and the time to drain is reported (0: none)")
	fs.Float64Var(&o.stormScale, "storm-scale", 60, "how much faster than real time the storm's minute and PagerDuty's quota run (60: 120 events a second)")
	fs.BoolVar(&o.redrive, "redrive", true, "the redrive phase: the payment sink refuses new charges (400) from 25% to 45% of the fault window (dead letters pile up), is fixed, and the soak redrives them with the consumer's redrive command while faults continue, then again after they settle, which must republish nothing")
	if err := fs.Parse(args); err != nil {
		return o, nil, err
	}
	if fs.NArg() > 0 {
		return o, nil, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	switch {
	case o.intents < 1:
		return o, nil, errors.New("-intents must be positive")
	case o.replicas < 1:
		return o, nil, errors.New("-replicas must be positive")
	case o.kills < 0 || o.serverRestarts < 0 || o.zombies < 0 || o.clockJumps < 0:
		return o, nil, errors.New("-kills, -server-restarts, -zombies and -clock-jumps must not be negative")
	case o.hostile < 0 || o.hostile > 1:
		return o, nil, errors.New("-hostile must be in [0, 1]")
	case o.lostResponses < 0 || o.lostResponses > 1 || o.oneShotLost < 0 || o.oneShotLost > 1 || o.crashPoints < 0 || o.crashPoints > 1:
		return o, nil, errors.New("-lost-responses, -oneshot-lost and -crash-points must be in [0, 1]")
	case o.lease <= 0 || o.ackWait <= 0 || o.maxDeliver < 1 || o.hooksMaxDel < 1 || o.hooksWindow <= 0:
		return o, nil, errors.New("-lease, -ack-wait, -max-deliver, -hooks-max-deliver and -hooks-window must be positive")
	case o.poison < 0 || o.outages < 0 || o.outageFor < 0 || o.ledgerBlips < 0 || o.ledgerBlipFor <= 0 || o.approvalWait < 0:
		return o, nil, errors.New("-poison, -outages, -outage-for, -ledger-blips and -approval-timeout must not be negative, -ledger-blip-for must be positive")
	case o.alerts < 0 || o.alerts > 10:
		return o, nil, errors.New("-alerts must be in [0, 10]")
	case o.alertsRace < 0 || o.alertsRace > 1:
		return o, nil, errors.New("-alerts-race must be in [0, 1]")
	case o.storm < 0 || o.stormScale < 1:
		return o, nil, errors.New("-storm must not be negative, -storm-scale at least 1")
	case o.intents+o.poison+int(2*o.alerts*float64(o.intents))+o.storm > 999_999:
		return o, nil, errors.New("-intents, -poison, the alerts (two intents each at most) and -storm must add up to less than a million (payloads carry six digits)")
	}
	if o.outageFor == 0 {
		o.outageFor = o.hooksWindow + 3*time.Second
	}
	if o.duration == 0 {
		o.duration = max(30*time.Second, time.Duration(o.intents)*10*time.Millisecond)
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	switch {
	case o.broken && o.brokenLedger:
		return o, nil, errors.New("-broken and -broken-ledger are two builds of one switch: pick one")
	case o.cluster < 0 || o.cluster == 2 || o.cluster > 5:
		return o, nil, errors.New("-cluster must be 0 (one server), 1, or 3 to 5 nodes")
	case o.partitions < 0 || o.partitionFor < 0:
		return o, nil, errors.New("-partitions and -partition-for must not be negative")
	}
	if o.cluster > 0 && !set["server-restarts"] {
		o.serverRestarts = 6
	}
	if o.cluster < 3 {
		o.partitions = 0 // a node cut off from a cluster of one is nothing
	}
	if o.partitionFor == 0 {
		o.partitionFor = 2 * o.lease
	}
	// The command that replays this run: the flags given, with the seed.
	var replay []string
	fs.Visit(func(f *flag.Flag) {
		if f.Name != "seed" {
			replay = append(replay, "-"+f.Name+"="+f.Value.String())
		}
	})
	return o, replay, nil
}

func run(ctx context.Context) error {
	o, replay, err := parseFlags(os.Args[1:])
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	if o.seed == 0 {
		o.seed = uint64(time.Now().UnixNano())%1_000_000_000 + 1
	}
	fmt.Printf("soak: seed %d (replay: %s)\n", o.seed, strings.Join(append([]string{"go run -C bench ./soak", fmt.Sprintf("-seed %d", o.seed)}, replay...), " "))
	h, err := newHarness(o)
	if err != nil {
		return err
	}
	defer h.close()
	return h.run(ctx)
}

// extras are the workload's parts beyond the regular pipelines.
func (o options) extras() extras {
	return extras{poison: o.poison, approval: o.approvals, never: o.approvals && o.approvalWait > 0, alerts: int(o.alerts * float64(o.intents)),
		alertsRace: o.alertsRace, storm: o.storm, stormFor: stormMinute(o)}
}

// pdQuota is PagerDuty's quota in the run: 120 events a minute per
// routing key, the minute scaled by -storm-scale.
func pdQuota(o options) (int, time.Duration) { return 120, stormMinute(o) }

// stormMinute is a minute, scaled by -storm-scale.
func stormMinute(o options) time.Duration {
	return time.Duration(float64(time.Minute) / max(o.stormScale, 1))
}
