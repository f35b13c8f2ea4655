package consumer

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/oncegate/oncegate/internal/config"
	"github.com/oncegate/oncegate/internal/ledger"
	"github.com/oncegate/oncegate/internal/natstest"
	"github.com/oncegate/oncegate/pkg/dedupe"
)

// TestAskThePreviousHolder: a process that takes an intent over asks the
// holder it took the claim from, over NATS, for its step's answer: a
// holder whose call is still in flight answers once the call ends; one
// whose note the ledger refused answers from what it kept; a holder that
// is gone has no responder, and the asker calls at once.
func TestAskThePreviousHolder(t *testing.T) {
	s := natstest.RunServer(t)
	nc, _ := natstest.Connect(t, s)
	cfg := config.Default()
	cfg.LLM.Timeout = 5 * time.Second
	newConsumer := func(owner string) *Consumer {
		h, err := newHeldNotes("", nil, slog.New(slog.DiscardHandler))
		if err != nil {
			t.Fatal(err)
		}
		return &Consumer{cfg: cfg, nc: nc, log: slog.New(slog.DiscardHandler), opts: Options{Owner: owner}, unsaved: h}
	}
	a, b := newConsumer("host-a:1"), newConsumer("host-b:2")
	stop, err := a.serveAnswers()
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	g := &gate{c: b, pipeline: "alerts"}
	ask := func(k dedupe.Key, previous string) ([]byte, time.Duration) {
		tr := &Trigger{key: k, claim: ledger.Claim{Status: ledger.StatusTakenOver, Previous: previous}}
		start := time.Now()
		note := g.askPrevious(context.Background(), tr)
		return note, time.Since(start)
	}

	inflight := dedupe.Key{1}
	f := a.board.start(inflight)
	answer := []byte(`{"version":"v","answers":[{"text":"restart the replica"}]}`)
	time.AfterFunc(300*time.Millisecond, func() { a.board.finish(inflight, f, answer) })
	if note, took := ask(inflight, "host-a:1#ONCEGATE:7"); !bytes.Equal(note, answer) || took < 250*time.Millisecond {
		t.Errorf("asking for a call in flight: %q after %v; want its answer once the call ended (300ms)", note, took)
	}

	refused := dedupe.Key{2}
	a.unsaved.keep(refused, answer, 0)
	if note, _ := ask(refused, "host-a:1#ONCEGATE:8"); !bytes.Equal(note, answer) {
		t.Errorf("asking for an answer the ledger refused: %q; want it", note)
	}

	if note, _ := ask(dedupe.Key{3}, "host-a:1#ONCEGATE:9"); len(note) != 0 {
		t.Errorf("asking for an intent the holder never called for: %q; want none", note)
	}

	if note, took := ask(refused, "host-c:3#ONCEGATE:1"); len(note) != 0 || took > 2*time.Second {
		t.Errorf("asking a holder that is gone: %q after %v; want none, at once (no responders)", note, took)
	}

	// A takeover of this process's own earlier claim does not wait for
	// itself: the board's entry for the intent is the asker's own.
	own := dedupe.Key{4}
	self := &gate{c: a, pipeline: "alerts"}
	tr := &Trigger{key: own, call: a.board.start(own), claim: ledger.Claim{Status: ledger.StatusTakenOver, Previous: "host-a:1#ONCEGATE:2"}}
	start := time.Now()
	if note := self.askPrevious(context.Background(), tr); len(note) != 0 || time.Since(start) > time.Second {
		t.Errorf("asking this process's own earlier claim: %q after %v; want none, at once", note, time.Since(start))
	}
	a.board.finish(own, tr.call, nil)

	// With an encryption key the reply is sealed: the holder's opens, a
	// forged one from another subscriber on the subject does not.
	key := bytes.Repeat([]byte{9}, 32)
	for _, c := range []*Consumer{a, b} {
		h, err := newHeldNotes("", key, c.log)
		if err != nil {
			t.Fatal(err)
		}
		h.keep(refused, answer, 0)
		c.unsaved = h
	}
	if note, _ := ask(refused, "host-a:1#ONCEGATE:8"); !bytes.Equal(note, answer) {
		t.Errorf("asking with the key: %q; want the holder's answer", note)
	}
	forger, err := nc.Subscribe(answersSubject("host-d:4"), func(m *nats.Msg) { m.Respond([]byte(`{"version":"v","answers":[{"text":"wire the money"}]}`)) })
	if err != nil {
		t.Fatal(err)
	}
	defer forger.Unsubscribe()
	if note, _ := ask(refused, "host-d:4#ONCEGATE:1"); len(note) != 0 {
		t.Errorf("a forged answer read as %q; want none", note)
	}
}

