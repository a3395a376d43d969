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
	leaseMoves   *prometheus.CounterVec
	leaseLate    *prometheus.HistogramVec
	lastBeat     atomic.Int64 // unix nanoseconds
}

// The kinds of lease move the lease metrics count (label move).
const (
	// MoveStart: pending -> active at start_time.
	MoveStart = "start"
	// MoveEnd: active -> ended at end_time.
	MoveEnd = "end"
	// MoveEnding: lease.ending sent, conductor.lease_ending_notice before
	// end_time.
	MoveEnding = "ending"
	// MoveReplace: one booked node replaced (failed before the start, or
	// refused by the backend at the start).
	MoveReplace = "replace"
	// MoveError: active -> error at end_time (in front of Ironic, nodes
	// that could not be undeployed).
	MoveError = "error"
)

// NewMetrics creates the conductor metrics and registers them with reg:
//
//   - metalloc_conductor_allocations_finished_total{state="active"|"error"}
//   - metalloc_conductor_post_to_active_seconds (histogram, from the row's
//     created_at to its reservation)
//   - metalloc_conductor_claim_batch_size (histogram, rows per claim)
//   - metalloc_conductor_takeovers_total (rows taken from dead conductors)
//   - metalloc_conductor_heartbeat_age_seconds (gauge: time since the last
//     heartbeat this conductor wrote; registration counts as one)
//   - metalloc_conductor_lease_moves_total{move="start"|"end"|"ending"|"replace"|"error"}
//     (lease moves this conductor made, counted once committed; replace
//     counts nodes)
//   - metalloc_conductor_lease_lateness_seconds{move="start"|"end"|"error"}
//     (histogram: by the database clock, the time of the move's statement
//     minus the lease's start_time, or end_time for end and error)
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
		leaseMoves: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "metalloc_conductor_lease_moves_total",
			Help: "Lease moves this conductor made, by kind (start, end, ending notice, node replaced, error).",
		}, []string{"move"}),
		leaseLate: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "metalloc_conductor_lease_lateness_seconds",
			Help: "By the database clock, how long after its start_time (end_time for end and error) a lease was moved.",
			// Under a second when all is well (leasePoll 200 ms); minutes
			// in front of Ironic, whose end waits for the undeploys.
			Buckets: []float64{.05, .1, .2, .3, .5, .75, 1, 1.5, 2, 3, 5, 10, 30, 60, 300, 1800},
		}, []string{"move"}),
	}
	m.lastBeat.Store(time.Now().UnixNano())
	age := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "metalloc_conductor_heartbeat_age_seconds",
		Help: "Seconds since this conductor last wrote its heartbeat (registration counts).",
	}, func() float64 { return time.Since(time.Unix(0, m.lastBeat.Load())).Seconds() })
	m.finished.WithLabelValues("active")
	m.finished.WithLabelValues("error")
	for _, k := range []string{MoveStart, MoveEnd, MoveEnding, MoveReplace, MoveError} {
		m.leaseMoves.WithLabelValues(k)
	}
	reg.MustRegister(m.finished, m.postToActive, m.claimBatch, m.takeovers, m.leaseMoves, m.leaseLate, age)
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

// leaseMoved counts n lease moves of kind move.
func (m *Metrics) leaseMoved(move string, n int) {
	if m != nil && n > 0 {
		m.leaseMoves.WithLabelValues(move).Add(float64(n))
	}
}

// leaseLateness records how late (seconds, by the database clock) a
// lease's move of kind move was, and counts the move.
func (m *Metrics) leaseLateness(move string, seconds float64) {
	if m != nil {
		m.leaseMoves.WithLabelValues(move).Inc()
		m.leaseLate.WithLabelValues(move).Observe(seconds)
	}
}
