package conductor

import (
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are a conductor's Prometheus metrics (served on its own listener
// by metalloc-conductor, see conductor.metrics_listen). Create with
// NewMetrics; a nil *Metrics records nothing.
type Metrics struct {
	finished     *prometheus.CounterVec
	postToActive prometheus.Histogram
	claimBatch   prometheus.Histogram
	takeovers    prometheus.Counter
	lastBeat     atomic.Int64 // unix nanoseconds
}

// NewMetrics creates the conductor metrics and registers them with reg:
//
//   - metalloc_conductor_allocations_finished_total{state="active"|"error"}
//   - metalloc_conductor_post_to_active_seconds (histogram, from the row's
//     created_at to its reservation)
//   - metalloc_conductor_claim_batch_size (histogram, rows per claim)
//   - metalloc_conductor_takeovers_total (rows taken from dead conductors)
//   - metalloc_conductor_heartbeat_age_seconds (gauge: time since the last
//     heartbeat this conductor wrote; registration counts as one)
//
// It panics if the names are already registered with reg (as
// prometheus.MustRegister).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		finished: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "metalloc_conductor_allocations_finished_total",
			Help: "Allocations this conductor finished, by final state (active or error).",
		}, []string{"state"}),
		postToActive: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "metalloc_conductor_post_to_active_seconds",
			Help:    "Time from an allocation's creation (its POST) to its node being reserved.",
			Buckets: []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60},
		}),
		claimBatch: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "metalloc_conductor_claim_batch_size",
			Help:    "Rows taken by one claim query (0 when it found nothing).",
			Buckets: []float64{0, 1, 2, 4, 8, 16, 32, 64},
		}),
		takeovers: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "metalloc_conductor_takeovers_total",
			Help: "Allocating rows this conductor took over from dead conductors.",
		}),
	}
	m.lastBeat.Store(time.Now().UnixNano())
	age := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "metalloc_conductor_heartbeat_age_seconds",
		Help: "Seconds since this conductor last wrote its heartbeat (registration counts).",
	}, func() float64 { return time.Since(time.Unix(0, m.lastBeat.Load())).Seconds() })
	m.finished.WithLabelValues("active")
	m.finished.WithLabelValues("error")
	reg.MustRegister(m.finished, m.postToActive, m.claimBatch, m.takeovers, age)
	return m
}

func (m *Metrics) reserved(created time.Time) {
	if m == nil {
		return
	}
	m.finished.WithLabelValues("active").Inc()
	m.postToActive.Observe(time.Since(created).Seconds())
}

func (m *Metrics) failed() {
	if m != nil {
		m.finished.WithLabelValues("error").Inc()
	}
}

func (m *Metrics) claimed(n int) {
	if m != nil {
		m.claimBatch.Observe(float64(n))
	}
}

func (m *Metrics) tookOver() {
	if m != nil {
		m.takeovers.Inc()
	}
}

func (m *Metrics) heartbeat() {
	if m != nil {
		m.lastBeat.Store(time.Now().UnixNano())
	}
}
