package backend

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// IronicMetrics are the Ironic backend's Prometheus metrics
// (Ironic.Metrics); a nil *IronicMetrics records nothing.
type IronicMetrics struct {
	requests *prometheus.CounterVec
	latency  *prometheus.HistogramVec
	settle   prometheus.Histogram
	refused  prometheus.Counter
	down     prometheus.Gauge
	// The adaptive limit (ironic_limit.go).
	limit    prometheus.Gauge
	inFlight prometheus.Gauge
	waiting  prometheus.Gauge
	baseline prometheus.Gauge
	queue    prometheus.Gauge
	capped   prometheus.Gauge
	confirm  prometheus.Histogram
	inIronic prometheus.Histogram
}

// NewIronicMetrics creates the metrics and registers them with reg:
//
//   - metalloc_ironic_allocation_requests_total{request="create"|"get"|"delete"}
//     (requests this conductor sent to Ironic for allocations; per
//     allocation made, about one create and one get when all goes well)
//   - metalloc_ironic_request_seconds{request="create"|"get"|"delete"}
//     (histogram: each of those requests from sending it to Ironic's
//     answer, a wait for the in-flight cap not included)
//   - metalloc_ironic_allocation_settle_seconds (histogram: Ironic's
//     answer to the creation to the allocation seen settled there)
//   - metalloc_ironic_nodes_refused_total (nodes Ironic refused for an
//     allocation, marked unavailable until Ironic is read again)
//   - metalloc_ironic_unavailable (1 while this conductor finds Ironic
//     unreachable and claims nothing)
//   - metalloc_ironic_allocation_limit (this conductor's limit on
//     allocations in flight in Ironic, at most ironic.max_in_flight;
//     ironic_limit.go)
//   - metalloc_ironic_allocations_in_flight, metalloc_ironic_allocations_waiting
//     (allocations of this conductor in Ironic now, from their POST to
//     seeing them settled; those waiting for the limit)
//   - metalloc_ironic_allocation_confirm_seconds (histogram: the limit's
//     latency sample, from sending the POST to the read that finds the
//     allocation settled) and metalloc_ironic_allocation_baseline_seconds
//     (the sample without a queue it is compared with)
//   - metalloc_ironic_allocation_queue (the last window's estimate of
//     this conductor's allocations waiting in Ironic beyond its time
//     without a queue, which the limit keeps between 1 and 3)
//   - metalloc_ironic_allocation_limit_cap (the cap the probes set on
//     the limit's growth when halving what was in flight cost Ironic
//     less than 15 % of its rate; 0 when none)
//   - metalloc_ironic_allocation_in_ironic_seconds (histogram: Ironic's
//     own settle time, its updated_at minus its created_at, of the
//     allocations seen settled; the limit's sample when Ironic's clock
//     gives fractions of a second, as on PostgreSQL)
func NewIronicMetrics(reg prometheus.Registerer) (*IronicMetrics, error) {
	m := &IronicMetrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "metalloc_ironic_allocation_requests_total",
			Help: "Requests this conductor sent to Ironic for allocations, by request (create, get, delete; refresh: a refused node read again).",
		}, []string{"request"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "metalloc_ironic_request_seconds",
			Help:    "Time from sending a request for an allocation (create, get, delete, refresh) to Ironic to its answer.",
			Buckets: []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10},
		}, []string{"request"}),
		settle: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "metalloc_ironic_allocation_settle_seconds",
			Help:    "Time from Ironic's answer to an allocation's creation to seeing it settled (active or error) there.",
			Buckets: []float64{.01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30},
		}),
		refused: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "metalloc_ironic_nodes_refused_total",
			Help: "Nodes Ironic refused for an allocation this conductor made there (each read again from Ironic at once).",
		}),
		down: gauge("metalloc_ironic_unavailable",
			"1 while this conductor finds Ironic unreachable (allocations wait, nothing is claimed), else 0."),
		limit: gauge("metalloc_ironic_allocation_limit",
			"This conductor's adaptive limit on its allocations in flight in Ironic (POST sent, not yet seen settled); at most ironic.max_in_flight."),
		inFlight: gauge("metalloc_ironic_allocations_in_flight",
			"This conductor's allocations in flight in Ironic: POST sent, not yet seen settled."),
		waiting: gauge("metalloc_ironic_allocations_waiting",
			"This conductor's allocations waiting for the limit before their POST to Ironic."),
		baseline: gauge("metalloc_ironic_allocation_baseline_seconds",
			"The limit's latency sample without a queue (Ironic's own settle time, or the confirm latency when Ironic's clock keeps whole seconds): the least window mean of the recent windows (0 before the first, or with a fixed limit)."),
		queue: gauge("metalloc_ironic_allocation_queue",
			"The last window's estimate (Little's law) of this conductor's allocations waiting in Ironic beyond its time without a queue; the adaptive limit keeps it between 1 and 3 (0 with a fixed limit)."),
		capped: gauge("metalloc_ironic_allocation_limit_cap",
			"The cap the limit's probes set on its growth once halving what was in flight cost Ironic less than 15 % of its rate (all conductors probe at once); raised by a quarter at each probe that shows a gain; 0 when none."),
		confirm: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "metalloc_ironic_allocation_confirm_seconds",
			Help:    "Time from sending an allocation's POST to Ironic to the read that finds it settled (active or error) there: the limit's latency sample when Ironic's timestamps keep whole seconds.",
			Buckets: []float64{.025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30},
		}),
		inIronic: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "metalloc_ironic_allocation_in_ironic_seconds",
			Help:    "Ironic's own time from creating an allocation to settling it (its updated_at minus its created_at): the limit's latency sample when Ironic's timestamps have fractions of a second.",
			Buckets: []float64{.01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30},
		}),
	}
	for _, r := range []string{"create", "get", "delete"} {
		m.requests.WithLabelValues(r)
		m.latency.WithLabelValues(r)
	}
	for _, c := range []prometheus.Collector{m.requests, m.latency, m.settle, m.refused, m.down,
		m.limit, m.inFlight, m.waiting, m.baseline, m.queue, m.capped, m.confirm, m.inIronic} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

