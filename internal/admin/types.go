package admin

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/oncegate/oncegate/internal/ledger"
)

// Errors an operation returns for a request it will not carry out. Their
// text is the same whether the operation ran here or in the consumer that
// answered a Client.
var (
	// ErrBadRequest is a request that does not parse or names nothing
	// that exists in the configuration.
	ErrBadRequest = errors.New("admin: bad request")
	// ErrNotFound is a dead letter or record that does not exist.
	ErrNotFound = errors.New("admin: not found")
	// ErrRefused is an operation the state of the work forbids: forgetting
	// committed or held work, say.
	ErrRefused = errors.New("admin: refused")
)

// Error is an operation's refusal, as it crosses the service: Kind is
// ErrBadRequest, ErrNotFound or ErrRefused, Msg says why.
type Error struct {
	Kind error
	Msg  string
}

func (e *Error) Error() string { return e.Msg }

// Unwrap returns the kind, for errors.Is.
func (e *Error) Unwrap() error { return e.Kind }

func errorf(kind error, format string, args ...any) error {
	return &Error{Kind: kind, Msg: fmt.Sprintf(format, args...)}
}

// code is the micro service error code of err's kind.
func code(err error) string {
	switch {
	case errors.Is(err, ErrBadRequest):
		return strconv.Itoa(http.StatusBadRequest)
	case errors.Is(err, ErrNotFound):
		return strconv.Itoa(http.StatusNotFound)
	case errors.Is(err, ErrRefused):
		return strconv.Itoa(http.StatusConflict)
	}
	return strconv.Itoa(http.StatusInternalServerError)
}

// fromCode turns a service error back into the error the operation
// returned.
func fromCode(c, msg string) error {
	switch c {
	case strconv.Itoa(http.StatusBadRequest):
		return &Error{Kind: ErrBadRequest, Msg: msg}
	case strconv.Itoa(http.StatusNotFound):
		return &Error{Kind: ErrNotFound, Msg: msg}
	case strconv.Itoa(http.StatusConflict):
		return &Error{Kind: ErrRefused, Msg: msg}
	}
	return errors.New(msg)
}

// Caller names whoever asked for an operation, as it says.
type Caller struct {
	Name string `json:"name,omitempty"` // the NATS connection's name, or the console's
	User string `json:"user,omitempty"` // the NATS user, the OS user, or the console's client address
}

func (c Caller) String() string {
	switch {
	case c.Name == "" && c.User == "":
		return "unnamed"
	case c.User == "":
		return c.Name
	case c.Name == "":
		return c.User
	}
	return c.User + " (" + c.Name + ")"
}

// Record is a ledger record as the operations show it.
type Record struct {
	Key          string    `json:"key"`
	State        string    `json:"state"`
	Owner        string    `json:"owner,omitempty"`
	Token        uint64    `json:"token"`
	Attempts     uint32    `json:"attempts"`
	Mismatches   uint32    `json:"mismatches,omitempty"`
	LeaseUntil   time.Time `json:"lease_until,omitzero"`
	Created      time.Time `json:"created"`
	Updated      time.Time `json:"updated"`
	Expires      time.Time `json:"expires"`
	Reason       string    `json:"reason,omitempty"`
	Committed    time.Time `json:"committed,omitzero"`
	DownstreamID string    `json:"downstream_id,omitempty"`
	ModelRef     string    `json:"model_ref,omitempty"`
	Response     []byte    `json:"response,omitempty"`
}

func record(r ledger.Record) *Record {
	return &Record{
		Key: r.Key.String(), State: r.State.String(), Owner: r.Owner, Token: r.Token, Attempts: r.Attempts,
		Mismatches: r.Mismatches, LeaseUntil: r.LeaseUntil, Created: r.Created, Updated: r.Updated,
		Expires: r.Expires, Reason: r.Reason, Committed: r.Result.Committed,
		DownstreamID: r.Result.DownstreamID, ModelRef: r.Result.ModelRef, Response: r.Result.Response,
	}
}

// RecordRequest asks for an intent's ledger record: by Key, or by the key
// Pipeline derives from Payload.
type RecordRequest struct {
	Key      string `json:"key,omitempty"`
	Pipeline string `json:"pipeline,omitempty"`
	Payload  []byte `json:"payload,omitempty"`
}

