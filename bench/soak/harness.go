package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/oncegate/oncegate/internal/config"
	"github.com/oncegate/oncegate/internal/consumer"
	"github.com/oncegate/oncegate/internal/standin"
	"github.com/oncegate/oncegate/pkg/dedupe"
)

// harness owns everything a run starts.
type harness struct {
	o      options
	dir    string
	procs  *procs
	events *events

	healWait time.Duration // how long a node may stay unhealthy after a fault (0: 2 minutes)

	consumerBin string
	natsBin     string
	configPath  string

	server   *natsServer
	serverMu sync.Mutex
	nodes    []*clusterNode  // with -cluster: the nodes, and server is nil
	proxies  [][]*routeProxy // [i][j]: node i's route to node j
	replicas []*replica

	model *standin.Server
	proxy *modelProxy
	// reach is, by replica, the ledger writes its processes had answered
	// (call and answer times), read from the histories once (ledgerAnswered).
	reach struct {
		once   sync.Once
		writes map[int][][2]int64
		unread map[int]bool // a replica whose history did not read
	}
	pay      *paymentSink
	shot     *oneShotSink
	alerts   *alertReceivers // the alerts pipeline's PagerDuty and Slack
	urls     serviceURLs
	stops    []func()
	callLogs []*callLog

	nc *nats.Conn
	js jetstream.JetStream

	w        *workload
	schedule []fault
	pub      *publisher
	t0       time.Time

	outageKills atomic.Int64 // replica processes the outages killed
	controls    *controls    // approvals and cancels of notify's one-shot effects
	redriver    *redriver    // with -redrive: the runs of the redrive command

	bg      sync.WaitGroup
	cancel  context.CancelCauseFunc
	fatalMu sync.Mutex
	fatalE  error
}

func newHarness(o options) (*harness, error) {
	dir, err := os.MkdirTemp("", "oncegate-soak-")
	if err != nil {
		return nil, err
	}
	h := &harness{o: o, dir: dir, procs: newProcs(), events: &events{verbose: o.verbose}}
	for _, d := range []string{"bin", "logs", "nats"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			return nil, err
		}
	}
	return h, nil
}

// fatal aborts the run with err.
func (h *harness) fatal(err error) {
	h.fatalMu.Lock()
	if h.fatalE == nil {
		h.fatalE = err
	}
	h.fatalMu.Unlock()
	if h.cancel != nil {
		h.cancel(err)
	}
}

func (h *harness) close() {
	if h.cancel != nil {
		h.cancel(errors.New("soak: closing"))
	}
	h.procs.killAll()
	waitGroup(&h.bg, 15*time.Second)
	if h.nc != nil {
		h.nc.Close()
	}
	for i := len(h.stops) - 1; i >= 0; i-- {
		h.stops[i]()
	}
	for _, l := range h.callLogs {
		l.Close()
	}
	if h.o.keep {
		fmt.Printf("soak: kept %s (logs/, sink call logs, nats store, replica data)\n", h.dir)
		return
	}
	os.RemoveAll(h.dir)
}

func waitGroup(wg *sync.WaitGroup, d time.Duration) {
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(d):
	}
}

// historyPath is the file where a replica's processes record their ledger
// operations, one after the other.
func (h *harness) historyPath(replica int) string {
	return filepath.Join(h.dir, "logs", fmt.Sprintf("ledger-history-replica-%d.jsonl", replica))
}

// linearizabilityHTML is where the visualization of a ledger history that
// is not linearizable goes: beside the plot, or in the run's directory.
func (h *harness) linearizabilityHTML() string {
	if h.o.plot == "" {
		return filepath.Join(h.dir, "ledger-history.html")
	}
	return strings.TrimSuffix(h.o.plot, filepath.Ext(h.o.plot)) + "-ledger-history.html"
}

// logHint says where a log is, or how to keep it.
func (h *harness) logHint(path string) string {
	if h.o.keep {
		return " (log: " + path + ")"
	}
	return " (run with -keep to keep its log)"
}

// secretsEnv is the environment from which the configuration under test
// reads its secrets: PagerDuty's routing key and Slack's webhook URL.
func (h *harness) secretsEnv() []string {
	return []string{envRoutingKey + "=" + routingKey, envSlackURL + "=" + h.urls.slack}
}