func (m *IronicMetrics) request(kind string) {
	if m != nil {
		m.requests.WithLabelValues(kind).Inc()
	}
}

func (m *IronicMetrics) answered(kind string, d time.Duration) {
	if m != nil {
		m.latency.WithLabelValues(kind).Observe(d.Seconds())
	}
}

func (m *IronicMetrics) settled(d time.Duration) {
	if m != nil {
		m.settle.Observe(d.Seconds())
	}
}

func (m *IronicMetrics) nodeRefused() {
	if m != nil {
		m.refused.Inc()
	}
}

func (m *IronicMetrics) unavailable(down bool) {
	if m == nil {
		return
	}
	if down {
		m.down.Set(1)
	} else {
		m.down.Set(0)
	}
}

func (m *IronicMetrics) limited(s limitState) {
	if m != nil {
		m.limit.Set(s.limit)
		m.inFlight.Set(float64(s.inFlight))
		m.waiting.Set(float64(s.waiting))
		m.baseline.Set(s.baseline.Seconds())
		m.queue.Set(s.queue)
		m.capped.Set(s.capped)
	}
}

func (m *IronicMetrics) confirmed(d time.Duration) {
	if m != nil {
		m.confirm.Observe(d.Seconds())
	}
}

func (m *IronicMetrics) tookInIronic(d time.Duration) {
	if m != nil {
		m.inIronic.Observe(d.Seconds())
	}
}

// gauge is a gauge of that name and help.
func gauge(name, help string) prometheus.Gauge {
	return prometheus.NewGauge(prometheus.GaugeOpts{Name: name, Help: help})
}
