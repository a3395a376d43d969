package allocation

import (
	"context"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/metalloc/metalloc/db"
)

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
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "metalloc_allocation_cache_hits_total",
			Help: "Reads of an allocation by uuid (GET, Prefer: wait) answered from the API's cache.",
		}, func() float64 { h, _ := hub.CacheStats(); return float64(h) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "metalloc_allocation_cache_misses_total",
			Help: "Reads of an allocation by uuid (GET, Prefer: wait) that went to the database.",
		}, func() float64 { _, m := hub.CacheStats(); return float64(m) }),
	} {
		if err := reg.Register(g); err != nil {
			return err
		}
	}
	return nil
}

// queueCollector exports the allocating queue; see NewQueueCollector.
type queueCollector struct {
	q                  *Queries
	allocating, oldest *prometheus.Desc
}

// NewQueueCollector returns a prometheus.Collector that counts, at every
// scrape (one AllocatingStats query within db.ScrapeTimeout; nothing is
// exported when it fails), the queue of allocations the conductors have
// not finished:
//
//	metalloc_allocations_allocating                 rows in state allocating (gauge)
//	metalloc_allocations_oldest_allocating_seconds  age of the oldest of them, 0 when none (gauge)
//
// metalloc-api registers it; with several API replicas every one reports
// the same numbers (aggregate with max).
func NewQueueCollector(db DBTX) prometheus.Collector {
	return &queueCollector{q: New(db),
		allocating: prometheus.NewDesc("metalloc_allocations_allocating",
			"Allocations waiting in state allocating (the conductors' queue).", nil, nil),
		oldest: prometheus.NewDesc("metalloc_allocations_oldest_allocating_seconds",
			"Age of the oldest allocation in state allocating, by the database clock (0 when none).", nil, nil),
	}
}

// Describe implements prometheus.Collector.
func (c *queueCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.allocating; ch <- c.oldest }

// Collect implements prometheus.Collector.
func (c *queueCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), db.ScrapeTimeout)
	defer cancel()
	s, err := c.q.AllocatingStats(ctx)
	if err != nil {
		return // metalloc_db_up says why
	}
	ch <- prometheus.MustNewConstMetric(c.allocating, prometheus.GaugeValue, float64(s.Allocating))
	ch <- prometheus.MustNewConstMetric(c.oldest, prometheus.GaugeValue, s.OldestSeconds)
}
