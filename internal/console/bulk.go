package console

import (
	"fmt"
	"html/template"
	"net/http"
	"net/url"
	"strconv"

	"github.com/oncegate/oncegate/internal/admin"
)

// A bulk redrive in the console: the dead letters' page, filtered, offers
// to redrive the letters it lists; Preview (a POST, signed in) saves the
// job and shows, per letter, what the redrive will do and, in all, what it
// will fire, skip and refuse and what the model will cost; Confirm starts
// it in the consumer that answers; its page then shows its progress (it
// reloads itself while it runs) and, when it is done, its summary.

// previewRows is how many letters a preview's page lists.
const previewRows = 50

// preview saves a bulk redrive's preview of the letters the posted filter
// chooses, and shows it.
func (s *Server) preview(w http.ResponseWriter, r *http.Request, by admin.Caller) {
	form := readFilter(r)
	sel, err := form.selection(s.now())
	if err != nil {
		s.failed(w, r, "dead", page{Title: "Dead letters", Data: deadData{Form: form}}, err)
		return
	}
	req := admin.PreviewRequest{Selection: sel, Again: r.PostFormValue("again") == "on", By: by}
	if r.PostFormValue("not_sent") == "on" {
		req.UnknownOutcome = admin.StatementNotSent
	}
	if v := r.PostFormValue("rate"); v != "" {
		if req.Rate, err = strconv.ParseFloat(v, 64); err != nil || req.Rate < 0 {
			s.failed(w, r, "dead", page{Title: "Dead letters", Data: deadData{Form: form}}, fmt.Errorf("%w: a rate of %q letters a second", admin.ErrBadRequest, v))
			return
		}
	}
	req.Limit = previewRows
	rep, err := s.opts.API.Preview(r.Context(), req)
	if err != nil {
		s.failed(w, r, "dead", page{Title: "Dead letters", Data: deadData{Form: form}}, err)
		return
	}
	s.opts.Logger.Info("console bulk redrive previewed", "client", r.RemoteAddr, "by", by.String(), "job", rep.Job.ID, "filter", sel.Filter(), "letters", rep.Job.Preview.Letters)
	http.Redirect(w, r, "/redrive/"+url.PathEscape(rep.Job.ID), http.StatusSeeOther)
}

// jobData is a bulk redrive's page.
type jobData struct {
	Job     admin.Job
	Rows    []admin.RedriveResult
	Offset  int
	Prev    int // -1: none
	Next    int // -1: none
	Refused int // letters refused for an unknown outcome without the statement
	Running bool
}

func (s *Server) jobPage(w http.ResponseWriter, r *http.Request) {
	p := s.base(r, "Bulk redrive")
	id := r.PathValue("id")
	offset, _ := strconv.Atoi(r.URL.Query().Get("offset"))
	offset = max(offset, 0)
	d := jobData{Offset: offset, Prev: -1, Next: -1}
	j, err := s.opts.API.Job(r.Context(), admin.JobRequest{ID: id})
	if err != nil {
		s.failed(w, r, "job", p, err)
		return
	}
	d.Job, d.Running = j, j.State == admin.JobRunning
	if j.State == admin.JobPreviewed {
		rep, err := s.opts.API.Preview(r.Context(), admin.PreviewRequest{Job: j.ID, Offset: offset, Selection: admin.Selection{Limit: previewRows}})
		if err != nil {
			s.failed(w, r, "job", p, err)
			return
		}
		d.Rows = rep.Rows
		if offset > 0 {
			d.Prev = max(offset-previewRows, 0)
		}
		if offset+len(rep.Rows) < j.Preview.Letters {
			d.Next = offset + len(rep.Rows)
		}
	}
	d.Refused = j.Preview.ByOutcome[admin.OutcomeRefused]
	p.Title = "Bulk redrive " + j.ID
	p.Data = d
	s.render(w, r, http.StatusOK, "job", p)
}

// startJob confirms a previewed bulk redrive, or resumes one whose runner
// stopped.
func (s *Server) startJob(w http.ResponseWriter, r *http.Request, by admin.Caller) {
	id := r.PathValue("id")
	j, err := s.opts.API.StartJob(r.Context(), admin.JobRequest{ID: id, By: by})
	msg := "started"
	if err != nil {
		msg = "could not start: " + err.Error()
	} else if j.State != admin.JobRunning {
		msg = "it is " + j.State
	}
	s.opts.Logger.Info("console bulk redrive started", "client", r.RemoteAddr, "by", by.String(), "job", id, "result", msg)
	http.Redirect(w, r, "/redrive/"+url.PathEscape(id)+"?msg="+url.QueryEscape(msg), http.StatusSeeOther)
}

func (s *Server) jobsPage(w http.ResponseWriter, r *http.Request) {
	p := s.base(r, "Bulk redrives")
	rep, err := s.opts.API.Jobs(r.Context(), admin.JobsRequest{Limit: 50})
	p.Data = rep
	if err != nil {
		s.failed(w, r, "jobs", p, err)
		return
	}
	s.render(w, r, http.StatusOK, "jobs", p)
}

// auditData is the audit's page.
type auditData struct {
	Req     admin.AuditRequest
	Reply   admin.AuditReply
	Actions []string
	Next    template.URL
}

func (s *Server) auditPage(w http.ResponseWriter, r *http.Request) {
	p := s.base(r, "Audit")
	q := r.URL.Query()
	req := admin.AuditRequest{Key: q.Get("key"), Action: q.Get("action"), By: q.Get("by"), Job: q.Get("job"), Limit: 100}
	req.Before, _ = strconv.ParseUint(q.Get("before"), 10, 64)
	d := auditData{Req: req, Actions: admin.AuditActions}
	rep, err := s.opts.API.Audit(r.Context(), req)
	d.Reply = rep
	p.Data = d
	if err != nil {
		s.failed(w, r, "audit", p, err)
		return
	}
	if rep.More {
		v := url.Values{}
		for k, x := range map[string]string{"key": req.Key, "action": req.Action, "by": req.By, "job": req.Job} {
			if x != "" {
				v.Set(k, x)
			}
		}
		v.Set("before", strconv.FormatUint(rep.Next, 10))
		d.Next = template.URL(v.Encode())
	}
	p.Data = d
	s.render(w, r, http.StatusOK, "audit", p)
}
