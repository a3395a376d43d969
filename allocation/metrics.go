package allocation

import "github.com/prometheus/client_golang/prometheus"

// NewCreatedCounter registers on reg and returns the counter
// metalloc_allocations_created_total: allocations POST /v1/allocations
// created (answered 201), including backfilled ones (Ironic 1.58), which are
// created active. Set it as HandlerOptions.Created. It returns reg's error if
// the counter is already registered there.
func NewCreatedCounter(reg prometheus.Registerer) (prometheus.Counter, error) {
	c := prometheus.NewCounter(prometheus.CounterOpts{
		Name: "metalloc_allocations_created_total",
		Help: "Allocations created through POST /v1/allocations (answered 201).",
	})
	if err := reg.Register(c); err != nil {
		return nil, err
	}
	return c, nil
}

// RegisterHubMetrics registers the gauges of hub on reg:
// metalloc_allocation_waiters (open Prefer: wait requests) and
// metalloc_allocation_event_streams (open GET /v1/allocations/events).
func RegisterHubMetrics(reg prometheus.Registerer, hub *Hub) error {
	for _, g := range []prometheus.Collector{
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "metalloc_allocation_waiters",
			Help: "Requests waiting for an allocation to leave allocating (Prefer: wait).",
		}, func() float64 { return float64(hub.Waiters()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "metalloc_allocation_event_streams",
			Help: "Open allocation event streams (GET /v1/allocations/events).",
		}, func() float64 { return float64(hub.Streams()) }),
	} {
		if err := reg.Register(g); err != nil {
			return err
		}
	}
	return nil
}
