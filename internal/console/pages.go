package console

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"html/template"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/oncegate/oncegate/internal/admin"
	"github.com/oncegate/oncegate/internal/config"
	"github.com/oncegate/oncegate/internal/llmhook"
	"github.com/oncegate/oncegate/internal/outcome"
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
	// effect names an effect: "notify (slack)", or its kind alone.
	"effect": func(name, kind string) string {
		switch {
		case name == "" && kind == "":
			return "-"
		case name == "":
			return kind
		case kind == "":
			return name
		}
		return name + " (" + kind + ")"
	},
	// query is the dead letters' page's query with one filter more.
	"query": func(f filterForm, name, value string) template.URL {
		if f.Q != "" {
			if name == "handled" {
				value = "yes"
			}
			f.Q += " " + name + "=" + value
			return template.URL(f.query(0))
		}
		switch name {
		case "pipeline":
			f.Pipeline = value
		case "reason":
			f.Reason = value
		case "effect":
			f.Effect = value
		case "status":
			f.Status = value
		case "handled":
			f.Handled = true
		}
		return template.URL(f.query(0))
	},
	"formValues": func(f filterForm) map[string]string {
		out := map[string]string{}
		for k, v := range f.values() {
			out[k] = v[0]
		}
		return out
	},
	// failedIn returns the reason of the failed record among an intent's
	// (its own, its effects' dispatches), or "".
	"failedIn": func(r *admin.RecordReply) string {
		if r.Record != nil && r.Record.State == "failed" {
			return r.Record.Reason
		}
		for _, d := range r.Effects {
			if d.Dispatch != nil && d.Dispatch.State == "failed" {
				return d.Dispatch.Reason
			}
		}
		return ""
	},
	"now": time.Now,
	"percent": func(n, of int) int {
		if of <= 0 {
			return 100
		}
		return min(100, 100*n/of)
	},
	"add": func(a, b int) int { return a + b },
	// will says what a redrive does, or would, with a letter.
	"will": func(o string) string {
		switch o {
		case admin.OutcomeWouldRedrive, admin.OutcomeRedriven:
			return "fire its effect (" + o + ")"
		case admin.OutcomeCommitted:
			return "skip: committed meanwhile"
		case admin.OutcomeInProgress:
			return "skip: in progress"
		case admin.OutcomeAlreadyRedriven:
			return "skip: redriven already"
		case admin.OutcomeRefused:
			return "refused"
		}
		return o
	},
	// model says what a redriven trigger's model step costs.
	"model": func(r admin.RedriveResult) string {
		switch r.Model {
		case admin.ModelCached:
			return "cached: free"
		case admin.ModelPaid:
			return fmt.Sprintf("~%d tokens, $%.4f", r.Tokens, r.Cost)
		case admin.ModelUnknown:
			return "unknown"
		}
		return "-"
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
// reason, the bulk redrives, pending work, the cache.
type overviewData struct {
	Dead    admin.FindReply
	Jobs    []admin.Job
	Pending int
	Cache   []llmhook.StepStats
	Summary *llmhook.Summary
}

func (s *Server) overview(w http.ResponseWriter, r *http.Request) {
	p := s.base(r, "Oncegate")
	var d overviewData
	dead, err := s.opts.API.Find(r.Context(), admin.FindRequest{Selection: admin.Selection{Unhandled: true, Limit: 1}})
	if err != nil {
		s.failed(w, r, "overview", p, err)
		return
	}
	d.Dead = dead
	if jobs, err := s.opts.API.Jobs(r.Context(), admin.JobsRequest{Limit: 5}); err == nil {
		d.Jobs = jobs.Jobs
	}
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

// deadData is the dead letters' page.
type deadData struct {
	Form   filterForm
	Filter string // the selection as a filter line (consumer redrive -filter)
	Reply  admin.FindReply
	From   int // the first letter shown, counting from 1
	To     int
	Prev   template.URL // the query of the newer page, or ""
	Next   template.URL // of the older page
}

// pageSize is how many dead letters a page lists.
const pageSize = 50

func (s *Server) deadList(w http.ResponseWriter, r *http.Request) {
	p := s.base(r, "Dead letters")
	form := readFilter(r)
	d := deadData{Form: form}
	p.Data = d
	sel, err := form.selection(s.now())
	if err != nil {
		s.failed(w, r, "dead", p, err)
		return
	}
	d.Filter = sel.Filter()
	offset, _ := strconv.Atoi(r.URL.Query().Get("offset"))
	sel.Limit = pageSize
	reply, err := s.opts.API.Find(r.Context(), admin.FindRequest{Selection: sel, Offset: max(offset, 0)})
	d.Reply = reply
	p.Data = d
	if err != nil {
		s.failed(w, r, "dead", p, err)
		return
	}
	d.From, d.To = reply.Offset+1, reply.Offset+len(reply.Letters)
	if reply.Offset > 0 {
		d.Prev = template.URL(form.query(max(reply.Offset-pageSize, 0)))
	}
	if d.To < reply.Total {
		d.Next = template.URL(form.query(d.To))
	}
	p.Data = d
	s.render(w, r, http.StatusOK, "dead", p)
}

// filterForm is the dead letters' filter, as the page's form has it.
type filterForm struct {
	Q, Pipeline, Effect, Reason, Status, From, To, Text string
	Handled                                             bool
}

func readFilter(r *http.Request) filterForm {
	v := r.URL.Query()
	if r.Method == http.MethodPost {
		v = r.PostForm
	}
	return filterForm{
		Q: strings.TrimSpace(v.Get("q")), Pipeline: v.Get("pipeline"), Effect: strings.TrimSpace(v.Get("effect")),
		Reason: v.Get("reason"), Status: strings.TrimSpace(v.Get("status")), From: strings.TrimSpace(v.Get("from")),
		To: strings.TrimSpace(v.Get("to")), Text: strings.TrimSpace(v.Get("text")), Handled: v.Get("handled") == "on",
	}
}

// selection is the form's selection: its filter line, if it has one, else
// its fields.
func (f filterForm) selection(now time.Time) (admin.Selection, error) {
	if f.Q != "" {
		return admin.ParseFilter(f.Q, now)
	}
	sel := admin.Selection{Pipeline: f.Pipeline, Effect: f.Effect, Reason: f.Reason, Status: f.Status, Text: f.Text, Unhandled: !f.Handled}
	var err error
	if f.From != "" {
		if sel.Since, err = admin.ParseTime(f.From, now); err != nil {
			return sel, fmt.Errorf("%w: from %q: %w", admin.ErrBadRequest, f.From, err)
		}
	}
	if f.To != "" {
		if sel.Until, err = admin.ParseTime(f.To, now); err != nil {
			return sel, fmt.Errorf("%w: to %q: %w", admin.ErrBadRequest, f.To, err)
		}
	}
	return sel, nil
}

// values is the form as a query or a form to post.
func (f filterForm) values() url.Values {
	v := url.Values{}
	for k, x := range map[string]string{"q": f.Q, "pipeline": f.Pipeline, "effect": f.Effect, "reason": f.Reason, "status": f.Status, "from": f.From, "to": f.To, "text": f.Text} {
		if x != "" {
			v.Set(k, x)
		}
	}
	if f.Handled {
		v.Set("handled", "on")
	}
	return v
}

// query is the page's query from offset on.
func (f filterForm) query(offset int) string {
	v := f.values()
	if offset > 0 {
		v.Set("offset", strconv.Itoa(offset))
	}
	return v.Encode()
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
