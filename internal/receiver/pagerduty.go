package receiver

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"slices"
	"sync"
	"time"
	"unicode/utf8"
)

// PagerDuty is the PagerDuty Events API v2 (POST /v2/enqueue). It checks
// an alert event as PagerDuty documents it — routing_key (32 characters,
// and the receiver's), event_action (trigger, acknowledge or resolve),
// dedup_key (at most 255 characters; required to acknowledge or resolve),
// and for a trigger a payload with summary (1 to 1024 characters), source
// (not empty) and severity (critical, error, warning or info), optional
// custom_details (an object), links (objects with href) and images
// (objects with src); a body of at most 512 KB — and answers as PagerDuty
// does: 202 {"status":"success","message":"Event processed","dedup_key"};
// 400 {"status":"invalid event","message":"Event object is invalid",
// "errors":[...]}; 429 with Retry-After when told to (Fail) or past its
// quota (Limit: PagerDuty takes about 120 events a minute per routing
// key); 500 during an outage (FailFor).
//
// It keeps PagerDuty's alert state by dedup_key: a trigger opens an alert
// or adds to the open one; a resolve closes the open alert, and one for a
// dedup_key with no open alert is dropped (accepted and counted, as
// PagerDuty drops it). A trigger accepted for a dedup_key after a resolve
// of it is counted apart (PagerDutyStats.AfterResolve): it re-opens an
// incident its alert had closed.
type PagerDuty struct {
	// RoutingKey is the integration key events must carry.
	RoutingKey string

	faults
	mu       sync.Mutex
	events   []PagerDutyEvent
	open     map[string]int // dedup_key → triggers since it opened
	opened   int            // alerts opened
	resolved int            // alerts resolved
	dropped  int            // resolves or acknowledges with no open alert
	refused  int
	resolves map[string]bool // dedup_keys a resolve was accepted for
	after    int             // triggers accepted after a resolve of their dedup_key
	held     map[string]bool // HoldTriggers
}

// PagerDutyEvent is an event PagerDuty accepted.
type PagerDutyEvent struct {
	Request
	Action, DedupKey, Summary, Severity, Source string
	At                                          time.Time // when it was accepted
}

// NewPagerDuty returns the Events API v2 for the integration key routingKey.
func NewPagerDuty(routingKey string) *PagerDuty {
	return &PagerDuty{RoutingKey: routingKey, open: map[string]int{}, resolves: map[string]bool{}, held: map[string]bool{}}
}

// HoldTriggers answers 500 to every trigger event for dedupKey until a
// resolve of it is accepted: a firing whose page keeps failing until
// after its resolve went out, the race that re-opens an incident.
func (p *PagerDuty) HoldTriggers(dedupKey string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.held[dedupKey] = true
}

var pdSeverities = []string{"critical", "error", "warning", "info"}

func (p *PagerDuty) invalid(w http.ResponseWriter, errs ...string) {
	p.mu.Lock()
	p.refused++
	p.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusBadRequest)
	json.NewEncoder(w).Encode(map[string]any{"status": "invalid event", "message": "Event object is invalid", "errors": errs})
}

