package cli

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.uber.org/zap"
)

// ServeMetrics serves reg's metrics at /metrics on its own listener at
// listen (address:port; "off" or "" serves nothing). It fails at once when
// the address cannot be bound; the returned stop shuts the server down.
func ServeMetrics(listen string, reg *prometheus.Registry, log *zap.Logger) (stop func(), err error) {
	if listen == "" || strings.EqualFold(listen, "off") {
		return func() {}, nil
	}
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return nil, fmt.Errorf("metrics listener: %w (set conductor.metrics_listen to a free address:port, or off)", err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Warn("metrics listener stopped", zap.Error(err))
		}
	}()
	log.Info("serving metrics", zap.String("listen", ln.Addr().String()))
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
	}, nil
}