// consumerEnv is the environment of a replica's process: its own model
// base URL (the proxy tells the replicas' calls apart by it), and the
// deliberate bug when asked for.
func (h *harness) consumerEnv(replica int) []string {
	env := []string{
		fmt.Sprintf("ONCEGATE_LLM_BASE_URL=%s/r%d/v1", h.urls.modelRoot, replica),
		fmt.Sprintf("ONCEGATE_CLOCK_JUMP=%s", 2*h.o.lease), // a SIGUSR1 jumps the ledger clock
	}
	env = append(env, h.secretsEnv()...)
	env = append(env, "ONCEGATE_FAULTS_LEDGER_HISTORY="+h.historyPath(replica),
		fmt.Sprintf("ONCEGATE_FAULTS_LEDGER_OUTAGE=%s", h.o.ledgerBlipFor)) // a SIGUSR2 refuses ledger writes that long
	if h.o.broken {
		env = append(env, "ONCEGATE_BROKEN=ack-early")
	}
	if h.o.brokenLedger {
		env = append(env, "ONCEGATE_BROKEN=commit-skips-token")
	}
	return env
}

func (h *harness) run(parent context.Context) error {
	ctx, cancel := context.WithCancelCause(parent)
	h.cancel = cancel
	err := h.runCtx(ctx)
	h.fatalMu.Lock()
	ferr := h.fatalE
	h.fatalMu.Unlock()
	if ferr != nil {
		return ferr
	}
	if parent.Err() != nil {
		return fmt.Errorf("interrupted: %w", parent.Err())
	}
	return err
}