// RecordReply is an intent's ledger record, and for a one-shot pipeline
// the record of its dispatch (whether the effect went out).
type RecordReply struct {
	Pipeline    string  `json:"pipeline,omitempty"`
	Key         string  `json:"key"`
	Fingerprint string  `json:"fingerprint,omitempty"`
	Ledger      bool    `json:"ledger"` // false: the pipeline has no ledger (gate-window)
	Record      *Record `json:"record,omitempty"`
	Dispatch    *Record `json:"dispatch,omitempty"`
}

// PendingRequest asks for the work in progress, up to Limit records (0:
// 1000).
type PendingRequest struct {
	Limit int `json:"limit,omitempty"`
}

// PendingReply lists the records of work in progress, or whose holder
// stopped renewing its lease.
type PendingReply struct {
	Records []Record `json:"records"`
	More    bool     `json:"more,omitempty"`
}

// Selection chooses dead letters. Every field set must match.
type Selection struct {
	// Stream is the dead-letter stream; the default is the one that
	// captures the pipelines' dead-letter subjects, if there is one.
	Stream string `json:"stream,omitempty"`
	// Seqs are the sequences and ranges chosen; none means all.
	Seqs     []Range   `json:"seqs,omitempty"`
	Pipeline string    `json:"pipeline,omitempty"`
	Reason   string    `json:"reason,omitempty"`
	Since    time.Time `json:"since,omitzero"`
	Key      string    `json:"key,omitempty"`
	// After skips the dead letters up to this sequence: the cursor of a
	// listing continued.
	After uint64 `json:"after,omitempty"`
	// Limit bounds how many are chosen (0: DefaultLimit).
	Limit int `json:"limit,omitempty"`
}

// DefaultLimit is how many dead letters a listing or a redrive takes when
// its selection sets no limit.
const DefaultLimit = 100

// MaxLimit is the most dead letters one request takes; a client continues
// past it with Selection.After.
const MaxLimit = 500

// Range is a span of sequences, From to To inclusive; To 0 is no end.
type Range struct {
	From uint64 `json:"from"`
	To   uint64 `json:"to,omitempty"`
}

func (r Range) has(seq uint64) bool { return seq >= r.From && (r.To == 0 || seq <= r.To) }

// ParseRange parses "12", "10-20" or "10-".
func ParseRange(s string) (Range, error) {
	from, to, isRange := strings.Cut(s, "-")
	var r Range
	var err error
	if r.From, err = strconv.ParseUint(from, 10, 64); err != nil || r.From == 0 {
		return Range{}, errorf(ErrBadRequest, "admin: %q is not a sequence or range (12, 10-20, 10-)", s)
	}
	switch {
	case !isRange:
		r.To = r.From
	case to != "":
		if r.To, err = strconv.ParseUint(to, 10, 64); err != nil || r.To < r.From {
			return Range{}, errorf(ErrBadRequest, "admin: %q is not a sequence or range (12, 10-20, 10-)", s)
		}
	}
	return r, nil
}

func (r Range) String() string {
	switch {
	case r.To == r.From:
		return strconv.FormatUint(r.From, 10)
	case r.To == 0:
		return strconv.FormatUint(r.From, 10) + "-"
	}
	return strconv.FormatUint(r.From, 10) + "-" + strconv.FormatUint(r.To, 10)
}

// DeadLetter is a dead letter as the operations show it. Payload and
// Headers are set by Show only.
type DeadLetter struct {
	Stream        string              `json:"stream"`
	Seq           uint64              `json:"seq"`
	Time          time.Time           `json:"time"`
	Pipeline      string              `json:"pipeline"`
	Reason        string              `json:"reason"`
	Detail        string              `json:"detail,omitempty"`
	Key           string              `json:"key,omitempty"`
	Subject       string              `json:"subject"` // the trigger's
	TriggerStream string              `json:"trigger_stream,omitempty"`
	TriggerSeq    uint64              `json:"trigger_seq,omitempty"`
	Deliveries    uint64              `json:"deliveries,omitempty"`
	Truncated     bool                `json:"truncated,omitempty"`
	Size          int                 `json:"size"`
	Redriven      *Mark               `json:"redriven,omitempty"`
	Payload       []byte              `json:"payload,omitempty"`
	Headers       map[string][]string `json:"headers,omitempty"`
}

