package ops_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/oncegate/oncegate/internal/app"
	"github.com/oncegate/oncegate/internal/config"
	"github.com/oncegate/oncegate/internal/logbuf"
	"github.com/oncegate/oncegate/internal/receiver"
)

const outcomesConfig = `
data_dir: %s
metrics: {listen: ""}
nats: {embedded: {listen: "127.0.0.1:0"}}
log: {outcomes: %v}
pipelines:
  - name: orders
    subject: triggers.orders
    key: {fields: [/order]}
    effects:
      notify: {preset: slack, url: "%s", text: "order {{.trigger.order}}"}
    routes:
      - {name: all, effects: [notify]}
`

// TestOutcomeLines: with log.outcomes, each trigger's outcome is an INFO
// line with its pipeline, key, route, effect and result, and so is each
// one-shot effect's dispatch; a duplicate's says it had no effect. Without
// it, there is none.
func TestOutcomeLines(t *testing.T) {
	for _, on := range []bool{true, false} {
		t.Run(fmt.Sprint(on), func(t *testing.T) {
			slack := receiver.NewSlack("/s")
			hs := httptest.NewServer(slack)
			defer hs.Close()
			cfg, err := config.Parse(fmt.Appendf(nil, outcomesConfig, filepath.Join(t.TempDir(), "data"), on, hs.URL+"/s"), "test")
			if err != nil {
				t.Fatal(err)
			}
			var logs logbuf.Buffer
			ctx := context.Background()
			a, err := app.Start(ctx, cfg, app.Options{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
			if err != nil {
				t.Fatal(err)
			}
			defer a.Close()
			rctx, cancel := context.WithCancel(ctx)
			done := make(chan error, 1)
			go func() { done <- a.Run(rctx) }()
			defer func() { cancel(); <-done }()
			wctx, wcancel := context.WithTimeout(ctx, 15*time.Second)
			defer wcancel()
			if err := a.WaitReady(wctx); err != nil {
				t.Fatal(err)
			}
			nc, err := nats.Connect(a.Embedded.ClientURL())
			if err != nil {
				t.Fatal(err)
			}
			defer nc.Close()
			js, _ := jetstream.New(nc)
			for range 2 {
				if _, err := js.Publish(ctx, "triggers.orders", []byte(`{"order":"O-1"}`)); err != nil {
					t.Fatal(err)
				}
			}
			deadline := time.Now().Add(30 * time.Second)
			for {
				n, err := a.Outstanding(ctx)
				if err == nil && n == 0 && len(slack.Messages()) == 1 {
					break
				}
				if time.Now().After(deadline) {
					t.Fatal("the triggers did not settle")
				}
				time.Sleep(10 * time.Millisecond)
			}
			a.Close() // flushes nothing, but stops the work: the lines are written
			var lines []string
			for _, l := range strings.Split(logs.String(), "\n") {
				if strings.Contains(l, "msg=outcome") {
					lines = append(lines, l)
				}
			}
			if !on {
				if len(lines) != 0 {
					t.Errorf("log.outcomes off, and outcome lines:\n%s", strings.Join(lines, "\n"))
				}
				return
			}
			const key = "85b35d1a39bbf913751799bd07e50826" // the intent's, as consumer key derives it
			all := strings.Join(lines, "\n")
			for _, w := range []string{
				"pipeline=orders key=" + key + " route=all effect=notify result=done",
				"pipeline=orders key=" + key + ` route="" effect="" result="no effect"`,
				"pipeline=orders key=" + key + ` route="" effect="notify (dispatch)" result=done`,
			} {
				if !strings.Contains(all, "level=INFO msg=outcome component=consumer "+w) {
					t.Errorf("no line %q in:\n%s", w, all)
				}
			}
		})
	}
}