func (p *PagerDuty) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != "/v2/enqueue" {
		http.Error(w, `{"status":"not found"}`, http.StatusNotFound)
		return
	}
	if r.Method != http.MethodPost {
		http.Error(w, `{"status":"method not allowed"}`, http.StatusMethodNotAllowed)
		return
	}
	if p.fault(w, `{"status":"throttle event","message":"Requests for this service are arriving too quickly. Please retry later."}`) {
		return
	}
	obj, body, problem := readJSON(r, 512<<10)
	if problem != "" {
		p.invalid(w, problem)
		return
	}
	if !isJSON(r) {
		p.invalid(w, "Content-Type must be application/json")
		return
	}
	var errs []string
	need := func(field, kind string) string {
		raw, ok := obj[field]
		if !ok {
			errs = append(errs, "'"+field+"' is missing or blank")
			return ""
		}
		if !jsonType(raw, kind) {
			errs = append(errs, "'"+field+"' must be a "+kind)
			return ""
		}
		return str(raw)
	}
	rk := need("routing_key", "string")
	if rk != "" && (len(rk) != 32 || rk != p.RoutingKey) {
		errs = append(errs, "'routing_key' is invalid")
	}
	action := need("event_action", "string")
	if action != "" && !slices.Contains([]string{"trigger", "acknowledge", "resolve"}, action) {
		errs = append(errs, "'event_action' must be one of trigger, acknowledge, resolve")
	}
	var dedup string
	if raw, ok := obj["dedup_key"]; ok {
		if !jsonType(raw, "string") {
			errs = append(errs, "'dedup_key' must be a string")
		} else if dedup = str(raw); utf8.RuneCountInString(dedup) > 255 {
			errs = append(errs, "'dedup_key' is longer than 255 characters")
		}
	} else if action == "acknowledge" || action == "resolve" {
		errs = append(errs, "'dedup_key' is required for "+action)
	}
	ev := PagerDutyEvent{Request: Request{UserAgent: r.UserAgent(), IdempotencyKey: r.Header.Get("Idempotency-Key"), Body: body}, Action: action, DedupKey: dedup}
	if action == "trigger" {
		var pl struct {
			Summary, Source, Severity *string
			CustomDetails             json.RawMessage `json:"custom_details"`
		}
		if raw, ok := obj["payload"]; !ok || !jsonType(raw, "object") || json.Unmarshal(raw, &pl) != nil {
			errs = append(errs, "'payload' is missing or not an object")
		} else {
			switch {
			case pl.Summary == nil || *pl.Summary == "":
				errs = append(errs, "'payload.summary' is missing or blank")
			case utf8.RuneCountInString(*pl.Summary) > 1024:
				errs = append(errs, "'payload.summary' is longer than 1024 characters")
			default:
				ev.Summary = *pl.Summary
			}
			if pl.Source == nil || *pl.Source == "" {
				errs = append(errs, "'payload.source' is missing or blank")
			} else {
				ev.Source = *pl.Source
			}
			if pl.Severity == nil || !slices.Contains(pdSeverities, *pl.Severity) {
				errs = append(errs, "'payload.severity' must be one of critical, error, warning, info")
			} else {
				ev.Severity = *pl.Severity
			}
			if pl.CustomDetails != nil && !jsonType(pl.CustomDetails, "object") {
				errs = append(errs, "'payload.custom_details' must be an object")
			}
		}
		for field, need := range map[string]string{"links": "href", "images": "src"} {
			raw, ok := obj[field]
			if !ok {
				continue
			}
			var items []map[string]any
			if json.Unmarshal(raw, &items) != nil {
				errs = append(errs, "'"+field+"' must be an array of objects")
				continue
			}
			for _, it := range items {
				if s, _ := it[need].(string); s == "" {
					errs = append(errs, "'"+field+"' items need '"+need+"'")
				}
			}
		}
	}
	if len(errs) > 0 {
		p.invalid(w, errs...)
		return
	}
	p.mu.Lock()
	held := action == "trigger" && p.held[dedup]
	if held {
		p.faults.mu.Lock()
		p.faulted++
		p.faults.mu.Unlock()
	}
	p.mu.Unlock()
	if held {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusInternalServerError)
		io.WriteString(w, `{"status":"error","message":"held until its resolve"}`)
		return
	}
	if dedup == "" {
		var b [16]byte
		rand.Read(b[:])
		dedup = hex.EncodeToString(b[:])
		ev.DedupKey = dedup
	}
	p.mu.Lock()
	ev.At = time.Now()
	p.events = append(p.events, ev)
	switch action {
	case "trigger":
		if _, ok := p.open[dedup]; !ok {
			p.opened++
		}
		p.open[dedup]++
		if p.resolves[dedup] {
			p.after++
		}
	case "resolve":
		p.resolves[dedup] = true
		delete(p.held, dedup)
		if _, ok := p.open[dedup]; ok {
			delete(p.open, dedup)
			p.resolved++
		} else {
			p.dropped++
		}
	case "acknowledge":
		if _, ok := p.open[dedup]; !ok {
			p.dropped++
		}
	}
	p.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusAccepted)
	json.NewEncoder(w).Encode(map[string]string{"status": "success", "message": "Event processed", "dedup_key": dedup})
}

// PagerDutyStats is what a PagerDuty receiver saw.
type PagerDutyStats struct {
	Triggers, Resolves int // events accepted
	Opened             int // alerts opened (a trigger for a dedup_key with none open)
	Resolved           int // open alerts resolved
	Dropped            int // resolves or acknowledges with no open alert
	Open               int // alerts open now
	Refused            int // 400s
	// AfterResolve counts triggers accepted for a dedup_key after a
	// resolve of it: a firing that landed after its own resolve.
	AfterResolve int
	Throttled    int // 429s past the quota (Limit): events PagerDuty would drop
}

// Stats returns the counts so far.
func (p *PagerDuty) Stats() PagerDutyStats {
	p.mu.Lock()
	defer p.mu.Unlock()
	s := PagerDutyStats{Opened: p.opened, Resolved: p.resolved, Dropped: p.dropped, Open: len(p.open), Refused: p.refused,
		AfterResolve: p.after, Throttled: p.Throttled()}
	for _, e := range p.events {
		switch e.Action {
		case "trigger":
			s.Triggers++
		case "resolve":
			s.Resolves++
		}
	}
	return s
}

// Events returns the events accepted, in order.
func (p *PagerDuty) Events() []PagerDutyEvent {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]PagerDutyEvent(nil), p.events...)
}

// IsOpen reports whether an alert with dedupKey is open.
func (p *PagerDuty) IsOpen(dedupKey string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	_, ok := p.open[dedupKey]
	return ok
}
