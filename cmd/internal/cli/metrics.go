package cli

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.uber.org/zap"

	"github.com/metalloc/metalloc/buildinfo"
	"github.com/metalloc/metalloc/db"
	"github.com/metalloc/metalloc/web"
)

// NewRegistry is a daemon's Prometheus registry with the Go runtime,
// process, database pool (pool), metalloc_db_up and metalloc_build_info
// collectors registered.
func NewRegistry(pool *pgxpool.Pool) *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		db.NewPoolCollector(pool, nil), db.NewUpCollector(pool), buildinfo.NewCollector())
	return reg
}

// ServeMetrics serves reg's metrics at /metrics on its own listener,
// srv.Listen (address:port; "off" or "" serves nothing), over TLS when
// srv names a certificate and key, with /healthz and /readyz (running
// checks; see web.Health) beside them. It fails at once when the address cannot
// be bound or the key pair not loaded; the returned stop shuts the server
// down.
func ServeMetrics(cfg web.ServerConfig, reg *prometheus.Registry, log *zap.Logger, checks ...web.Check) (stop func(), err error) {
	if cfg.Listen == "" || strings.EqualFold(cfg.Listen, "off") {
		return func() {}, nil
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
	if cfg.ReadTimeout == 0 {
		cfg.ReadTimeout, cfg.WriteTimeout, cfg.IdleTimeout = 10*time.Second, 30*time.Second, 120*time.Second
	}
	srv, err := web.NewServer(cfg, web.Health(mux, checks...))
	if err != nil {
		return nil, fmt.Errorf("metrics listener: %w (set conductor.metrics_listen to a free address:port, or off)", err)
	}
	go func() {
		if err := srv.Serve(); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Warn("metrics listener stopped", zap.Error(err))
		}
	}()
	log.Info("serving metrics", zap.String("listen", srv.Addr()), zap.Bool("tls", cfg.TLS()))
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
	}, nil
}
