package admin

import (
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/nats-io/nats.go"

	"github.com/oncegate/oncegate/internal/config"
	"github.com/oncegate/oncegate/internal/consumer"
	"github.com/oncegate/oncegate/internal/outcome"
)

// letter reads a dead letter's headers: what the consumer wrote on it, and
// what a person needs first, drawn from that and the configuration (the
// effect that failed and its sink, the receiver's status and message, the
// attempts).
//
// The key it names is the intent's, whatever the letter is: a trigger's
// dead letter carries it in Oncegate-Key, and an outbox entry's (a one-shot
// effect whose dispatch failed) in Oncegate-Intent when the effect is a
// named one, whose entry is keyed by consumer.EffectKey of the intent
// (EffectKey). An outbox entry published before Oncegate-Intent existed
// names only its effect's key, which then stands as the key too.
func (a *Admin) letter(stream string, seq uint64, at time.Time, subject string, h nats.Header, size int) DeadLetter {
	d := DeadLetter{
		Stream: stream, Seq: seq, Time: at.UTC(), Size: size,
		Pipeline: h.Get(consumer.HeaderPipeline), Reason: h.Get(consumer.HeaderReason),
		Detail: h.Get(consumer.HeaderDetail), Key: h.Get(consumer.HeaderKey),
		Subject: h.Get(consumer.HeaderSubject), TriggerStream: h.Get(consumer.HeaderStream),
		Truncated: h.Get(consumer.HeaderTruncated) == "true",
	}
	d.TriggerSeq, _ = strconv.ParseUint(h.Get(consumer.HeaderStreamSeq), 10, 64)
	d.Deliveries, _ = strconv.ParseUint(h.Get(consumer.HeaderDeliveries), 10, 64)
	if d.Subject == "" {
		d.Subject = subject
	}
	p := a.pipes[d.Pipeline]
	if p != nil && isOutbox(d.Subject, p.Name) {
		d.OneShot, d.EffectKey = true, d.Key
		d.Effect = h.Get(consumer.HeaderEffect)
		if in := h.Get(consumer.HeaderIntent); in != "" {
			d.Key = in
		}
	}
	d.Status, d.Answer, d.SinkAttempt = parseDetail(d.Detail)
	if p != nil {
		d.Effect, d.Sink = effectOf(p, a.effects[p.Name], d.Effect, d.OneShot, d.Detail)
	}
	d.Attempts = int(d.Deliveries)
	if d.Attempts == 0 {
		d.Attempts = d.SinkAttempt
	}
	return d
}

// isOutbox reports whether subject is pipeline's outbox (or a parked copy
// of one of its entries, waiting for an approval): its dead letters are
// one-shot effects whose dispatch failed.
func isOutbox(subject, pipeline string) bool {
	o := consumer.OutboxSubject(pipeline)
	return subject == o || strings.HasPrefix(subject, o+".")
}

// effectOf names the effect a dead letter of p is about, and its kind (a
// preset, else a sink): an outbox entry's (named by Oncegate-Effect, or
// the pipeline's single effect), else the one the detail names ("effect
// NAME: ..."), else the pipeline's single effect when the detail is a
// sink's error. It returns "", "" for a failure before any effect.
func effectOf(p *config.Pipeline, effects []config.NamedEffect, named string, oneShot bool, detail string) (name, kind string) {
	find := func(name string) (string, string, bool) {
		for _, e := range effects {
			if e.Name == name {
				return e.Name, effectKind(e.Effect), true
			}
		}
		return "", "", false
	}
	if oneShot {
		if n, k, ok := find(named); ok {
			return n, k
		}
		return named, ""
	}
	if rest, ok := strings.CutPrefix(detail, "effect "); ok {
		if n, _, ok := strings.Cut(rest, ": "); ok {
			if n, k, ok := find(n); ok {
				return n, k
			}
		}
	}
	if len(p.Effects) == 0 && (strings.HasPrefix(detail, "sink: ") || strings.Contains(detail, ": sink: ")) {
		n, k, _ := find("")
		return n, k
	}
	return "", ""
}

// effectKind is what an effect is, as the metrics name it: its preset
// (slack, pagerduty), else its sink (http, jetstream, file).
func effectKind(e *config.Effect) string {
	if e.Preset != "" {
		return e.Preset
	}
	return e.Sink
}

