package admin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/oncegate/oncegate/internal/version"
)

// ServiceName is the micro service's name, as `nats micro ls` lists it.
const ServiceName = "oncegate-admin"

// DefaultSubject is the subject prefix of the service when
// config.Admin.Subject is empty.
const DefaultSubject = "oncegate.admin"

// queueGroup is the endpoints' queue group: a request reaches one of the
// replicas serving a stream, never two. The micro service's own PING,
// INFO and STATS verbs are answered by all of them.
const queueGroup = "oncegate-admin"

// requestTimeout bounds one operation the service carries out.
const requestTimeout = 2 * time.Minute

// The endpoints, below Prefix(subject, stream).
const (
	epHello   = "hello"
	epRecord  = "record"
	epPending = "pending"
	epDead    = "dead"
	epShow    = "show"
	epRedrive = "redrive"
	epForget  = "forget"
	epFind    = "find"
	epPreview = "preview"
	epStart   = "job-start"
	epJob     = "job"
	epJobs    = "jobs"
	epAudit   = "audit"
	epDecide  = "decide"
)

// Prefix returns the subject prefix of the service of the named trigger
// stream: several Oncegate deployments on one NATS (each with a stream of
// its own) each answer for their own.
func Prefix(subject, stream string) string {
	if subject == "" {
		subject = DefaultSubject
	}
	return subject + "." + stream
}

var semver = regexp.MustCompile(`^v?(\d+\.\d+\.\d+(?:-[0-9A-Za-z.-]+)?)`)

// Serve starts serving api's operations on nc under prefix (see Prefix),
// as the micro service ServiceName, until the returned service is stopped.
//
// Any replica may answer any request: each is carried out by one replica
// of the queue group (a lookup is the same from any; a redrive or a forget
// is fenced in the ledger and marked, so a client that retries one on
// another replica after a lost answer changes nothing twice). With a
// Badger ledger there is one process per ledger, and it answers for it.
func Serve(nc *nats.Conn, api API, prefix string, log *slog.Logger) (micro.Service, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	ver := "0.0.0"
	if m := semver.FindStringSubmatch(version.Get().Version); m != nil {
		ver = m[1]
	}
	hello, _ := api.Hello(context.Background())
	svc, err := micro.AddService(nc, micro.Config{
		Name:        ServiceName,
		Version:     ver,
		Description: "Oncegate: ledger records, pending leases, dead letters, redrive (one by one and in bulk), forget, approvals and the audit",
		Metadata:    map[string]string{"stream": hello.Stream, "prefix": prefix, "owner": hello.Owner, "ledger": hello.Ledger},
		QueueGroup:  queueGroup,
		ErrorHandler: func(_ micro.Service, e *micro.NATSError) {
			log.Warn("admin service error", "subject", e.Subject, "err", e.Description)
		},
	})
	if err != nil {
		return nil, fmt.Errorf("admin: starting the service: %w", err)
	}
	g := svc.AddGroup(prefix)
	add := func(name string, h func(ctx context.Context, body []byte) (any, error)) error {
		return g.AddEndpoint(name, micro.HandlerFunc(func(req micro.Request) {
			ctx, cancel := context.WithTimeout(context.Background(), requestTimeout)
			defer cancel()
			v, err := h(ctx, req.Data())
			if err != nil {
				var ae *Error
				if !errors.As(err, &ae) {
					log.Warn("admin request failed", "endpoint", name, "err", err)
				}
				_ = req.Error(code(err), err.Error(), nil)
				return
			}
			b, err := json.Marshal(v)
			if err == nil && int64(len(b)) > nc.MaxPayload() {
				err = fmt.Errorf("admin: the answer is %d bytes, more than the server's max_payload %d: ask for fewer", len(b), nc.MaxPayload())
			}
			if err != nil {
				_ = req.Error(code(err), err.Error(), nil)
				return
			}
			_ = req.Respond(b)
		}))
	}
	for _, ep := range []struct {
		name string
		h    func(ctx context.Context, body []byte) (any, error)
	}{
		{epHello, func(ctx context.Context, _ []byte) (any, error) { return api.Hello(ctx) }},
		{epRecord, handle(api.Record)},
		{epPending, handle(api.Pending)},
		{epDead, handle(api.Dead)},
		{epShow, handle(api.Show)},
		{epRedrive, handle(api.Redrive)},
		{epForget, handle(api.Forget)},
		{epFind, handle(api.Find)},
		{epPreview, handle(api.Preview)},
		{epStart, handle(api.StartJob)},
		{epJob, handle(api.Job)},
		{epJobs, handle(api.Jobs)},
		{epAudit, handle(api.Audit)},
		{epDecide, handle(api.Decide)},
	} {
		if err := add(ep.name, ep.h); err != nil {
			svc.Stop()
			return nil, fmt.Errorf("admin: endpoint %s: %w", ep.name, err)
		}
	}
	// The endpoints answer once the server has their subscriptions: a
	// request sent by another connection right after Serve returns finds
	// them (TestServiceNeedsPermission got "no consumer answers" without).
	if err := nc.Flush(); err != nil {
		svc.Stop()
		return nil, fmt.Errorf("admin: starting the service: %w", err)
	}
	return svc, nil
}

// handle adapts an operation to a JSON request body.
func handle[Req, Rep any](op func(context.Context, Req) (Rep, error)) func(context.Context, []byte) (any, error) {
	return func(ctx context.Context, body []byte) (any, error) {
		var r Req
		if len(body) > 0 {
			if err := json.Unmarshal(body, &r); err != nil {
				return nil, errorf(ErrBadRequest, "admin: the request does not parse: %v", err)
			}
		}
		return op(ctx, r)
	}
}
