package admin

import (
	"context"
	"strings"
	"time"

	"github.com/oncegate/oncegate/internal/config"
	"github.com/oncegate/oncegate/internal/consumer"
	"github.com/oncegate/oncegate/pkg/dedupe"
)

// DecideRequest approves or cancels a one-shot effect waiting in a
// pipeline's outbox.
type DecideRequest struct {
	Pipeline string `json:"pipeline"`
	Key      string `json:"key"`
	// Action is AuditApprove or AuditCancel.
	Action string `json:"action"`
	By     Caller `json:"by"`
}

// DecideReply is the dispatcher's answer.
type DecideReply struct {
	Key    string `json:"key"`
	Answer string `json:"answer"`
}

// Decide implements [API]: it sends the approval or the cancellation to
// the dispatcher's own subject (consumer.CancelSubject, the effect's
// approval subject), whose answer says what happened, and records it in
// the audit with who asked.
func (a *Admin) Decide(ctx context.Context, r DecideRequest) (DecideReply, error) {
	p, err := a.pipeline(r.Pipeline)
	if err != nil {
		return DecideReply{}, err
	}
	if r.Pipeline == "" || p.Effect.Class != config.ClassOneShot {
		return DecideReply{}, errorf(ErrBadRequest, "admin: pipeline %q has no one-shot effect to approve or cancel", r.Pipeline)
	}
	k, err := dedupe.ParseKey(strings.TrimSpace(r.Key))
	if err != nil {
		return DecideReply{}, errorf(ErrBadRequest, "admin: %v", err)
	}
	var subject string
	switch {
	case r.Action == AuditCancel:
		subject = consumer.CancelSubject(p.Name)
	case r.Action == AuditApprove && p.Effect.ApprovalSubject != "":
		subject = p.Effect.ApprovalSubject
	default:
		return DecideReply{}, errorf(ErrBadRequest, "admin: no action %q for pipeline %s (approve needs an approval subject; cancel)", r.Action, p.Name)
	}
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	reply := DecideReply{Key: k.String()}
	m, err := a.opts.Conn.RequestWithContext(rctx, subject, []byte(k.String()))
	if err != nil {
		reply.Answer = err.Error()
	} else {
		reply.Answer = string(m.Data)
	}
	a.log.Warn(r.Action, "pipeline", p.Name, "key", k.String(), "by", r.By.String(), "result", reply.Answer)
	_ = a.record(ctx, AuditEntry{Action: r.Action, By: r.By.String(), Key: k.String(), Pipeline: p.Name, Outcome: clipBytes(reply.Answer, 200)})
	return reply, err
}