// parseDetail finds, in a dead letter's detail, the answer of the HTTP
// receiver that refused the effect, as package sink quotes it: `<METHOD>
// "<target>": <status> <text>[: <the start of its body>]`, after "attempt
// N of M: ". It returns the status (0 if the detail quotes none), the
// receiver's message (the body's start, with the secrets the sink knows
// already replaced by REDACTED, else the status text) and N (0 if
// absent). The message is a part of detail, at most maxAnswer bytes.
func parseDetail(detail string) (status int, answer string, attempt int) {
	if i := strings.Index(detail, "attempt "); i >= 0 {
		rest := detail[i+len("attempt "):]
		j := 0
		for j < len(rest) && j < 6 && rest[j] >= '0' && rest[j] <= '9' {
			j++
		}
		if j > 0 && strings.HasPrefix(rest[j:], " of ") {
			attempt, _ = strconv.Atoi(rest[:j])
		}
	}
	for from := 0; from < len(detail); {
		i := strings.Index(detail[from:], `": `)
		if i < 0 {
			break
		}
		at := from + i + len(`": `)
		from = at
		if at+3 > len(detail) || !threeDigits(detail[at:at+3]) || at+3 < len(detail) && detail[at+3] != ' ' && detail[at+3] != ';' {
			continue
		}
		status, _ = strconv.Atoi(detail[at : at+3])
		if status < 100 || status > 599 {
			status = 0
			continue
		}
		rest := detail[at+3:]
		if k := strings.Index(rest, "; "); k >= 0 && !strings.Contains(rest[:k], ": ") {
			rest = rest[:k] // "503 Service Unavailable; not retried: ..."
		}
		if k := strings.Index(rest, ": "); k >= 0 {
			answer = rest[k+2:]
		} else {
			answer = strings.TrimSpace(rest)
		}
		return status, clipBytes(answer, maxAnswer), attempt
	}
	return 0, "", attempt
}

// maxAnswer bounds the receiver's message a dead letter shows.
const maxAnswer = 300

func threeDigits(s string) bool {
	return len(s) == 3 && s[0] >= '1' && s[0] <= '5' && s[1] >= '0' && s[1] <= '9' && s[2] >= '0' && s[2] <= '9'
}

// clipBytes cuts s to at most n bytes, on a rune boundary.
func clipBytes(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// next says what a person does about d next, given what became of it
// (d.Redriven, d.Handled).
func next(d *DeadLetter) string {
	switch {
	case d.Redriven != nil:
		return fmt.Sprintf("nothing: redriven %s by %s", d.Redriven.At.UTC().Format(time.RFC3339), d.Redriven.By)
	case d.Handled == HandledForgotten:
		return "nothing here: its record was forgotten, so the intent's next trigger runs anew; redrive it to run it now"
	case d.Truncated:
		return "republish the trigger from its source: the dead letter kept only the start of its payload"
	}
	switch outcome.Reason(d.Reason) {
	case outcome.ReasonPermanentEffect:
		if d.Status != 0 {
			return fmt.Sprintf("the receiver refused it (%d): fix the effect or the receiver, then redrive", d.Status)
		}
		return "the receiver refused it: fix the effect or the receiver, then redrive"
	case outcome.ReasonUnknownOutcome:
		return fmt.Sprintf("check at the receiver whether the effect happened; redrive with the statement %s only if it did not", StatementNotSent)
	case outcome.ReasonExhausted:
		if d.Status != 0 {
			return fmt.Sprintf("the receiver kept failing (%d): once it answers again, redrive", d.Status)
		}
		return "once the cause of the failures is fixed (the model, the receiver, a crash), redrive"
	case outcome.ReasonNotApproved:
		return "no one approved it in time: redrive it to ask again, or leave it"
	case outcome.ReasonTemplate, outcome.ReasonCondition, outcome.ReasonRoute:
		return "fix the pipeline's configuration for this trigger, then redrive"
	case outcome.ReasonBudget, outcome.ReasonOverBudget:
		return "raise the budget or wait for its period to pass, then redrive"
	case outcome.ReasonMismatch:
		return "the key was reused with another payload: check the publisher; forget the record to accept the new payload"
	case outcome.ReasonBadAnswer:
		return "the model's answers did not fit the schema: fix the prompt or the schema, then redrive"
	case outcome.ReasonPanic:
		return "the work panicked: see the consumer's log, fix, then redrive"
	case outcome.ReasonInvalidJSON, outcome.ReasonTooLarge, outcome.ReasonMissingField, outcome.ReasonPoison:
		return "the trigger cannot be processed as it is: fix its publisher; redriving it fails again"
	}
	return "see the detail"
}

// settle sets what became of d (Handled) and what to do next.
func (a *Admin) settle(d *DeadLetter) {
	switch {
	case d.Redriven != nil:
		d.Handled = HandledRedriven
	case a.forgottenSince(d.Key, d.Time):
		d.Handled = HandledForgotten
	}
	d.Next = next(d)
}
