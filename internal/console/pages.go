package console

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"html/template"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/oncegate/oncegate/internal/admin"
	"github.com/oncegate/oncegate/internal/config"
	"github.com/oncegate/oncegate/internal/outcome"
	"github.com/oncegate/oncegate/pkg/llmcache"
)

// page is what every template gets.
type page struct {
	Title     string
	Error     string // why the request failed
	Flash     string // what the last change did
	SignedIn  bool
	Operator  string // who signed in
	CanChange bool   // an operator's token is configured
	CSRF      string
	Path      string // the page's path and query, to come back to
	Pipelines []string
	Reasons   []string
	Data      any
}

var funcs = template.FuncMap{
	"when": func(t time.Time) string {
		if t.IsZero() {
			return "-"
		}
		return t.UTC().Format("2006-01-02 15:04:05Z")
	},
	"text": func(b []byte) string {
		if utf8.Valid(b) {
			return string(b)
		}
		return fmt.Sprintf("%q", b)
	},
	// unknownOutcome reports whether a failed record's reason is
	// unknown_outcome: its effect may have happened.
	"unknownOutcome": func(reason string) bool {
		return strings.HasPrefix(reason, string(outcome.ReasonUnknownOutcome)+": ")
	},
	"clip": func(s string, n int) string {
		if utf8.RuneCountInString(s) <= n {
			return s
		}
		return string([]rune(s)[:n-1]) + "…"
	},
}

func (s *Server) base(r *http.Request, title string) page {
	p := page{Title: title, CanChange: s.opts.Operators.Len() > 0, Path: r.URL.RequestURI(), Flash: r.URL.Query().Get("msg")}
	if ss, ok := s.session(r); ok {
		p.SignedIn, p.CSRF, p.Operator = true, ss.csrf, ss.operator
	}
	for _, pl := range s.opts.Config.Pipelines {
		p.Pipelines = append(p.Pipelines, pl.Name)
	}
	for _, rs := range outcome.Reasons {
		p.Reasons = append(p.Reasons, string(rs))
	}
	return p
}

