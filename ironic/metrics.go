package ironic

import (
	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the Prometheus metrics of metalloc in front of Ironic: the
// conductors' node sync (Syncer.Metrics) and metalloc-api's refreshes
// after proxied changes (Front.Metrics). Proxied requests themselves are
// in metalloc_http_requests_total with route="ironic:proxy". A nil
// *Metrics records nothing.
type Metrics struct {
	syncs     *prometheus.CounterVec
	duration  prometheus.Histogram
	nodes     prometheus.Gauge
	lastSync  prometheus.Gauge
	held      prometheus.Gauge
	refreshes *prometheus.CounterVec
}

// NewMetrics creates the metrics and registers them with reg:
//
//   - metalloc_ironic_syncs_total{result="ok"|"failed"|"lost"} (full
//     syncs this conductor ran; lost: another took the lease meanwhile)
//   - metalloc_ironic_sync_duration_seconds (histogram, complete syncs)
//   - metalloc_ironic_sync_nodes (nodes Ironic listed in this conductor's
//     last complete sync)
//   - metalloc_ironic_last_sync_timestamp_seconds (unix time of it)
//   - metalloc_ironic_sync_lease_held (1 while this conductor holds the
//     lease)
//   - metalloc_ironic_refreshes_total{result="ok"|"failed"} (nodes read
//     again after a change metalloc-api proxied)
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		syncs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "metalloc_ironic_syncs_total",
			Help: "Full syncs of Ironic's nodes this conductor ran, by result (ok, failed, lost: the lease went to another conductor).",
		}, []string{"result"}),
		duration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "metalloc_ironic_sync_duration_seconds",
			Help:    "Time a complete full sync of Ironic's nodes took.",
			Buckets: []float64{.05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120, 300},
		}),
		nodes: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "metalloc_ironic_sync_nodes",
			Help: "Nodes Ironic listed in this conductor's last complete full sync.",
		}),
		lastSync: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "metalloc_ironic_last_sync_timestamp_seconds",
			Help: "Unix time of this conductor's last complete full sync of Ironic's nodes.",
		}),
		held: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "metalloc_ironic_sync_lease_held",
			Help: "1 while this conductor holds the Ironic node sync lease, else 0.",
		}),
		refreshes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "metalloc_ironic_refreshes_total",
			Help: "Nodes read again from Ironic after a change metalloc-api proxied, by result (ok, failed).",
		}, []string{"result"}),
	}
	for _, r := range []string{"ok", "failed", "lost"} {
		m.syncs.WithLabelValues(r)
	}
	m.refreshes.WithLabelValues("ok")
	m.refreshes.WithLabelValues("failed")
	for _, c := range []prometheus.Collector{m.syncs, m.duration, m.nodes, m.lastSync, m.held, m.refreshes} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

func (m *Metrics) synced(result string, seconds float64, nodes int, unix float64) {
	if m == nil {
		return
	}
	m.syncs.WithLabelValues(result).Inc()
	if result == "ok" {
		m.duration.Observe(seconds)
		m.nodes.Set(float64(nodes))
		m.lastSync.Set(unix)
	}
}

func (m *Metrics) holding(held bool) {
	if m == nil {
		return
	}
	if held {
		m.held.Set(1)
	} else {
		m.held.Set(0)
	}
}

func (m *Metrics) refreshed(ok bool) {
	if m == nil {
		return
	}
	if ok {
		m.refreshes.WithLabelValues("ok").Inc()
	} else {
		m.refreshes.WithLabelValues("failed").Inc()
	}
}
