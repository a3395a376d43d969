package db

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
)

// poolCollector exports pgxpool.Stat; see NewPoolCollector.
type poolCollector struct {
	pool *pgxpool.Pool

	total, idle, acquired, constructing, max               *prometheus.Desc
	acquires, acquireSeconds, emptyAcquires, emptyWait     *prometheus.Desc
	canceledAcquires, newConns, lifetimeClosed, idleClosed *prometheus.Desc
}

// NewPoolCollector returns a prometheus.Collector that reads pool.Stat() at
// every scrape and exports it as the metrics below, each carrying
// constLabels (may be nil). Register it once per pool on a registry of the
// caller's choice, e.g. reg.MustRegister(db.NewPoolCollector(pool, nil));
// two pools on one registry need constLabels that tell them apart (say
// prometheus.Labels{"pool": "listen"}), or registration fails as a
// duplicate.
//
// Gauges (current values):
//
//	metalloc_db_pool_connections               open connections (idle + acquired + constructing)
//	metalloc_db_pool_idle_connections          connections waiting in the pool
//	metalloc_db_pool_acquired_connections      connections in use
//	metalloc_db_pool_constructing_connections  connections being opened
//	metalloc_db_pool_max_connections           the pool's size limit (PoolOptions.MaxConns)
//
// Counters (since the pool was opened):
//
//	metalloc_db_pool_acquires_total                    successful acquires
//	metalloc_db_pool_acquire_wait_seconds_total        time spent in successful acquires
//	metalloc_db_pool_empty_acquires_total              successful acquires that had to wait because no connection was idle
//	metalloc_db_pool_empty_acquire_wait_seconds_total  time those waited
//	metalloc_db_pool_canceled_acquires_total           acquires that gave up: caller's context ended or PoolOptions.AcquireTimeout expired
//	metalloc_db_pool_new_connections_total             connections opened
//	metalloc_db_pool_lifetime_closed_connections_total connections closed for exceeding their maximum lifetime
//	metalloc_db_pool_idle_closed_connections_total     connections closed for idling too long
//
// The average wait per acquire is acquire_wait_seconds_total /
// acquires_total over the same interval; a rising canceled count with the
// database up means the pool is too small for the load.
func NewPoolCollector(pool *pgxpool.Pool, constLabels prometheus.Labels) prometheus.Collector {
	d := func(name, help string) *prometheus.Desc {
		return prometheus.NewDesc("metalloc_db_pool_"+name, help, nil, constLabels)
	}
	return &poolCollector{
		pool:             pool,
		total:            d("connections", "Open database connections: idle, acquired and being opened."),
		idle:             d("idle_connections", "Idle database connections in the pool."),
		acquired:         d("acquired_connections", "Database connections currently in use."),
		constructing:     d("constructing_connections", "Database connections being opened."),
		max:              d("max_connections", "Maximum size of the database pool."),
		acquires:         d("acquires_total", "Successful acquires of a database connection."),
		acquireSeconds:   d("acquire_wait_seconds_total", "Total time spent in successful acquires of a database connection."),
		emptyAcquires:    d("empty_acquires_total", "Successful acquires that waited because no connection was idle."),
		emptyWait:        d("empty_acquire_wait_seconds_total", "Total time acquires waited because no connection was idle."),
		canceledAcquires: d("canceled_acquires_total", "Acquires that gave up: the caller's context ended or the acquire timeout expired."),
		newConns:         d("new_connections_total", "Database connections opened."),
		lifetimeClosed:   d("lifetime_closed_connections_total", "Database connections closed for exceeding their maximum lifetime."),
		idleClosed:       d("idle_closed_connections_total", "Database connections closed for idling too long."),
	}
}

func (c *poolCollector) descs() []*prometheus.Desc {
	return []*prometheus.Desc{c.total, c.idle, c.acquired, c.constructing, c.max,
		c.acquires, c.acquireSeconds, c.emptyAcquires, c.emptyWait,
		c.canceledAcquires, c.newConns, c.lifetimeClosed, c.idleClosed}
}

// Describe implements prometheus.Collector.
func (c *poolCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range c.descs() {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *poolCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.pool.Stat()
	gauge := func(d *prometheus.Desc, v int32) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, float64(v))
	}
	counter := func(d *prometheus.Desc, v float64) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, v)
	}
	gauge(c.total, s.TotalConns())
	gauge(c.idle, s.IdleConns())
	gauge(c.acquired, s.AcquiredConns())
	gauge(c.constructing, s.ConstructingConns())
	gauge(c.max, s.MaxConns())
	counter(c.acquires, float64(s.AcquireCount()))
	counter(c.acquireSeconds, s.AcquireDuration().Seconds())
	counter(c.emptyAcquires, float64(s.EmptyAcquireCount()))
	counter(c.emptyWait, s.EmptyAcquireWaitTime().Seconds())
	counter(c.canceledAcquires, float64(s.CanceledAcquireCount()))
	counter(c.newConns, float64(s.NewConnsCount()))
	counter(c.lifetimeClosed, float64(s.MaxLifetimeDestroyCount()))
	counter(c.idleClosed, float64(s.MaxIdleDestroyCount()))
}

// ScrapeTimeout bounds the queries collectors run at a scrape, so that a
// database that stopped answering cannot hang /metrics.
const ScrapeTimeout = 2 * time.Second

// upCollector exports metalloc_db_up; see NewUpCollector.
type upCollector struct {
	pool *pgxpool.Pool
	up   *prometheus.Desc
}

// NewUpCollector returns a prometheus.Collector exporting the gauge
// metalloc_db_up: 1 when a SELECT 1 through pool answered within
// ScrapeTimeout at this scrape, 0 otherwise (the database is unreachable,
// or the pool has no connection to give). Every metalloc service registers
// it (its alert: configs/prometheus/alerts.yml, MetallocDatabaseUnreachable).
func NewUpCollector(pool *pgxpool.Pool) prometheus.Collector {
	return &upCollector{pool: pool, up: prometheus.NewDesc("metalloc_db_up",
		"1 when the database answered a SELECT 1 at this scrape (within 2 s), 0 otherwise.", nil, nil)}
}

// Describe implements prometheus.Collector.
func (c *upCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.up }

// Collect implements prometheus.Collector.
func (c *upCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), ScrapeTimeout)
	defer cancel()
	v := 1.0
	if _, err := c.pool.Exec(ctx, "SELECT 1"); err != nil {
		v = 0
	}
	ch <- prometheus.MustNewConstMetric(c.up, prometheus.GaugeValue, v)
}