func (s *Server) render(w http.ResponseWriter, r *http.Request, status int, name string, p page) {
	if p.Pipelines == nil {
		b := s.base(r, p.Title)
		b.Error, b.Data, b.Flash = p.Error, p.Data, cmp.Or(p.Flash, b.Flash)
		p = b
	}
	var buf bytes.Buffer
	if err := s.tmpl.ExecuteTemplate(&buf, name, p); err != nil {
		s.opts.Logger.Error("console: rendering a page", "page", name, "err", err)
		http.Error(w, "console: the page could not be rendered", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	w.Write(buf.Bytes())
}

// failed renders name with err as the page's error.
func (s *Server) failed(w http.ResponseWriter, r *http.Request, name string, p page, err error) {
	status := http.StatusInternalServerError
	switch {
	case errors.Is(err, admin.ErrBadRequest):
		status = http.StatusBadRequest
	case errors.Is(err, admin.ErrNotFound):
		status = http.StatusNotFound
	case errors.Is(err, admin.ErrRefused):
		status = http.StatusConflict
	}
	p.Error = err.Error()
	s.render(w, r, status, name, p)
}

// overviewData is the front page: dead letters counted by pipeline and
// reason, pending work, the cache.
type overviewData struct {
	Counts   []count
	Dead     int
	DeadMore bool
	Pending  int
	Cache    []llmcache.StepStats
	Summary  *llmcache.Summary
}

type count struct {
	Pipeline, Reason string
	N                int
}

func (s *Server) overview(w http.ResponseWriter, r *http.Request) {
	p := s.base(r, "Oncegate")
	var d overviewData
	dead, err := s.opts.API.Dead(r.Context(), admin.Selection{Limit: admin.MaxLimit})
	if err != nil {
		s.failed(w, r, "overview", p, err)
		return
	}
	d.Dead, d.DeadMore = len(dead.Letters), dead.More
	byKey := map[[2]string]int{}
	for _, l := range dead.Letters {
		byKey[[2]string{l.Pipeline, l.Reason}]++
	}
	for k, n := range byKey {
		d.Counts = append(d.Counts, count{k[0], k[1], n})
	}
	slices.SortFunc(d.Counts, func(a, b count) int {
		return cmp.Or(strings.Compare(a.Pipeline, b.Pipeline), strings.Compare(a.Reason, b.Reason))
	})
	if pend, err := s.opts.API.Pending(r.Context(), admin.PendingRequest{}); err == nil {
		d.Pending = len(pend.Records)
	}
	if s.opts.CacheStats != nil {
		d.Cache = s.opts.CacheStats()
	}
	if s.opts.CacheSummary != nil {
		if sum, err := s.opts.CacheSummary(); err == nil {
			d.Summary = &sum
		}
	}
	p.Data = d
	s.render(w, r, http.StatusOK, "overview", p)
}

type deadData struct {
	Pipeline, Reason string
	Reply            admin.DeadReply
}

func (s *Server) deadList(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	p := s.base(r, "Dead letters")
	d := deadData{Pipeline: q.Get("pipeline"), Reason: q.Get("reason")}
	after, _ := strconv.ParseUint(q.Get("after"), 10, 64)
	reply, err := s.opts.API.Dead(r.Context(), admin.Selection{Pipeline: d.Pipeline, Reason: d.Reason, After: after, Limit: admin.DefaultLimit})
	d.Reply = reply
	p.Data = d
	if err != nil {
		s.failed(w, r, "dead", p, err)
		return
	}
	s.render(w, r, http.StatusOK, "dead", p)
}

type letterData struct {
	Letter  admin.DeadLetter
	Unknown bool // reason unknown_outcome: the redrive needs the statement
	Record  *admin.RecordReply
}

func (s *Server) deadShow(w http.ResponseWriter, r *http.Request) {
	p := s.base(r, "Dead letter")
	seq, err := strconv.ParseUint(r.PathValue("seq"), 10, 64)
	if err != nil {
		s.failed(w, r, "letter", p, fmt.Errorf("%w: %q is not a sequence", admin.ErrBadRequest, r.PathValue("seq")))
		return
	}
	d, err := s.opts.API.Show(r.Context(), admin.ShowRequest{Seq: seq})
	if err != nil {
		s.failed(w, r, "letter", p, err)
		return
	}
	ld := letterData{Letter: d, Unknown: d.Reason == string(outcome.ReasonUnknownOutcome)}
	if d.Key != "" {
		if rec, err := s.opts.API.Record(r.Context(), admin.RecordRequest{Key: d.Key, Pipeline: d.Pipeline}); err == nil {
			ld.Record = &rec
		}
	}
	p.Title = fmt.Sprintf("Dead letter %d", seq)
	p.Data = ld
	s.render(w, r, http.StatusOK, "letter", p)
}

func (s *Server) redrive(w http.ResponseWriter, r *http.Request, by admin.Caller) {
	seq, err := strconv.ParseUint(r.PathValue("seq"), 10, 64)
	if err != nil {
		http.Error(w, "console: not a sequence", http.StatusBadRequest)
		return
	}
	req := admin.RedriveRequest{
		Selection: admin.Selection{Seqs: []admin.Range{{From: seq, To: seq}}},
		Yes:       true, Again: r.PostFormValue("again") == "on", By: by,
	}
	if r.PostFormValue("not_sent") == "on" {
		req.UnknownOutcome = admin.StatementNotSent
	}
	rep, err := s.opts.API.Redrive(r.Context(), req)
	msg := ""
	switch {
	case err != nil:
		msg = "redrive failed: " + err.Error()
	case len(rep.Results) == 0:
		msg = "no such dead letter"
	default:
		x := rep.Results[0]
		msg = x.Outcome
		if x.Ledger != "" {
			msg += "; ledger: " + x.Ledger
		}
		if x.Detail != "" {
			msg += "; " + x.Detail
		}
	}
	s.opts.Logger.Info("console redrive", "client", r.RemoteAddr, "by", by.String(), "seq", seq, "statement", req.UnknownOutcome, "result", msg)
	http.Redirect(w, r, fmt.Sprintf("/dead/%d?msg=%s", seq, url.QueryEscape(msg)), http.StatusSeeOther)
}

// forget clears a failed record; one that failed with an unknown outcome
// needs the operator's statement that the effect did not happen (the
// not_sent box), as a redrive does.
func (s *Server) forget(w http.ResponseWriter, r *http.Request, by admin.Caller) {
	key := r.PostFormValue("key")
	req := admin.ForgetRequest{Key: key, By: by}
	if r.PostFormValue("not_sent") == "on" {
		req.UnknownOutcome = admin.StatementNotSent
	}
	rep, err := s.opts.API.Forget(r.Context(), req)
	msg := key + ": " + rep.Outcome
	if rep.Statement != "" {
		msg += "; stated: " + rep.Statement
	}
	if err != nil {
		msg = "forget refused: " + err.Error()
	}
	s.opts.Logger.Info("console forget", "client", r.RemoteAddr, "by", by.String(), "key", key, "statement", req.UnknownOutcome, "result", msg)
	back := safeBack(r.PostFormValue("back"), "/dead")
	if i := strings.IndexByte(back, '?'); i >= 0 {
		back = back[:i]
	}
	http.Redirect(w, r, back+"?msg="+url.QueryEscape(msg), http.StatusSeeOther)
}

type keyData struct {
	Pipeline string
	Payload  string
	Reply    *admin.RecordReply
}

// keyPage looks a payload's key and record up; a POST changes nothing.
func (s *Server) keyPage(w http.ResponseWriter, r *http.Request) {
	p := s.base(r, "Key lookup")
	d := keyData{Pipeline: r.FormValue("pipeline"), Payload: r.PostFormValue("payload")}
	if key := r.URL.Query().Get("key"); key != "" && r.Method == http.MethodGet {
		rep, err := s.opts.API.Record(r.Context(), admin.RecordRequest{Key: key, Pipeline: d.Pipeline})
		p.Data = d
		if err != nil {
			s.failed(w, r, "key", p, err)
			return
		}
		d.Reply = &rep
	}
	if r.Method == http.MethodPost {
		rep, err := s.opts.API.Record(r.Context(), admin.RecordRequest{Pipeline: d.Pipeline, Payload: []byte(d.Payload)})
		p.Data = d
		if err != nil {
			s.failed(w, r, "key", p, err)
			return
		}
		d.Reply = &rep
	}
	p.Data = d
	s.render(w, r, http.StatusOK, "key", p)
}

type pendingData struct {
	Records []admin.Record
	More    bool
	Outbox  []outboxEntry
	Now     time.Time
}

func (s *Server) pending(w http.ResponseWriter, r *http.Request) {
	p := s.base(r, "Pending")
	rep, err := s.opts.API.Pending(r.Context(), admin.PendingRequest{Limit: 500})
	d := pendingData{Records: rep.Records, More: rep.More, Now: time.Now()}
	if err == nil {
		d.Outbox, err = s.outbox(r.Context())
	}
	p.Data = d
	if err != nil {
		s.failed(w, r, "pending", p, err)
		return
	}
	s.render(w, r, http.StatusOK, "pending", p)
}

func (s *Server) loginPage(w http.ResponseWriter, r *http.Request) {
	p := s.base(r, "Sign in")
	p.Data = r.URL.Query().Get("back")
	s.render(w, r, http.StatusOK, "login", p)
}

// oneShot reports whether the named pipeline's effect is one-shot.
func oneShot(cfg *config.Config, name string) *config.Pipeline {
	for i := range cfg.Pipelines {
		if p := &cfg.Pipelines[i]; p.Name == name && p.Effect.Class == config.ClassOneShot {
			return p
		}
	}
	return nil
}
