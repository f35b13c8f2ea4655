package config

import (
	"fmt"
	"io"
	"net/url"
	"strconv"
	"strings"
	"text/tabwriter"
)

// Explain writes a summary of the effective configuration to w, for
// people: the process-wide settings, then each pipeline's flow (subject →
// key → window → ledger → step → effect → acks). Values nobody set are
// marked "(default)". Secrets are never printed: the file does not hold
// them, and Explain names only the files and environment variables they
// come from; URLs are printed without user information or query values.
func (c *Config) Explain(w io.Writer) error {
	x := &explainer{c: c}
	from := "built in code"
	if c.meta != nil && c.meta.file != "" {
		from = c.meta.file
	}
	fmt.Fprintf(&x.b, "Oncegate configuration (%s). \"(default)\" marks values set neither in the file nor by ONCEGATE_* variables.\n\n", from)
	tw := tabwriter.NewWriter(&x.b, 0, 4, 2, ' ', 0)
	x.tw = tw
	x.process()
	tw.Flush()
	for i := range c.Pipelines {
		x.pipeline(i)
	}
	_, err := io.WriteString(w, x.b.String())
	return err
}

// process explains the process-wide settings, a few rows per section; the
// sections' files write them.
func (x *explainer) process() {
	c := x.c
	x.row("data_dir", x.d("data_dir", c.DataDir, c.DataDir))
	x.encryption()
	x.nats()
	x.ledger()
	x.llm()
	x.tracing()
	x.prices()
	x.metrics()
	x.log()
	x.stream()
	x.ingress()
	x.recovery()
	x.proxy()
}

type explainer struct {
	c  *Config
	b  strings.Builder
	tw *tabwriter.Writer
}

// d returns text, marked if the value at path is a default.
func (x *explainer) d(path string, v any, text string) string {
	if x.c.meta.isDefault(path, v) {
		return text + " (default)"
	}
	return text
}

func (x *explainer) row(label string, parts ...string) {
	fmt.Fprintf(x.tw, "%s\t%s\n", label, strings.Join(parts, "; "))
}

func orNone(s, none string) string {
	if s == "" {
		return none
	}
	return s
}

func budgetText(n int64) string {
	if n == 0 {
		return "unlimited"
	}
	return strconv.FormatInt(n, 10) + " tokens"
}

func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return strconv.Itoa(n) + " " + what + "s"
}

// redactURL returns s without user information or query values, which may
// carry secrets.
func redactURL(s string) string {
	u, err := url.Parse(s)
	if err != nil {
		if i := strings.LastIndexByte(s, '@'); i >= 0 {
			return "REDACTED@" + s[i+1:]
		}
		return s
	}
	if u.User != nil {
		u.User = url.User("REDACTED")
	}
	if u.RawQuery != "" {
		q := u.Query()
		for k := range q {
			q[k] = []string{"REDACTED"}
		}
		u.RawQuery = q.Encode()
	}
	return u.String()
}

// retentionCovers says what the ledger's retention must outlive for a
// pipeline: its redelivery horizon, and the stream's max age when set.
func retentionCovers(c *Config, p *Pipeline) string {
	s := fmt.Sprintf("retention %s, redelivery horizon %s", formatDuration(c.Ledger.Retention), formatDuration(c.RedeliveryHorizon(p)))
	if c.Stream.MaxAge > 0 {
		s += ", stream max age " + formatDuration(c.Stream.MaxAge)
	}
	return s
}