// Mark records a dead letter's last redrive.
type Mark struct {
	Generation int       `json:"generation"` // 1 for the first redrive, one more per redrive insisted on
	At         time.Time `json:"at"`
	By         string    `json:"by"`
	// Stream and Seq are where the redriven trigger landed.
	Stream string `json:"stream"`
	Seq    uint64 `json:"seq"`
	// Statement is what the caller stated about an unknown outcome
	// ("not-sent").
	Statement string `json:"statement,omitempty"`
	// Ledger is what the redrive did to the intent's record.
	Ledger string `json:"ledger,omitempty"`
}

// DeadReply lists dead letters, in stream order.
type DeadReply struct {
	Letters []DeadLetter `json:"letters"`
	// More says that more dead letters may match past Next, the
	// sequence to continue after.
	More bool   `json:"more,omitempty"`
	Next uint64 `json:"next,omitempty"`
}

// ShowRequest asks for one dead letter, with its payload and headers.
type ShowRequest struct {
	Stream string `json:"stream,omitempty"`
	Seq    uint64 `json:"seq"`
}

// StatementNotSent is the statement that an unknown outcome's effect did
// not happen, which a redrive of such a dead letter requires.
const StatementNotSent = "not-sent"

// RedriveRequest asks for the selected dead letters to be redriven.
type RedriveRequest struct {
	Selection
	// Yes carries the redrive out; without it the reply says what would
	// be done (a dry run).
	Yes bool `json:"yes,omitempty"`
	// Again redrives dead letters already redriven (still fenced: a
	// committed intent is not republished).
	Again bool `json:"again,omitempty"`
	// UnknownOutcome is the caller's statement about dead letters of
	// reason unknown_outcome: StatementNotSent, or empty to refuse them.
	UnknownOutcome string `json:"unknown_outcome,omitempty"`
	By             Caller `json:"by"`
}

// Redrive outcomes.
const (
	OutcomeWouldRedrive    = "would redrive"    // a dry run's: it would be redriven
	OutcomeRedriven        = "redriven"         // republished
	OutcomeAlreadyRedriven = "already redriven" // marked; Again insists
	OutcomeCommitted       = "committed"        // the intent is done: nothing to redrive
	OutcomeInProgress      = "in progress"      // the intent is held: nothing cleared, nothing sent
	OutcomeRefused         = "refused"          // see the detail
)

// RedriveResult is what a redrive did, or would do, with one dead letter.
type RedriveResult struct {
	Stream   string `json:"stream"`
	Seq      uint64 `json:"seq"`
	Pipeline string `json:"pipeline"`
	Reason   string `json:"reason"`
	Key      string `json:"key,omitempty"`
	Outcome  string `json:"outcome"`
	Detail   string `json:"detail,omitempty"`
	// Ledger is what was done, or would be, to the intent's record.
	Ledger string `json:"ledger,omitempty"`
	// Mark is the dead letter's mark after a redrive.
	Mark *Mark `json:"mark,omitempty"`
}

// RedriveReply is what a redrive did with each dead letter selected.
type RedriveReply struct {
	DryRun  bool            `json:"dry_run,omitempty"`
	Results []RedriveResult `json:"results"`
	More    bool            `json:"more,omitempty"`
	Next    uint64          `json:"next,omitempty"`
}

// ForgetRequest asks for a failed record to be cleared.
type ForgetRequest struct {
	Key string `json:"key"`
	// UnknownOutcome is the caller's statement about a record that failed
	// with reason unknown_outcome: StatementNotSent, or empty to refuse
	// it. It is the statement a redrive of such a dead letter needs.
	UnknownOutcome string `json:"unknown_outcome,omitempty"`
	By             Caller `json:"by"`
}

// ForgetReply is the record as Forget left it.
type ForgetReply struct {
	Key     string  `json:"key"`
	Outcome string  `json:"outcome"` // "cleared" or "already cleared"
	Record  *Record `json:"record,omitempty"`
	// Statement is what the caller stated about the unknown outcome of
	// the record it cleared ("not-sent"); the cleared record's reason
	// keeps it too, with who stated it. Empty when the failure was
	// another.
	Statement string `json:"statement,omitempty"`
}

// Hello names the process that answers.
type Hello struct {
	Owner     string   `json:"owner"`
	Stream    string   `json:"stream"`
	Pipelines []string `json:"pipelines"`
	Ledger    string   `json:"ledger"` // the store: badger or kv
	Version   string   `json:"version"`
}
