package ops

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/oncegate/oncegate/internal/outcome"
)

func (m *Metrics) registerRedrive() {
	m.redriven = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: namespace, Name: "redriven_total",
		Help: "Dead letters a person redrove (republished after clearing the intent's failure), by the reason they were dead-lettered for.",
	}, []string{"pipeline", "reason"})
	m.reg.MustRegister(m.redriven)
}

// addRedrive creates the pipeline's redrive series for every reason, at 0.
func (m *Metrics) addRedrive(pipeline string) {
	for _, r := range outcome.Reasons {
		m.redriven.WithLabelValues(pipeline, string(r))
	}
}

// Redriven counts a dead letter of reason r redriven.
func (m *Metrics) Redriven(pipeline string, r outcome.Reason) {
	if m == nil {
		return
	}
	m.redriven.WithLabelValues(pipeline, label(r, outcome.Reasons)).Inc()
}
