package receiver

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"unicode/utf8"
)

// Jira is Jira Cloud's create-issue endpoint (POST /rest/api/3/issue). It
// checks basic authentication (an account's email and API token) and the
// request as Jira documents it — fields.project with a key of one of its
// projects, fields.issuetype with the name of one of its issue types,
// fields.summary (1 to 255 characters, one line), fields.description an
// Atlassian Document Format document (type doc, version 1, content of
// block nodes) — and answers as Jira does: 201 {"id","key","self"}; 400
// {"errorMessages":[],"errors":{field: message}}; 401 without valid
// credentials.
type Jira struct {
	// Email and Token are the credentials of basic authentication.
	Email, Token string
	// Projects are the project keys that exist.
	Projects []string
	// IssueTypes are the issue type names that exist. The default is
	// Task, Bug and Story.
	IssueTypes []string

	faults
	mu      sync.Mutex
	issues  []JiraIssue
	refused int
}

// JiraIssue is an issue Jira created.
type JiraIssue struct {
	Request
	Key, Project, IssueType, Summary string
	Description                      json.RawMessage
}

// NewJira returns a Jira site with the credentials and projects.
func NewJira(email, token string, projects ...string) *Jira {
	return &Jira{Email: email, Token: token, Projects: projects, IssueTypes: []string{"Task", "Bug", "Story"}}
}

func (j *Jira) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	if r.URL.Path != "/rest/api/3/issue" {
		w.WriteHeader(http.StatusNotFound)
		fmt.Fprint(w, `{"errorMessages":["Not found"],"errors":{}}`)
		return
	}
	if r.Method != http.MethodPost {
		w.WriteHeader(http.StatusMethodNotAllowed)
		return
	}
	want := "Basic " + base64.StdEncoding.EncodeToString([]byte(j.Email+":"+j.Token))
	if r.Header.Get("Authorization") != want {
		j.count()
		w.WriteHeader(http.StatusUnauthorized)
		fmt.Fprint(w, `{"errorMessages":["You are not authenticated. Authentication required to perform this operation."],"errors":{}}`)
		return
	}
	if j.fault(w, `{"errorMessages":["Rate limit exceeded."],"errors":{}}`) {
		return
	}
	obj, body, problem := readJSON(r, maxBody)
	if problem != "" || !isJSON(r) {
		j.reject(w, []string{"Unexpected character: the request body is not a JSON object."}, nil)
		return
	}
	var f struct {
		Project *struct {
			Key string `json:"key"`
		} `json:"project"`
		IssueType *struct {
			Name string `json:"name"`
		} `json:"issuetype"`
		Summary     *string         `json:"summary"`
		Description json.RawMessage `json:"description"`
	}
	if raw, ok := obj["fields"]; !ok || json.Unmarshal(raw, &f) != nil {
		j.reject(w, []string{"fields is required and must be an object"}, nil)
		return
	}
	errs := map[string]string{}
	switch {
	case f.Project == nil || f.Project.Key == "":
		errs["project"] = "Specify a valid project ID or key"
	case !slices.Contains(j.Projects, f.Project.Key):
		errs["project"] = "valid project is required"
	}
	if f.IssueType == nil || !slices.Contains(j.IssueTypes, f.IssueType.Name) {
		errs["issuetype"] = "Specify an issue type"
	}
	switch {
	case f.Summary == nil || strings.TrimSpace(*f.Summary) == "":
		errs["summary"] = "You must specify a summary of the issue."
	case utf8.RuneCountInString(*f.Summary) > 255:
		errs["summary"] = "Summary must be less than 255 characters."
	case strings.ContainsAny(*f.Summary, "\r\n"):
		errs["summary"] = "The summary is invalid because it contains newline characters."
	}
	if f.Description != nil {
		if why := checkADF(f.Description); why != "" {
			errs["description"] = "Operation value must be an Atlassian Document (see the Atlassian Document Format): " + why
		}
	}
	if len(errs) > 0 {
		j.reject(w, nil, errs)
		return
	}
	j.mu.Lock()
	n := len(j.issues) + 1
	key := f.Project.Key + "-" + strconv.Itoa(n)
	j.issues = append(j.issues, JiraIssue{
		Request: Request{UserAgent: r.UserAgent(), IdempotencyKey: r.Header.Get("Idempotency-Key"), Body: body},
		Key:     key, Project: f.Project.Key, IssueType: f.IssueType.Name, Summary: *f.Summary, Description: f.Description,
	})
	j.mu.Unlock()
	w.WriteHeader(http.StatusCreated)
	id := strconv.Itoa(10000 + n)
	json.NewEncoder(w).Encode(map[string]string{"id": id, "key": key, "self": "http://" + r.Host + "/rest/api/3/issue/" + id})
}

func (j *Jira) count() {
	j.mu.Lock()
	j.refused++
	j.mu.Unlock()
}

func (j *Jira) reject(w http.ResponseWriter, msgs []string, errs map[string]string) {
	j.count()
	if msgs == nil {
		msgs = []string{}
	}
	if errs == nil {
		errs = map[string]string{}
	}
	w.WriteHeader(http.StatusBadRequest)
	json.NewEncoder(w).Encode(map[string]any{"errorMessages": msgs, "errors": errs})
}

// checkADF says what is wrong with an Atlassian Document Format document,
// or "": a doc node of version 1 whose content is block nodes (paragraph,
// heading, bulletList, orderedList, codeBlock, blockquote, rule, panel),
// whose text nodes carry non-empty text.
func checkADF(raw json.RawMessage) string {
	type node struct {
		Type    string  `json:"type"`
		Version int     `json:"version"`
		Text    *string `json:"text"`
		Content []node  `json:"content"`
	}
	var doc node
	if err := json.Unmarshal(raw, &doc); err != nil {
		return "not a JSON object"
	}
	if doc.Type != "doc" || doc.Version != 1 {
		return "the root must be {\"type\":\"doc\",\"version\":1}"
	}
	blocks := []string{"paragraph", "heading", "bulletList", "orderedList", "codeBlock", "blockquote", "rule", "panel"}
	var walk func(n node, depth int) string
	walk = func(n node, depth int) string {
		if depth > 32 {
			return "nested too deep"
		}
		if n.Type == "text" && (n.Text == nil || *n.Text == "") {
			return "a text node needs non-empty text"
		}
		for _, c := range n.Content {
			if why := walk(c, depth+1); why != "" {
				return why
			}
		}
		return ""
	}
	for _, b := range doc.Content {
		if !slices.Contains(blocks, b.Type) {
			return fmt.Sprintf("%q is not a block node", b.Type)
		}
		if why := walk(b, 1); why != "" {
			return why
		}
	}
	return ""
}

// Issues returns the issues created, in order.
func (j *Jira) Issues() []JiraIssue {
	j.mu.Lock()
	defer j.mu.Unlock()
	return append([]JiraIssue(nil), j.issues...)
}

// Refused returns how many requests were answered 400 or 401.
func (j *Jira) Refused() int {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.refused
}
