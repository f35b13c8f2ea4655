package console

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/oncegate/oncegate/internal/admin"
	"github.com/oncegate/oncegate/internal/config"
	"github.com/oncegate/oncegate/internal/consumer"
	"github.com/oncegate/oncegate/pkg/dedupe"
)

// outboxEntry is a one-shot effect waiting in a pipeline's outbox: for its
// delay window to pass, or for an approval.
type outboxEntry struct {
	Pipeline  string
	Seq       uint64
	Time      time.Time
	Key       string
	Approval  bool // the pipeline waits for approvals
	SendAfter time.Time
	Size      int
	// Settled says what became of an entry the dispatcher has not taken
	// off the outbox yet: its dispatch was sent or cancelled.
	Settled string
}

// maxOutbox bounds the entries the page lists.
const maxOutbox = 200

// outbox lists the entries waiting in the one-shot pipelines' outboxes.
func (s *Server) outbox(ctx context.Context) ([]outboxEntry, error) {
	if s.opts.Conn == nil {
		return nil, nil
	}
	js, err := jetstream.New(s.opts.Conn)
	if err != nil {
		return nil, err
	}
	var out []outboxEntry
	for i := range s.opts.Config.Pipelines {
		p := &s.opts.Config.Pipelines[i]
		if p.Effect.Class != config.ClassOneShot {
			continue
		}
		st, err := js.Stream(ctx, consumer.OutboxStream(s.opts.Config.Stream.Name))
		if errors.Is(err, jetstream.ErrStreamNotFound) {
			return nil, nil
		}
		if err != nil {
			return nil, err
		}
		// What the outbox holds is what waits: entries in their delay
		// window, and the copies parked while they wait for an approval.
		for _, subj := range []string{consumer.OutboxSubject(p.Name), consumer.OutboxSubject(p.Name) + ".parked.>"} {
			for seq := uint64(1); len(out) < maxOutbox; seq++ {
				m, err := st.GetMsg(ctx, seq, jetstream.WithGetMsgSubject(subj))
				if errors.Is(err, jetstream.ErrMsgNotFound) {
					break
				}
				if err != nil {
					return out, fmt.Errorf("console: reading the outbox of %s: %w", p.Name, err)
				}
				key := m.Header.Get(consumer.HeaderKey)
				if key == "" {
					key = m.Header.Get("Nats-Msg-Id")
				}
				e := outboxEntry{
					Pipeline: p.Name, Seq: m.Sequence, Time: m.Time, Key: key,
					Approval: p.Effect.ApprovalSubject != "", SendAfter: m.Time.Add(p.Effect.Delay), Size: len(m.Data),
				}
				if rec, err := s.opts.API.Record(ctx, admin.RecordRequest{Key: key, Pipeline: p.Name}); err == nil && rec.Dispatch != nil {
					switch d := rec.Dispatch; d.State {
					case "committed":
						e.Settled = "sent"
					case "failed":
						e.Settled = d.Reason
					}
				}
				out = append(out, e)
				seq = m.Sequence
			}
		}
	}
	return out, nil
}

// outboxDecide approves or cancels a one-shot effect, through the admin
// operations (the dispatcher's own subjects; its answer says what
// happened), which record it in the audit.
func (s *Server) outboxDecide(w http.ResponseWriter, r *http.Request, by admin.Caller) {
	action := r.PathValue("action")
	name, key := r.PostFormValue("pipeline"), strings.TrimSpace(r.PostFormValue("key"))
	p := oneShot(s.opts.Config, name)
	switch {
	case p == nil:
		http.Error(w, "console: no one-shot pipeline "+name, http.StatusBadRequest)
		return
	case action != admin.AuditApprove && action != admin.AuditCancel:
		http.Error(w, "console: no action "+action+" for pipeline "+name, http.StatusBadRequest)
		return
	}
	if _, err := dedupe.ParseKey(key); err != nil {
		http.Error(w, "console: "+err.Error(), http.StatusBadRequest)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 15*time.Second)
	defer cancel()
	msg := action + " " + key + ": "
	rep, err := s.opts.API.Decide(ctx, admin.DecideRequest{Pipeline: p.Name, Key: key, Action: action, By: by})
	switch {
	case err != nil && rep.Answer == "":
		msg += err.Error()
	default:
		msg += rep.Answer
	}
	s.opts.Logger.Warn("console "+action, "pipeline", name, "key", key, "by", by.String(), "result", msg)
	http.Redirect(w, r, "/pending?msg="+url.QueryEscape(msg), http.StatusSeeOther)
}