func (h *harness) runCtx(ctx context.Context) error {
	o := h.o
	rng := rand.New(rand.NewPCG(o.seed, 0x736f616b)) // "soak"
	h.w = newWorkload(rng, o.intents, o.hostile, o.duration*8/10, o.duration, o.extras())
	h.schedule = newSchedule(rng, o)
	h.printPlan()

	slow := whileSlow("building nats-server and consumer")
	err := h.build(ctx)
	slow()
	if err != nil {
		return err
	}
	if err := h.startServices(); err != nil {
		return err
	}
	if err := h.startServer(ctx); err != nil {
		return err
	}
	if err := h.writeConfig(); err != nil {
		return err
	}
	if err := h.holdRaced(); err != nil {
		return err
	}
	if o.approvals {
		keyer, err := h.keyer(pNotify)
		if err != nil {
			return err
		}
		if h.controls, err = newControls(o.seed, h.w, keyer, h.nc); err != nil {
			return err
		}
	}
	if _, err := h.js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{
		Name: hooksStream, Subjects: []string{"effects.hooks"}, Storage: jetstream.FileStorage, Duplicates: h.o.hooksWindow, Replicas: max(1, h.o.cluster),
	}); err != nil {
		return fmt.Errorf("stream %s: %w", hooksStream, err)
	}
	t := time.Now()
	slow = whileSlow("starting the consumer replicas")
	err = h.startReplicas(ctx)
	slow()
	if err != nil {
		return err
	}
	fmt.Printf("soak: nats at %s, %d consumer replicas consuming (%.1fs)\n", h.natsURL(), len(h.replicas), time.Since(t).Seconds())

	// The fault window: the workload and the schedule run side by side.
	h.t0 = time.Now()
	h.events.mu.Lock()
	h.events.t0 = h.t0
	h.events.mu.Unlock()
	h.pub = &publisher{js: h.js, w: h.w}
	pubDone := make(chan error, 1)
	h.bg.Go(func() { pubDone <- h.pub.run(ctx, h.t0) })
	faultsDone := make(chan struct{})
	h.bg.Go(func() { h.inject(ctx, h.t0, h.schedule); close(faultsDone) })
	windowOver := make(chan struct{})
	redriveDone := make(chan struct{})
	if o.redrive {
		h.redriver = &redriver{h: h, fixed: make(chan struct{})}
		h.bg.Go(func() { h.refuse(ctx, h.t0, h.redriver) })
		h.bg.Go(func() { h.redriver.during(ctx, windowOver); close(redriveDone) })
	} else {
		close(redriveDone)
	}
	controlsDone := make(chan struct{})
	if h.controls != nil {
		h.bg.Go(func() { h.controls.run(ctx, h.t0); close(controlsDone) })
	} else {
		close(controlsDone)
	}
	tick := time.NewTicker(progressEvery)
	defer tick.Stop()
	var pubErr error
	for pubDone != nil || faultsDone != nil {
		select {
		case pubErr = <-pubDone:
			pubDone = nil
			if pubErr != nil {
				return fmt.Errorf("publishing: %w", pubErr)
			}
		case <-faultsDone:
			faultsDone = nil
		case <-tick.C:
			h.printProgress(ctx)
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	}
	window := time.Since(h.t0)
	close(windowOver)
	fmt.Printf("soak: fault window over after %.1fs; every process resumed, nats-server up; waiting for every trigger to settle\n", window.Seconds())

	t = time.Now()
	settled, why := h.settle(ctx, controlsDone)
	if ctx.Err() != nil {
		return context.Cause(ctx)
	}
	settleTime := time.Since(t)
	if settled {
		fmt.Printf("soak: settled %.1fs after the fault window\n", settleTime.Seconds())
	} else {
		fmt.Printf("soak: NOT settled %v after the fault window: %s\n", o.settleTimeout, why)
	}
	if h.redriver != nil && settled {
		<-redriveDone
		slow = whileSlow("redriving the dead letters again, after the faults")
		settled, why = h.redriver.after(ctx)
		slow()
		if ctx.Err() != nil {
			return context.Cause(ctx)
		}
		fmt.Printf("soak: redrive command run %d times; the last republished nothing: %v\n", len(h.redriver.passes), settled)
	}
	t = time.Now()
	var wg sync.WaitGroup
	for _, r := range h.replicas {
		wg.Go(r.stop)
	}
	slow = whileSlow("draining the replicas")
	wg.Wait()
	slow()
	fmt.Printf("soak: replicas drained with SIGTERM (%.1fs); checking\n", time.Since(t).Seconds())

	slow = whileSlow("checking every intent")
	rep, err := h.check(ctx)
	slow()
	if err != nil {
		return fmt.Errorf("checking: %w", err)
	}
	rep.settled, rep.settleWhy, rep.window, rep.settleTime = settled, why, window, settleTime
	if o.keep {
		if err := h.writeAnswers(); err != nil {
			fmt.Fprintln(os.Stderr, "soak: writing the model's answers:", err)
		}
		if err := h.writeReceived(); err != nil {
			fmt.Fprintln(os.Stderr, "soak: writing what the alert receivers accepted:", err)
		}
	}
	rep.print(os.Stdout, h)
	if o.plot != "" {
		if err := h.plot(rep, o.plot); err != nil {
			fmt.Fprintln(os.Stderr, "soak: plot:", err)
		} else {
			fmt.Printf("soak: plot written to %s\n", o.plot)
		}
	}
	if !rep.pass() {
		fmt.Printf("soak: FAIL — replay with: go run -C bench ./soak -seed %d (same flags), add -keep for the logs\n", o.seed)
		return errFailed
	}
	fmt.Println("soak: PASS")
	return nil
}

