package conductorapi

import (
	"context"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/metalloc/metalloc/db"
)

// collector exports the conductors' liveness; see NewCollector.
type collector struct {
	q                 *Queries
	alive, dead, ages *prometheus.Desc
}

// NewCollector returns a prometheus.Collector reading the conductors table
// at every scrape (one ConductorHeartbeats query within db.ScrapeTimeout;
// nothing is exported when it fails), with liveness as GET /v1/conductors
// judges it (metalloc_conductor_alive: the expiry each conductor writes):
//
//	metalloc_conductors_alive                      online conductors with a fresh heartbeat (gauge)
//	metalloc_conductors_dead                       online conductors whose expiry has passed (gauge)
//	metalloc_conductors_heartbeat_age_seconds{hostname}  seconds since each online conductor's heartbeat, by the database clock
//
// Unlike each conductor's own metalloc_conductor_heartbeat_age_seconds,
// these survive the conductor: a hung or killed conductor shows here as a
// growing age, then dead. metalloc-api registers it.
func NewCollector(db DBTX) prometheus.Collector {
	return &collector{q: New(db),
		alive: prometheus.NewDesc("metalloc_conductors_alive",
			"Online conductors whose expiry (last heartbeat plus their conductor.heartbeat_timeout) has not passed.", nil, nil),
		dead: prometheus.NewDesc("metalloc_conductors_dead",
			"Online conductors whose expiry has passed (their rows get taken over).", nil, nil),
		ages: prometheus.NewDesc("metalloc_conductors_heartbeat_age_seconds",
			"Seconds since each online conductor's last heartbeat, by the database clock.", []string{"hostname"}, nil),
	}
}

// Describe implements prometheus.Collector.
func (c *collector) Describe(ch chan<- *prometheus.Desc) { ch <- c.alive; ch <- c.dead; ch <- c.ages }

// Collect implements prometheus.Collector.
func (c *collector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), db.ScrapeTimeout)
	defer cancel()
	rows, err := c.q.ConductorHeartbeats(ctx)
	if err != nil {
		return // metalloc_db_up says why
	}
	alive := 0
	for _, r := range rows {
		if r.Alive {
			alive++
		}
		ch <- prometheus.MustNewConstMetric(c.ages, prometheus.GaugeValue, r.AgeSeconds, r.Hostname)
	}
	ch <- prometheus.MustNewConstMetric(c.alive, prometheus.GaugeValue, float64(alive))
	ch <- prometheus.MustNewConstMetric(c.dead, prometheus.GaugeValue, float64(len(rows)-alive))
}