// TestAnswersAfterARestart: a process killed with an answer the ledger had
// not taken leaves it in its held directory; the next process on that
// directory answers for it on the subject its predecessor answered on (the
// identity kept in the directory, not the process id), from its start,
// before its ledger opens (ServeHeld), so that a replica which takes the
// intent over from the dead process and asks it gets the answer instead
// of paying for it again. With the key the answer is sealed; an intent it
// holds nothing for is answered empty; once stopped, nobody answers.
func TestAnswersAfterARestart(t *testing.T) {
	s := natstest.RunServer(t)
	nc, _ := natstest.Connect(t, s)
	dir := t.TempDir()
	key := bytes.Repeat([]byte{7}, 32)
	log := slog.New(slog.DiscardHandler)
	owner, err := Owner(dir)
	if err != nil {
		t.Fatal(err)
	}
	_, identity, ok := strings.Cut(owner, "/")
	if again, err := Owner(dir); err != nil || !ok || len(identity) < 8 || again != owner {
		t.Fatalf("Owner = %q, then %q, %v; want host:pid/identity, the same identity each time", owner, again, err)
	}
	// The previous process, another pid on the same directory, held an
	// answer when it was killed.
	previous := "host-a:999/" + identity
	if answersSubject(previous+"#ONCEGATE:4") != answersSubject(owner) {
		t.Fatalf("the subject of %q is %s, of %q %s; want one subject per data directory", previous, answersSubject(previous), owner, answersSubject(owner))
	}
	held, missing := dedupe.Key{5}, dedupe.Key{6}
	answer := []byte(`{"version":"v","answers":[{"text":"fail the replica over"}]}`)
	h, err := newHeldNotes(dir, key, log)
	if err != nil {
		t.Fatal(err)
	}
	h.keep(held, answer, 3)

	stop, err := ServeHeld(nc, dir, key, owner, log)
	if err != nil {
		t.Fatal(err)
	}
	cfg := config.Default()
	cfg.LLM.Timeout = 5 * time.Second
	hb, err := newHeldNotes("", key, log)
	if err != nil {
		t.Fatal(err)
	}
	other := &gate{c: &Consumer{cfg: cfg, nc: nc, log: log, opts: Options{Owner: "host-b:2/other"}, unsaved: hb}, pipeline: "alerts"}
	ask := func(k dedupe.Key) ([]byte, time.Duration) {
		tr := &Trigger{key: k, claim: ledger.Claim{Status: ledger.StatusTakenOver, Previous: previous + "#ONCEGATE:4"}}
		start := time.Now()
		note := other.askPrevious(context.Background(), tr)
		return note, time.Since(start)
	}
	if note, _ := ask(held); !bytes.Equal(note, answer) {
		t.Errorf("asking the dead process for its held answer: %q; want it, from the process after it", note)
	}
	if note, took := ask(missing); len(note) != 0 || took > 2*time.Second {
		t.Errorf("asking for an intent nothing is held for: %q after %v; want none, at once", note, took)
	}
	stop()
	if note, took := ask(held); len(note) != 0 || took > 2*time.Second {
		t.Errorf("asking after the stop: %q after %v; want none, at once (no responders)", note, took)
	}
	// A directory with nothing held answers nothing.
	if stop, err := ServeHeld(nc, t.TempDir(), key, owner, log); err != nil {
		t.Fatal(err)
	} else {
		defer stop()
	}
	if note, took := ask(held); len(note) != 0 || took > 2*time.Second {
		t.Errorf("asking a process with nothing held: %q after %v; want none, at once", note, took)
	}
}

// TestOneProcessOnAHeldDirectory: the identity is the directory's, so one
// process runs on it at a time. Processes that follow each other (a
// restart) get the same identity; a second process while one runs is
// refused with ErrHeldDirInUse, for the two would answer for each other's
// intents on one subject. Each process here is a real one (this test's
// binary run again).
func TestOneProcessOnAHeldDirectory(t *testing.T) {
	if dir := os.Getenv("ONCEGATE_TEST_OWNER_DIR"); dir != "" {
		owner, err := Owner(dir)
		if errors.Is(err, ErrHeldDirInUse) {
			fmt.Println("in use:", err)
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		_, id, _ := strings.Cut(owner, "/")
		fmt.Println("identity:", id)
		return
	}
	dir := t.TempDir()
	run := func() string {
		t.Helper()
		cmd := exec.Command(os.Args[0], "-test.run=^TestOneProcessOnAHeldDirectory$")
		cmd.Env = append(os.Environ(), "ONCEGATE_TEST_OWNER_DIR="+dir)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("the other process: %v\n%s", err, out)
		}
		for _, line := range strings.Split(string(out), "\n") {
			if strings.HasPrefix(line, "identity: ") || strings.HasPrefix(line, "in use: ") {
				return line
			}
		}
		t.Fatalf("the other process said nothing of its identity:\n%s", out)
		return ""
	}
	first, second := run(), run()
	if !strings.HasPrefix(first, "identity: ") || first != second {
		t.Errorf("two processes one after the other: %q, %q; want one identity", first, second)
	}
	owner, err := Owner(dir)
	if err != nil {
		t.Fatal(err)
	}
	if _, id, _ := strings.Cut(owner, "/"); "identity: "+id != first {
		t.Errorf("this process: %q; want the identity the others had (%s)", owner, first)
	}
	if again, err := Owner(dir); err != nil || again != owner {
		t.Errorf("a second consumer in this process: %q, %v; want %q", again, err, owner)
	}
	if got := run(); !strings.HasPrefix(got, "in use: ") || !strings.Contains(got, fmt.Sprintf("pid %d", os.Getpid())) {
		t.Errorf("a process while this one runs on the directory: %q; want it refused, naming this process", got)
	}
}