func (h *harness) printPlan() {
	byPipe := map[string]int{}
	hostile := 0
	for _, in := range h.w.intents {
		if in.hostile != "" {
			hostile++
			continue
		}
		byPipe[in.pipeline]++
	}
	kinds := map[string]int{}
	for _, p := range h.w.pubs {
		kinds[p.kind]++
	}
	resolves := 0
	for _, in := range h.w.intents {
		if in.alert != nil && in.alert.status == statusResolved {
			resolves++
		}
	}
	fmt.Printf("soak: %d intents (%s %d, %s %d, %s %d, %s %d, hostile %d, %s %d, %s %d of which %d resolves) in %d triggers (%d originals, %d provider retries, %d redeliveries, %d reworded, %d hostile)\n",
		len(h.w.intents), pTriage, byPipe[pTriage], pCharges, byPipe[pCharges], pNotify, byPipe[pNotify], pHooks, byPipe[pHooks], hostile,
		pPoison, byPipe[pPoison], pAlerts, byPipe[pAlerts], resolves,
		len(h.w.pubs), kinds["original"], kinds["retry"], kinds["redelivery"], kinds["reworded"], kinds["hostile"])
	if h.o.redrive {
		fmt.Printf("soak: redrive phase: the payment sink refuses new charges from %.0fs to %.0fs; the redrive command runs every %v from 3s after\n",
			h.o.duration.Seconds()*refuseFrom, h.o.duration.Seconds()*refuseTo, redriveEvery)
	}
	n := map[string]int{}
	armed := 0
	for _, f := range h.schedule {
		n[f.kind]++
		if f.crashAt != "" {
			armed++
		}
	}
	server := "nats-server restarts"
	if h.o.cluster > 0 {
		server = fmt.Sprintf("restarts of nodes of a %d-node cluster", h.o.cluster)
	}
	fmt.Printf("soak: faults over %v: %d SIGKILLs of %d replicas (%d restarts armed with a crash point), %d SIGSTOP/SIGCONT pauses past the %v lease, %d %s (%d SIGTERM, %d SIGKILL), %d partitions of a node for %v, %d ledger clock jumps of +%v\n",
		h.o.duration, n[fKill], h.o.replicas, armed, n[fZombie], h.o.lease, n[fServerTerm]+n[fServerKill], server, n[fServerTerm], n[fServerKill], n[fPartition], h.o.partitionFor, n[fClock], 2*h.o.lease)
	broken := "no"
	switch {
	case h.o.broken:
		broken = "ack-early"
	case h.o.brokenLedger:
		broken = "commit-skips-token"
	}
	fmt.Printf("soak: model: %.0f%% errors, %.0f%% timeouts; payment sink drops %.0f%% of responses; one-shot sink drops %.0f%%; broken build: %s\n",
		100*h.o.modelErrors, 100*h.o.modelTimeouts, 100*h.o.lostResponses, 100*h.o.oneShotLost, broken)
	if h.o.verbose {
		for _, f := range h.schedule {
			fmt.Println("  schedule:", f)
		}
	}
}

// progressEvery is how often the soak prints a progress line while it
// injects faults and while it waits for the triggers to settle.
const progressEvery = 5 * time.Second

// whileSlow prints a line naming what the harness is doing every
// progressEvery until the returned function is called, so that no step
// of a long run is silent for longer.
func whileSlow(what string) (done func()) {
	start := time.Now()
	stop, stopped := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(stopped)
		t := time.NewTicker(progressEvery)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
				fmt.Printf("  %s... %.0fs\n", what, time.Since(start).Seconds())
			}
		}
	}()
	return func() { close(stop); <-stopped }
}

func (h *harness) printProgress(ctx context.Context) {
	published, retries := h.pub.progress()
	effects := h.pay.created.Load() + h.shot.calls.Load()
	ictx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	for _, name := range []string{"ONCEGATE_EFFECTS", hooksStream} {
		if st, err := h.js.Stream(ictx, name); err == nil {
			effects += int64(st.CachedInfo().State.Msgs)
		}
	}
	kills := h.events.count(evKill) + h.events.count(evCrashPoint)
	restarts := h.events.count(evServerTerm) + h.events.count(evServerKill)
	fmt.Printf("  %5.0fs  published %d/%d triggers (%d publish retries), effects %d, kills %d, server restarts %d, pauses %d\n",
		time.Since(h.t0).Seconds(), published, len(h.w.pubs), retries, effects, kills, restarts, h.events.count(evPause))
}

// moduleRoot returns the directory of the oncegate module: the repository's
// root, which bench's go.mod replaces it with.
func moduleRoot() (string, error) {
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "github.com/oncegate/oncegate").Output()
	if err != nil {
		return "", fmt.Errorf("go list -m github.com/oncegate/oncegate: %w (run soak from the repository: go run -C bench ./soak)", err)
	}
	return strings.TrimSpace(string(out)), nil
}

