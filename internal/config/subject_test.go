package config

import (
	"testing"

	"github.com/nats-io/nats-server/v2/server"
)

var subjects = []string{
	">", "*", "a", "a.b", "a.*", "a.>", "*.b", "*.*", "*.>", "a.b.c", "a.*.c", "a.b.>", "a.*.>",
	"triggers.>", "triggers.alerts", "triggers.*", "b", "b.>", "a.*.*", "*.b.>", "a-b_c", "ä.ö",
}

// mixed are subjects nats-server accepts and checkSubject refuses: tokens
// that mix a wildcard with other characters.
var mixed = []string{"a*", "a.b*", "*0.*", "a.>b", "a.b>"}

// TestSubjectsAgainstServer compares the subject rules with nats-server's own
// on every pair of subjects.
func TestSubjectsAgainstServer(t *testing.T) {
	for _, s := range mixed {
		if !server.IsValidSubject(s) || checkSubject(s, false) == nil {
			t.Errorf("%q: nats-server accepts it, checkSubject refuses it: want both true", s)
		}
	}
	for _, s := range append(subjects, "", "a..b", ".a", "a.", "a.>.b", "a b", "a.\tb", ">.a") {
		if got, want := checkSubject(s, false) == nil, server.IsValidSubject(s); got != want {
			t.Errorf("checkSubject(%q) ok = %v; nats-server says %v", s, got, want)
		}
		if got, want := checkSubject(s, true) == nil, server.IsValidPublishSubject(s); got != want {
			t.Errorf("checkSubject(%q, literal) ok = %v; nats-server says %v", s, got, want)
		}
	}
	for _, wide := range subjects {
		for _, narrow := range subjects {
			if got, want := subjectCovers(wide, narrow), server.SubjectMatchesFilter(narrow, wide); got != want {
				t.Errorf("subjectCovers(%q, %q) = %v; nats-server says %v", wide, narrow, got, want)
			}
			if got, want := subjectsCollide(wide, narrow), server.SubjectsCollide(wide, narrow); got != want {
				t.Errorf("subjectsCollide(%q, %q) = %v; nats-server says %v", wide, narrow, got, want)
			}
		}
	}
}

func FuzzSubjects(f *testing.F) {
	for _, a := range subjects {
		f.Add(a, "triggers.alerts")
	}
	f.Fuzz(func(t *testing.T, a, b string) {
		if checkSubject(a, false) != nil || checkSubject(b, false) != nil {
			return
		}
		if got, want := subjectCovers(a, b), server.SubjectMatchesFilter(b, a); got != want {
			t.Errorf("subjectCovers(%q, %q) = %v; nats-server says %v", a, b, got, want)
		}
		if got, want := subjectsCollide(a, b), server.SubjectsCollide(a, b); got != want {
			t.Errorf("subjectsCollide(%q, %q) = %v; nats-server says %v", a, b, got, want)
		}
	})
}
