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
	// Dispatch is the dispatch record of the pipeline's single one-shot
	// effect, if it has one.
	Dispatch *Record `json:"dispatch,omitempty"`
	// Effects are the dispatch records of the intent's one-shot effects:
	// with a pipeline named, every one-shot effect's (nil Dispatch: not
	// dispatched); without, those that exist, in any pipeline.
	Effects []EffectDispatch `json:"effects,omitempty"`
	// Story is what became of the intent, oldest first: its records as
	// they stand, and the changes the audit recorded.
	Story []Event `json:"story,omitempty"`
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
	Seqs     []Range `json:"seqs,omitempty"`
	Pipeline string  `json:"pipeline,omitempty"`
	// Effect chooses the dead letters of the effect of that name, or of
	// that kind (a preset such as slack or pagerduty, or a sink).
	Effect string    `json:"effect,omitempty"`
	Reason string    `json:"reason,omitempty"`
	Since  time.Time `json:"since,omitzero"`
	// Until chooses the dead letters kept before this time.
	Until time.Time `json:"until,omitzero"`
	Key   string    `json:"key,omitempty"`
	// Status chooses by the receiver's HTTP status: "500", or a class,
	// "5xx".
	Status string `json:"status,omitempty"`
	// Text chooses the dead letters whose detail, receiver's answer,
	// key, subject or effect holds it, case blind.
	Text string `json:"text,omitempty"`
	// Unhandled leaves out the dead letters already redriven or whose
	// record was forgotten since (DeadLetter.Handled).
	Unhandled bool `json:"unhandled,omitempty"`
	// After skips the dead letters up to this sequence: the cursor of a
	// listing continued.
	After uint64 `json:"after,omitempty"`
	// UpTo, if set, leaves out the dead letters past this sequence: a bulk
	// redrive takes the ones its preview saw, not those kept since.
	UpTo uint64 `json:"up_to,omitempty"`
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
	Stream   string    `json:"stream"`
	Seq      uint64    `json:"seq"`
	Time     time.Time `json:"time"`
	Pipeline string    `json:"pipeline"`
	Reason   string    `json:"reason"`
	Detail   string    `json:"detail,omitempty"`
	// Key is the intent's key, the one every operation takes (Record,
	// Forget, a redrive's selection) whatever the letter is: a trigger,
	// or the outbox entry of a one-shot effect.
	Key string `json:"key,omitempty"`
	// Effect names the effect that failed ("" for the pipeline's single
	// effect, or for a failure before any effect), and Sink its kind: its
	// preset (slack, pagerduty, jira, webhook) or its sink (http,
	// jetstream, file); empty when the failure was not an effect's.
	Effect string `json:"effect,omitempty"`
	Sink   string `json:"sink,omitempty"`
	// OneShot says the letter is the outbox entry of a one-shot effect,
	// dead-lettered by its dispatcher, and EffectKey is the key it is sent
	// under (its Idempotency-Key): the intent's for the pipeline's single
	// effect, derived from it and the effect's name for a named one.
	OneShot   bool   `json:"one_shot,omitempty"`
	EffectKey string `json:"effect_key,omitempty"`
	// Status is the HTTP status of the receiver's refusal (0 if the detail
	// quotes none), and Answer the start of its message, with the secrets
	// the sink knows replaced by REDACTED.
	Status int    `json:"status,omitempty"`
	Answer string `json:"answer,omitempty"`
	// Attempts is the tries made: the trigger's deliveries, else the
	// sink's attempt the detail names (SinkAttempt).
	Attempts    int    `json:"attempts,omitempty"`
	SinkAttempt int    `json:"sink_attempt,omitempty"`
	Subject     string `json:"subject"` // the trigger's
	// Next says what a person does next about it.
	Next          string `json:"next,omitempty"`
	TriggerStream string `json:"trigger_stream,omitempty"`
	TriggerSeq    uint64 `json:"trigger_seq,omitempty"`
	Deliveries    uint64 `json:"deliveries,omitempty"`
	Truncated     bool   `json:"truncated,omitempty"`
	Size          int    `json:"size"`
	Redriven      *Mark  `json:"redriven,omitempty"`
	// Handled is HandledRedriven or HandledForgotten once nothing is left
	// to do about the letter (a console hides those by default), else "".
	Handled string              `json:"handled,omitempty"`
	Payload []byte              `json:"payload,omitempty"`
	Headers map[string][]string `json:"headers,omitempty"`
}

// What became of a dead letter (DeadLetter.Handled).
const (
	HandledRedriven  = "redriven"  // it was redriven
	HandledForgotten = "forgotten" // its intent's failed record was forgotten after it was dead-lettered
)

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
	// Job names the bulk redrive that made it, if one did.
	Job string `json:"job,omitempty"`
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
	// Effect and Sink name the effect the redrive fires, or would: the
	// letter's (DeadLetter.Effect, DeadLetter.Sink).
	Effect  string `json:"effect,omitempty"`
	Sink    string `json:"sink,omitempty"`
	Outcome string `json:"outcome"`
	Detail  string `json:"detail,omitempty"`
	// Ledger is what was done, or would be, to the intent's record.
	Ledger string `json:"ledger,omitempty"`
	// Mark is the dead letter's mark after a redrive.
	Mark *Mark `json:"mark,omitempty"`
	// Model is what the redriven trigger's model step costs, in a
	// preview: ModelCached, ModelPaid (about Tokens, and Cost in US
	// dollars), ModelUnknown; empty if it has none.
	Model  string  `json:"model,omitempty"`
	Tokens int64   `json:"tokens,omitempty"`
	Cost   float64 `json:"cost,omitempty"`
}

// RedriveReply is what a redrive did with each dead letter selected.
type RedriveReply struct {
	DryRun  bool            `json:"dry_run,omitempty"`
	Results []RedriveResult `json:"results"`
	More    bool            `json:"more,omitempty"`
	Next    uint64          `json:"next,omitempty"`
}

// ForgetRequest asks for a failed record of an intent to be cleared.
type ForgetRequest struct {
	// Key is the intent's key, as a dead letter names it.
	Key string `json:"key"`
	// Effect, if set, names the one-shot effect whose failed dispatch to
	// clear; by default, the one record of the intent that failed: its
	// own, or one of its effects' dispatch.
	Effect string `json:"effect,omitempty"`
	// UnknownOutcome is the caller's statement about a record that failed
	// with reason unknown_outcome: StatementNotSent, or empty to refuse
	// it. It is the statement a redrive of such a dead letter needs.
	UnknownOutcome string `json:"unknown_outcome,omitempty"`
	By             Caller `json:"by"`
}

// ForgetReply is the record as Forget left it.
type ForgetReply struct {
	Key     string `json:"key"`
	Outcome string `json:"outcome"` // "cleared" or "already cleared"
	// Dispatch says the record cleared is the dispatch of one-shot effect
	// Effect ("" for the pipeline's single one) of the intent, not its own:
	// a redrive of the effect's dead letter sends it.
	Dispatch bool    `json:"dispatch,omitempty"`
	Effect   string  `json:"effect,omitempty"`
	Record   *Record `json:"record,omitempty"`
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