func (h *harness) build(ctx context.Context) error {
	t := time.Now()
	root, err := moduleRoot()
	if err != nil {
		return err
	}
	h.natsBin = filepath.Join(h.dir, "bin", "nats-server")
	builds := [][]string{{"build", "-o", h.natsBin, "github.com/nats-io/nats-server/v2"}}
	if h.o.consumerBin != "" {
		h.consumerBin = h.o.consumerBin
	} else {
		h.consumerBin = filepath.Join(h.dir, "bin", "consumer")
		builds = append(builds, []string{"build", "-tags", "oncegate_faults", "-o", h.consumerBin, "./cmd/consumer"})
	}
	for _, args := range builds {
		cmd := exec.CommandContext(ctx, "go", args...)
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("go %s: %w\n%s", strings.Join(args, " "), err, out)
		}
	}
	fmt.Printf("soak: built nats-server and consumer (-tags oncegate_faults) in %.1fs\n", time.Since(t).Seconds())
	return nil
}

// startServices starts the model and the sinks in this process.
func (h *harness) startServices() error {
	var err error
	h.model, err = standin.New(standin.Options{
		ErrorRate: h.o.modelErrors, TimeoutRate: h.o.modelTimeouts, Latency: h.o.modelLatency, Seed: h.o.seed,
	})
	if err != nil {
		return err
	}
	h.proxy = newModelProxy(h.model)
	payLog, err := newCallLog(filepath.Join(h.dir, "logs", "payment-sink.jsonl"))
	if err != nil {
		return err
	}
	shotLog, err := newCallLog(filepath.Join(h.dir, "logs", "one-shot-sink.jsonl"))
	if err != nil {
		return err
	}
	h.callLogs = append(h.callLogs, payLog, shotLog)
	h.pay = newPaymentSink(h.o.seed, h.o.lostResponses, payLog)
	h.shot = newOneShotSink(h.o.seed, h.o.oneShotLost, shotLog)
	modelURL, stopModel, err := serveHTTP(h.proxy)
	if err != nil {
		return err
	}
	h.stops = append(h.stops, func() { h.model.Close(); stopModel() })
	payURL, stopPay, err := serveHTTP(h.pay)
	if err != nil {
		return err
	}
	h.stops = append(h.stops, stopPay)
	shotURL, stopShot, err := serveHTTP(h.shot)
	if err != nil {
		return err
	}
	h.stops = append(h.stops, stopShot)
	h.alerts = newAlertReceivers()
	quota, per := pdQuota(h.o)
	h.alerts.pd.Limit(quota, per) // PagerDuty's quota, time scaled: a 429 is an event it dropped
	pdURL, stopPD, err := serveHTTP(h.alerts.pdLog)
	if err != nil {
		return err
	}
	h.stops = append(h.stops, stopPD)
	slackURL, stopSlack, err := serveHTTP(h.alerts.slackLog)
	if err != nil {
		return err
	}
	h.stops = append(h.stops, stopSlack)
	h.urls = serviceURLs{model: modelURL + "/v1", modelRoot: modelURL, pay: payURL + "/v1/charges", shot: shotURL + "/v1/messages",
		pagerDuty: pdURL + "/v2/enqueue", slack: slackURL + slackPath}
	return nil
}

type serviceURLs struct{ model, modelRoot, pay, shot, pagerDuty, slack string }

// startServer starts the nats-server child, or with -cluster the cluster's
// nodes, and connects the harness.
func (h *harness) startServer(ctx context.Context) error {
	if h.o.cluster > 0 {
		return h.startCluster(ctx)
	}
	port, err := freePort()
	if err != nil {
		return err
	}
	conf := filepath.Join(h.dir, "nats.conf")
	if err := os.WriteFile(conf, []byte("# soak: the nats-server's settings beyond its flags\njetstream {\n  sync_interval: "+h.o.syncInterval+"\n}\n"), 0o644); err != nil {
		return err
	}
	h.server = &natsServer{
		h: h, bin: h.natsBin, port: port, log: filepath.Join(h.dir, "logs", "nats-server.log"),
		args: []string{"-js", "-sd", filepath.Join(h.dir, "nats"), "-p", fmt.Sprint(port), "-a", "127.0.0.1", "-c", conf},
	}
	if err := h.server.start(ctx); err != nil {
		return err
	}
	return h.connect()
}

