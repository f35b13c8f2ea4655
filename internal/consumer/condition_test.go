package consumer_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/oncegate/oncegate/internal/config"
	"github.com/oncegate/oncegate/internal/consumer"
	"github.com/oncegate/oncegate/internal/outcome"
	"github.com/oncegate/oncegate/internal/standin"
)

// silencedAlert is a trigger of the alerts pipeline whose when: below
// costs 16 million element comparisons: 200 alerts, each with 400 labels,
// none of them in the 200 silenced lists of 400, which all differ from
// them in their last element only.
func silencedAlert(t *testing.T) []byte {
	t.Helper()
	row := func(last int) []int {
		r := make([]int, 400)
		r[len(r)-1] = last
		return r
	}
	alerts, silenced := make([]any, 200), make([]any, 200)
	for i := range alerts {
		alerts[i] = map[string]any{"labels": row(9)}
		silenced[i] = row(1)
	}
	var trig map[string]any
	if err := json.Unmarshal(alert("bomb", 1, 0), &trig); err != nil {
		t.Fatal(err)
	}
	trig["alerts"], trig["silenced"] = alerts, silenced
	b, err := json.Marshal(trig)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestConditionOverItsLimitIsDeadLettered: a trigger on which the
// pipeline's when: passes its cost limit is dead-lettered with reason
// condition, at once: termed, not retried, not redelivered; the same
// trigger sent again is dead-lettered again the same way, and the
// pipeline goes on with the next trigger. Before, the evaluation ran for
// seconds (a larger trigger, minutes) and the trigger went through.
func TestConditionOverItsLimitIsDeadLettered(t *testing.T) {
	f := start(t, func(c *config.Config) {
		c.Pipelines[0].When = `!has(trigger.silenced) || !trigger.alerts.exists(a, a.labels in trigger.silenced)`
	}, standin.Options{})
	bomb := silencedAlert(t)
	f.publish("triggers.alerts", bomb)
	waitFor(t, 30*time.Second, "the dead letter", func() bool { return f.stats("alerts").DeadLetters == 1 }, f)
	f.publish("triggers.alerts", bomb) // the sender's retry
	waitFor(t, 30*time.Second, "the second dead letter", func() bool { return f.stats("alerts").DeadLetters == 2 }, f)
	f.publish("triggers.alerts", alert("good", 1, 0))
	waitFor(t, 30*time.Second, "the good trigger's effect", func() bool { return f.stats("alerts").Effects == 1 }, f)
	waitFor(t, 10*time.Second, "every trigger settled", func() bool { return f.allAcked("alerts") }, f)

	for _, m := range f.streamMsgs("ONCEGATE_DEAD", "oncegate.dead.alerts") {
		reason, detail := m.Headers().Get(consumer.HeaderReason), m.Headers().Get(consumer.HeaderDetail)
		if reason != string(outcome.ReasonCondition) || !strings.Contains(detail, "cost limit") {
			t.Errorf("dead letter reason %q (%s); want condition, the cost limit", reason, detail)
		}
	}
	if s := f.stats("alerts"); s.DeadLetters != 2 || s.Retries != 0 || s.Effects != 1 {
		t.Errorf("stats %+v; want 2 dead letters, no retry, 1 effect", s)
	}
	cons, err := f.js.Consumer(context.Background(), "ONCEGATE", consumer.Durable("alerts"))
	if err != nil {
		t.Fatal(err)
	}
	ci, err := cons.Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if ci.NumRedelivered != 0 {
		t.Errorf("%d messages redelivered; want none", ci.NumRedelivered)
	}
}
