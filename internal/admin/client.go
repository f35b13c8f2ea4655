package admin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
)

// ErrNoService is returned by a Client's calls when no consumer serves the
// operations on its prefix.
var ErrNoService = errors.New("admin: no consumer answers")

// Client calls the operations of the consumer that serves them on NATS.
// It is safe for concurrent use.
type Client struct {
	nc     *nats.Conn
	prefix string
}

var _ API = (*Client)(nil)

// NewClient returns a client of the service at prefix (see Prefix) on nc.
func NewClient(nc *nats.Conn, prefix string) *Client { return &Client{nc: nc, prefix: prefix} }

// DefaultTimeout bounds a call whose context has no deadline.
const DefaultTimeout = 2 * time.Minute

func call[Rep any](ctx context.Context, c *Client, ep string, req any) (Rep, error) {
	var rep Rep
	body, err := json.Marshal(req)
	if err != nil {
		return rep, err
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, DefaultTimeout)
		defer cancel()
	}
	m, err := c.nc.RequestWithContext(ctx, c.prefix+"."+ep, body)
	if errors.Is(err, nats.ErrNoResponders) {
		return rep, fmt.Errorf("%w on %s.>", ErrNoService, c.prefix)
	}
	if err != nil {
		// A publish the server's permissions deny gets no answer; the
		// server says why on the connection.
		if last := c.nc.LastError(); last != nil && strings.Contains(strings.ToLower(last.Error()), "permissions violation") {
			return rep, fmt.Errorf("admin: %s: %w (%w)", ep, err, last)
		}
		return rep, fmt.Errorf("admin: %s: %w", ep, err)
	}
	if code := m.Header.Get(micro.ErrorCodeHeader); code != "" {
		return rep, fromCode(code, m.Header.Get(micro.ErrorHeader))
	}
	if err := json.Unmarshal(m.Data, &rep); err != nil {
		return rep, fmt.Errorf("admin: %s: the answer does not parse: %w", ep, err)
	}
	return rep, nil
}

// Hello implements [API]; it returns an error wrapping ErrNoService if no
// consumer serves the prefix.
func (c *Client) Hello(ctx context.Context) (Hello, error) {
	return call[Hello](ctx, c, epHello, struct{}{})
}

// Record implements [API].
func (c *Client) Record(ctx context.Context, r RecordRequest) (RecordReply, error) {
	return call[RecordReply](ctx, c, epRecord, r)
}

// Pending implements [API].
func (c *Client) Pending(ctx context.Context, r PendingRequest) (PendingReply, error) {
	return call[PendingReply](ctx, c, epPending, r)
}

// Dead implements [API].
func (c *Client) Dead(ctx context.Context, s Selection) (DeadReply, error) {
	return call[DeadReply](ctx, c, epDead, s)
}

// Show implements [API].
func (c *Client) Show(ctx context.Context, r ShowRequest) (DeadLetter, error) {
	return call[DeadLetter](ctx, c, epShow, r)
}

// Redrive implements [API].
func (c *Client) Redrive(ctx context.Context, r RedriveRequest) (RedriveReply, error) {
	return call[RedriveReply](ctx, c, epRedrive, r)
}

// Forget implements [API].
func (c *Client) Forget(ctx context.Context, r ForgetRequest) (ForgetReply, error) {
	return call[ForgetReply](ctx, c, epForget, r)
}

// Find implements [API].
func (c *Client) Find(ctx context.Context, r FindRequest) (FindReply, error) {
	return call[FindReply](ctx, c, epFind, r)
}

// Preview implements [API].
func (c *Client) Preview(ctx context.Context, r PreviewRequest) (PreviewReply, error) {
	return call[PreviewReply](ctx, c, epPreview, r)
}

// StartJob implements [API]. The job runs in the consumer that answered.
func (c *Client) StartJob(ctx context.Context, r JobRequest) (Job, error) {
	return call[Job](ctx, c, epStart, r)
}

// Job implements [API].
func (c *Client) Job(ctx context.Context, r JobRequest) (Job, error) {
	return call[Job](ctx, c, epJob, r)
}

// Jobs implements [API].
func (c *Client) Jobs(ctx context.Context, r JobsRequest) (JobsReply, error) {
	return call[JobsReply](ctx, c, epJobs, r)
}

// Audit implements [API].
func (c *Client) Audit(ctx context.Context, r AuditRequest) (AuditReply, error) {
	return call[AuditReply](ctx, c, epAudit, r)
}

// Decide implements [API].
func (c *Client) Decide(ctx context.Context, r DecideRequest) (DecideReply, error) {
	return call[DecideReply](ctx, c, epDecide, r)
}