// connect connects the harness to the server or the cluster.
func (h *harness) connect() error {
	var err error
	h.nc, err = nats.Connect(h.natsURL(), nats.Name("oncegate-soak"),
		nats.MaxReconnects(-1), nats.ReconnectWait(100*time.Millisecond), nats.ReconnectJitter(50*time.Millisecond, 0),
		nats.ReconnectBufSize(-1), // fail publishes at once while disconnected: the publisher retries them
	)
	if err != nil {
		return err
	}
	h.js, err = jetstream.New(h.nc)
	return err
}

// consumerConfig is the configuration under test; the flags -data and
// -nats-url give each replica its directory and the server.
const consumerConfig = `# soak: the configuration of every consumer replica
data_dir: %[1]s
nats:
  url: %[2]s
  connect_timeout: 2s
ledger:
  store: kv
  lease: %[3]s
  # The clock jumps (-clock-jumps) put a replica's ledger clock this far
  # ahead: the redo-past-the-window guard must allow for it.
  max_clock_skew: %[13]s
  kv: {replicas: %[9]d}
llm:
  base_url: %[4]s
  timeout: 3s
  cache:
    # Every replica has its own base URL (the proxy tells them apart by
    # it); they share one cache, so they name the endpoint alike.
    endpoint: soak-standin
metrics:
  listen: ""
log:
  level: %[12]s
stream:
  # Covers the redelivery horizon of the pipelines with max_deliver %[6]d.
  duplicates: %[11]s
  replicas: %[9]d
pipelines:
  - name: triage
    subject: triggers.triage
    key:
      fields: [/alert/fingerprint]
      version: /alert/occurrence
    step:
      name: triage
      prompt: "Triage alert {{.alert.fingerprint}} (occurrence {{.alert.occurrence}}, {{.alert.severity}}): {{.alert.summary}}"
    effect: {sink: jetstream, subject: effects.triage}
    ack_wait: %[5]s
    max_deliver: %[6]d
  - name: charges
    subject: triggers.charges
    key:
      fields: [/charge/id]
    step:
      name: descriptor
      prompt: "Write the statement descriptor of charge {{.charge.id}} ({{.charge.amount}} {{.charge.currency}}): {{.charge.description}}"
    effect: {sink: http, url: "%[7]s"}
    ack_wait: %[5]s
    max_deliver: %[6]d
  - name: notify
    subject: triggers.notify
    key:
      fields: [/msg/id]
    effect: {sink: http, url: "%[8]s", class: one-shot%[14]s}
    ack_wait: %[5]s
    max_deliver: %[6]d
  - name: hooks
    subject: triggers.hooks
    key:
      volatile: [/delivery_id, /sent_at]
    # Its effects land in ONCEGATE_HOOKS, whose duplicate window the
    # harness makes tight (-hooks-window): a redo after an outage would
    # land past it, so a taken-over claim older than it is dead-lettered
    # as an unknown outcome, never redone.
    effect: {sink: jetstream, subject: effects.hooks}
    ack_wait: 1s
    backoff: [1s, 2s, 4s]
    max_deliver: %[10]d
  - name: poison
    subject: triggers.poison
    key:
      fields: [/job/id]
    # Each trigger carries Oncegate-Fault: its work panics, or kills the
    # process, when it reaches the effect. It must be dead-lettered within
    # max_deliver deliveries, and take its process down no more often.
    effect: {sink: jetstream, subject: effects.poison}
    ack_wait: %[5]s
    max_deliver: %[15]d
  - name: alerts
    subject: triggers.alerts
    # A firing and its resolve are distinct work on one alert identity
    # (key.status); the resolve skips the model step and closes, by the
    # identity (the pagerduty preset's dedup_key), the incident its firing
    # opened.
    #
    # The lifecycle is ordered: a resolve waits for its firing's page up
    # to resolve_wait (the forced race: PagerDuty refuses some pages until
    # their resolve), and a firing whose resolve went out is dropped.
    key:
      fields: [/alert/fingerprint]
      version: /alert/startsAt
      status: /status
      resolve_wait: 3s
    step:
      name: alert-triage
      skip_when: 'status == "resolved"'
      prompt: "Triage alert {{.alert.labels.alertname}} on {{.alert.labels.instance}} ({{.alert.labels.severity}}, ref {{.alert.annotations.ref}}): {{.alert.annotations.summary}}"
    effects:
      pagerduty:
        preset: pagerduty
        url: "%[16]s"
        routing_key_env: SOAK_PAGERDUTY_ROUTING_KEY
        # PagerDuty's quota (120 events a minute per routing key), time
        # scaled by -storm-scale, shared by the replicas: each keeps
        # within its share.
        rate_limit: {requests: %[17]d, per: %[18]s}
      slack:
        preset: slack
        url_env: SOAK_SLACK_WEBHOOK_URL
        rate_limit: {requests: 20, per: 2s}
        text: '{{if eq .status "resolved"}}Resolved: {{end}}{{.trigger.alert.labels.alertname}} on {{.trigger.alert.labels.instance}} ({{.trigger.alert.annotations.ref}}){{if .answer_text}}: {{truncate 200 .answer_text}}{{end}}'
    # A resolve takes its firing's route: PagerDuty's resolve for a page,
    # a Slack note for a message; nothing for an alert first seen resolved.
    routes:
      - name: page
        when: 'trigger.alert.labels.severity == "critical"'
        effects: [pagerduty]
      - name: rest
        effects: [slack]
    ack_wait: %[5]s
    max_deliver: %[6]d
`

