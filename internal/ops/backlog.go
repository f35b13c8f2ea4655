package ops

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// OtherSubject is the subject label of the unrouted triggers counted past
// the bound on distinct subjects (see [Metrics.Unrouted]).
const OtherSubject = "other"

// backlogMetrics are each pipeline's backlog on the trigger stream, and
// the triggers on subjects no pipeline reads. They are set by a poller
// (internal/streamwatch), not by the consumer's hot path.
type backlogMetrics struct {
	pending    *prometheus.GaugeVec   // pipeline
	ackPending *prometheus.GaugeVec   // pipeline
	oldest     *prometheus.GaugeVec   // pipeline
	maxAge     *prometheus.GaugeVec   // pipeline
	unrouted   *prometheus.CounterVec // subject
}

func (m *Metrics) registerBacklog() {
	gauge := func(name, help string) *prometheus.GaugeVec {
		return prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: namespace, Name: name, Help: help}, []string{"pipeline"})
	}
	m.bl = backlogMetrics{
		pending: gauge("backlog_pending",
			"Triggers on the pipeline's subject not yet delivered to it: its durable consumer's pending count."),
		ackPending: gauge("backlog_ack_pending",
			"Triggers delivered to the pipeline and not yet acknowledged: its durable consumer's ack-pending count."),
		oldest: gauge("backlog_oldest_age_seconds",
			"Age of the pipeline's oldest trigger not yet acknowledged (delivered or not), 0 when there is none."),
		maxAge: gauge("backlog_max_age_seconds",
			"The trigger stream's max_age: a trigger older than this is removed, read or not; 0 when there is no limit."),
		unrouted: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Name: "unrouted_total",
			Help: "Triggers found on the trigger stream on subjects no pipeline reads, by subject (past a bound on distinct subjects, \"other\"). They stay until max_age, unread.",
		}, []string{"subject"}),
	}
	m.reg.MustRegister(m.bl.pending, m.bl.ackPending, m.bl.oldest, m.bl.maxAge, m.bl.unrouted)
}

// addBacklog creates the pipeline's backlog series at 0.
func (m *Metrics) addBacklog(pipeline string) {
	m.bl.pending.WithLabelValues(pipeline)
	m.bl.ackPending.WithLabelValues(pipeline)
	m.bl.oldest.WithLabelValues(pipeline)
	m.bl.maxAge.WithLabelValues(pipeline)
}

// Backlog is one pipeline's backlog, as its durable consumer and the
// trigger stream report it.
type Backlog struct {
	Pending    uint64        // not yet delivered
	AckPending int           // delivered, not yet acknowledged
	Oldest     time.Duration // the oldest trigger not yet acknowledged; 0 when none
	MaxAge     time.Duration // the trigger stream's max_age; 0 when none
}

// SetBacklog records the pipeline's backlog.
func (m *Metrics) SetBacklog(pipeline string, b Backlog) {
	if m == nil {
		return
	}
	m.bl.pending.WithLabelValues(pipeline).Set(float64(b.Pending))
	m.bl.ackPending.WithLabelValues(pipeline).Set(float64(b.AckPending))
	m.bl.oldest.WithLabelValues(pipeline).Set(b.Oldest.Seconds())
	m.bl.maxAge.WithLabelValues(pipeline).Set(b.MaxAge.Seconds())
}

// Unrouted counts n triggers found on subject, which no pipeline reads.
// The caller bounds the distinct subjects it passes, sending the rest as
// [OtherSubject].
func (m *Metrics) Unrouted(subject string, n int) {
	if m == nil || n <= 0 {
		return
	}
	m.bl.unrouted.WithLabelValues(subject).Add(float64(n))
}
