package ops_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"sort"
	"strings"
	"testing"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/oncegate/oncegate/internal/ops"
)

// client opens a connection per request, so no idle connection (and no
// transport goroutine) outlives a test.
var client = &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}

// startServer starts an ops server on a free loopback port and shuts it
// down when the test ends. It returns the base URL.
func startServer(t *testing.T, m *ops.Metrics, ready func() error, logger *slog.Logger) string {
	t.Helper()
	s := ops.NewServer("127.0.0.1:0", m, ready, logger)
	addr, err := s.Start()
	if err != nil {
		t.Fatalf("Start() error = %v", err)
	}
	t.Cleanup(func() {
		if err := s.Shutdown(context.Background()); err != nil {
			t.Errorf("Shutdown() error = %v", err)
		}
	})
	return "http://" + addr
}

// get requests url and returns the status, the Content-Type and the body.
func get(t *testing.T, method, url string) (int, string, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: reading body: %v", method, url, err)
	}
	return resp.StatusCode, resp.Header.Get("Content-Type"), string(b)
}

// scrape fetches base/metrics over HTTP and parses the text format.
func scrape(t *testing.T, base string) families {
	t.Helper()
	code, ctype, body := get(t, http.MethodGet, base+"/metrics")
	if code != http.StatusOK {
		t.Fatalf("GET /metrics = %d %q; want 200", code, body)
	}
	if !strings.HasPrefix(ctype, "text/plain") {
		t.Fatalf("GET /metrics Content-Type = %q; want text/plain", ctype)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(strings.NewReader(body))
	if err != nil {
		t.Fatalf("parsing /metrics: %v\n%s", err, body)
	}
	return fams
}

type families map[string]*dto.MetricFamily

// labels is a series' label set, written "k=v,k=v" in sorted order.
type labels map[string]string

func (l labels) String() string {
	var parts []string
	for k, v := range l {
		parts = append(parts, k+"="+v)
	}
	sort.Strings(parts)
	return strings.Join(parts, ",")
}

// series returns the family's metric whose labels are exactly l.
func (f families) series(name string, l labels) (*dto.Metric, bool) {
	fam, ok := f[name]
	if !ok {
		return nil, false
	}
	for _, m := range fam.GetMetric() {
		got := labels{}
		for _, lp := range m.GetLabel() {
			got[lp.GetName()] = lp.GetValue()
		}
		if got.String() == l.String() {
			return m, true
		}
	}
	return nil, false
}

// value returns a counter's or gauge's value, or a histogram's sample
// count.
func (f families) value(t *testing.T, name string, l labels) float64 {
	t.Helper()
	m, ok := f.series(name, l)
	if !ok {
		t.Fatalf("no series %s{%s}", name, l)
	}
	switch f[name].GetType() {
	case dto.MetricType_COUNTER:
		return m.GetCounter().GetValue()
	case dto.MetricType_GAUGE:
		return m.GetGauge().GetValue()
	case dto.MetricType_HISTOGRAM:
		return float64(m.GetHistogram().GetSampleCount())
	}
	t.Fatalf("%s has type %v", name, f[name].GetType())
	return 0
}

// count returns how many series of the family have label k = v.
func (f families) count(name, k, v string) int {
	n := 0
	for _, m := range f[name].GetMetric() {
		for _, lp := range m.GetLabel() {
			if lp.GetName() == k && lp.GetValue() == v {
				n++
			}
		}
	}
	return n
}

func discardLogger() *slog.Logger { return slog.New(slog.DiscardHandler) }

func slogTo(w io.Writer) *slog.Logger { return slog.New(slog.NewTextHandler(w, nil)) }