// renderConfig fills consumerConfig in.
func renderConfig(o options, dataDir, natsURL, modelURL, payURL, shotURL, pdURL string) string {
	approval := ""
	if o.approvals {
		approval = ", approval_subject: " + approvalSubject
		if o.approvalWait > 0 {
			approval += fmt.Sprintf(", approval_timeout: %s", o.approvalWait)
		}
	}
	quota, per := pdQuota(o)
	return fmt.Sprintf(consumerConfig, dataDir, natsURL, o.lease, modelURL, o.ackWait, o.maxDeliver, payURL, shotURL, max(1, o.cluster), o.hooksMaxDel, duplicateWindow(o), o.logLevel, 2*o.lease,
		approval, poisonMaxDeliver, pdURL, max(1, quota/o.replicas), per)
}

// keyer returns the keyer of pipeline as the configuration under test
// defines it.
func (h *harness) keyer(pipeline string) (*dedupe.Keyer, error) {
	data, err := os.ReadFile(h.configPath)
	if err != nil {
		return nil, err
	}
	cfg, err := config.Parse(data, h.configPath)
	if err != nil {
		return nil, fmt.Errorf("the configuration under test: %w", err)
	}
	for i := range cfg.Pipelines {
		if p := &cfg.Pipelines[i]; p.Name == pipeline {
			return dedupe.NewKeyer(consumer.KeySpec(p))
		}
	}
	return nil, fmt.Errorf("no pipeline %s in the configuration under test", pipeline)
}

// approvalSubject is where the soak approves notify's one-shot effects.
const approvalSubject = "oncegate.approve.notify"

// duplicateWindow covers every pipeline's redelivery horizon: each
// delivery waits at most the longest of its ack wait, Oncegate's retry
// delay (up to 30s) and the lease.
func duplicateWindow(o options) time.Duration {
	return time.Duration(o.maxDeliver) * max(o.ackWait, o.lease, 30*time.Second)
}

// hooksStream is the stream the hooks pipeline's effects land in.
const hooksStream = "ONCEGATE_HOOKS"

func (h *harness) writeConfig() error {
	h.configPath = filepath.Join(h.dir, "oncegate.yaml")
	cfg := renderConfig(h.o, filepath.Join(h.dir, "replica-data"), h.natsURL(), h.urls.model, h.urls.pay, h.urls.shot, h.urls.pagerDuty)
	return os.WriteFile(h.configPath, []byte(cfg), 0o644)
}

