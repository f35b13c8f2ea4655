package ingress

import (
	"github.com/prometheus/client_golang/prometheus"
)

// Outcome is how the ingress answered one request; each is a value of
// the outcome label of oncegate_ingress_requests_total.
type Outcome string

// The outcomes, with the status each is answered with.
const (
	OutcomeStored        Outcome = "stored"         // 200: every trigger is in the stream (some may have been there already)
	OutcomeDuplicate     Outcome = "duplicate"      // 200: every trigger was in the stream already (Nats-Msg-Id)
	OutcomePing          Outcome = "ping"           // 200: a GitHub ping, answered without a trigger
	OutcomeNoSignature   Outcome = "no_signature"   // 401: no signature or credentials
	OutcomeBadSignature  Outcome = "bad_signature"  // 401: the signature does not parse or match
	OutcomeStale         Outcome = "stale"          // 401: a signed timestamp outside the tolerance
	OutcomeTooLarge      Outcome = "too_large"      // 413: the body is over the limit
	OutcomeMethod        Outcome = "method"         // 405: not a POST
	OutcomeContentType   Outcome = "content_type"   // 415: not application/json
	OutcomeUnknownSource Outcome = "unknown_source" // 404: no such source
	OutcomeBadRequest    Outcome = "bad_request"    // 400: not a JSON object or array, no delivery id, a body cut short
	OutcomeNoSecret      Outcome = "no_secret"      // 503: the source's secret is not set
	OutcomeUnavailable   Outcome = "unavailable"    // 503: JetStream did not acknowledge in time
	OutcomeBusy          Outcome = "busy"           // 503: the source's in-flight limit is reached
)

var outcomes = []Outcome{OutcomeStored, OutcomeDuplicate, OutcomePing, OutcomeNoSignature, OutcomeBadSignature,
	OutcomeStale, OutcomeTooLarge, OutcomeMethod, OutcomeContentType, OutcomeUnknownSource, OutcomeBadRequest,
	OutcomeNoSecret, OutcomeUnavailable, OutcomeBusy}

// unknownSource is the source label of requests for no configured source,
// so that probing paths costs one series, not one per path.
const unknownSource = "unknown"

// latencyBuckets covers a request from a rejection (tens of microseconds)
// to a PubAck that waits out the publish timeout.
var latencyBuckets = []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10}

// metrics are the ingress's Prometheus collectors.
type metrics struct {
	requests *prometheus.CounterVec
	latency  *prometheus.HistogramVec
	triggers *prometheus.CounterVec
	inflight *prometheus.GaugeVec
}

func newMetrics(reg prometheus.Registerer, sources []string) (*metrics, error) {
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "oncegate", Subsystem: "ingress", Name: "requests_total",
			Help: "Webhook requests answered, by source and outcome (stored, duplicate, ping, or why it was refused).",
		}, []string{"source", "outcome"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: "oncegate", Subsystem: "ingress", Name: "request_duration_seconds",
			Help:    "Time from a webhook request's headers to its answer, PubAck wait included, by source.",
			Buckets: latencyBuckets,
		}, []string{"source"}),
		triggers: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "oncegate", Subsystem: "ingress", Name: "triggers_total",
			Help: "Triggers published by the ingress, by source and result (stored, or duplicate: the stream had its Nats-Msg-Id).",
		}, []string{"source", "result"}),
		inflight: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: "oncegate", Subsystem: "ingress", Name: "in_flight",
			Help: "Webhook requests being worked on, by source.",
		}, []string{"source"}),
	}
	// Every series exists from the start, so a rate() over a restart or
	// an alert on a reason that has not happened yet works.
	for _, s := range append(sources, unknownSource) {
		for _, o := range outcomes {
			m.requests.WithLabelValues(s, string(o))
		}
		if s == unknownSource {
			continue
		}
		m.latency.WithLabelValues(s)
		m.triggers.WithLabelValues(s, "stored")
		m.triggers.WithLabelValues(s, "duplicate")
		m.inflight.WithLabelValues(s)
	}
	if reg != nil {
		for _, c := range []prometheus.Collector{m.requests, m.latency, m.triggers, m.inflight} {
			if err := reg.Register(c); err != nil {
				return nil, err
			}
		}
	}
	return m, nil
}