// startReplicas starts the replicas, the first one alone until it has set
// up the streams and durable consumers, and waits until all consume.
func (h *harness) startReplicas(ctx context.Context) error {
	for i := range h.o.replicas {
		r := &replica{h: h, idx: i, dataDir: filepath.Join(h.dir, fmt.Sprintf("replica-%d", i)),
			log: filepath.Join(h.dir, "logs", fmt.Sprintf("replica-%d.log", i)), done: make(chan struct{})}
		h.replicas = append(h.replicas, r)
	}
	wait := func(r *replica) error {
		deadline := time.Now().Add(60 * time.Second)
		for {
			if c := r.current(); c != nil && strings.Contains(c.output(), "msg=consuming") {
				return nil
			}
			if r.failedStarts.Load() > 0 {
				last, _ := r.lastFailure.Load().(string)
				return fmt.Errorf("%s does not start: %s%s", r.name(), last, h.logHint(r.log))
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("%s is not consuming after 60s%s", r.name(), h.logHint(r.log))
			}
			if !sleepCtx(ctx, 20*time.Millisecond) {
				return context.Cause(ctx)
			}
		}
	}
	for i, r := range h.replicas {
		h.bg.Go(func() { r.supervise(ctx) })
		if i == 0 {
			if err := wait(r); err != nil {
				return err
			}
		}
	}
	for _, r := range h.replicas[1:] {
		if err := wait(r); err != nil {
			return err
		}
	}
	return nil
}

// settle waits until every durable consumer has nothing pending and
// nothing unacknowledged, and the sinks nothing in flight, several times in
// a row.
func (h *harness) settle(ctx context.Context, controlsDone <-chan struct{}) (bool, string) {
	deadline := time.Now().Add(h.o.settleTimeout)
	lastPrint := time.Now()
	streak := 0
	why := ""
	for {
		ok, w := h.settledOnce(ctx)
		select {
		case <-controlsDone:
		default:
			ok, w = false, "approvals and cancels still being sent; "+w
		}
		if ok {
			streak++
			if streak >= 6 {
				return true, ""
			}
		} else {
			streak, why = 0, w
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return false, why
		}
		if time.Since(lastPrint) >= progressEvery {
			state := why
			if ok {
				state = fmt.Sprintf("everything settled; confirming (%d of 6 checks)", streak)
			}
			fmt.Printf("  %5.0fs  settling: %s\n", time.Since(h.t0).Seconds(), state)
			lastPrint = time.Now()
		}
		sleepCtx(ctx, 500*time.Millisecond)
	}
}

func (h *harness) settledOnce(ctx context.Context) (bool, string) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	var busy []string
	check := func(stream, durable, name string) {
		c, err := h.js.Consumer(ctx, stream, durable)
		if err != nil {
			busy = append(busy, name+": "+err.Error())
			return
		}
		info, err := c.Info(ctx)
		if err != nil {
			busy = append(busy, name+": "+err.Error())
			return
		}
		if info.NumPending != 0 || info.NumAckPending != 0 {
			busy = append(busy, fmt.Sprintf("%s %d pending, %d unacknowledged", name, info.NumPending, info.NumAckPending))
		}
	}
	for _, p := range pipelines {
		check("ONCEGATE", consumer.Durable(p), p)
	}
	check("ONCEGATE_OUTBOX", consumer.Durable(pNotify)+"-dispatch", pNotify+" dispatcher")
	check("ONCEGATE_OUTBOX", consumer.Durable(pAlerts)+"-dispatch", pAlerts+" dispatcher")
	if h.o.approvals {
		check("ONCEGATE_OUTBOX", consumer.Durable(pNotify)+"-parked", pNotify+" waiting for approval")
	}
	if n := h.pay.busy() + h.shot.busy() + h.alerts.busy(); n > 0 {
		busy = append(busy, fmt.Sprintf("%d sink calls in flight", n))
	}
	if n := h.proxy.busy(); len(busy) > 0 && n > 0 {
		// Not a reason to wait, but often the cause of a long wait: a
		// hung model call that retries of its intent keep joining.
		busy = append(busy, fmt.Sprintf("(%d model calls in flight upstream)", n))
	}
	return len(busy) == 0, strings.Join(busy, "; ")
}

// holdRaced makes PagerDuty refuse the pages of the raced alerts until it
// has their resolve: the forced race of a firing retried past its resolve.
func (h *harness) holdRaced() error {
	keyer, err := h.keyer(pAlerts)
	if err != nil {
		return err
	}
	for _, in := range h.w.intents {
		if a := in.alert; a != nil && a.raced && a.status == statusFiring {
			ik, err := keyer.Intent(in.copies[0].data)
			if err != nil {
				return fmt.Errorf("the identity of alerts intent %d: %w", in.id, err)
			}
			h.alerts.pd.HoldTriggers(ik.Key.String())
		}
	}
	return nil
}
