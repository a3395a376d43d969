package cli

import (
	"context"
	"errors"
	"net/http"
	"time"

	"go.uber.org/zap"

	"github.com/metalloc/metalloc/buildinfo"
	"github.com/metalloc/metalloc/web"
)

// shutdownTimeout bounds how long a stopping HTTP daemon waits for the
// requests in flight.
const shutdownTimeout = 10 * time.Second

// HTTP is what Service.ServeHTTP serves: the daemon's handler on its
// listener.
type HTTP struct {
	// Server is the listener's configuration (address, TLS, timeouts).
	Server web.ServerConfig
	// Handler is the API, behind /healthz and /readyz (web.Health, with the
	// service's DatabaseCheck).
	Handler http.Handler
	// Malformed renders the answers to requests net/http refuses before
	// routing in the API's own error format (web.IronicMalformed,
	// web.PlacementMalformed).
	Malformed web.MalformedRenderer
	// Stopping, when set, runs at the stop signal before the server shuts
	// down (metalloc-api: open waits answer now).
	Stopping func()
}

// ServeHTTP serves h until the service's Ctx ends (SIGINT or SIGTERM), then
// shuts the server down gracefully within shutdownTimeout. It tells
// systemd (Type=notify) READY=1 once the socket is bound, STOPPING=1 at the
// stop signal, WATCHDOG=1 when the unit asks for it, and logs "<name>
// listening" with the address.
func (s *Service) ServeHTTP(h HTTP) error {
	sd := StartSystemd(s.Ctx, s.Log)
	defer sd.Close()
	// /healthz and /readyz answer before routing and authentication.
	srv, err := web.NewServer(h.Server, web.Health(h.Handler, s.DatabaseCheck()))
	if err != nil {
		return err
	}
	srv.Malformed = h.Malformed
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve() }()
	s.Log.Info(s.name+" listening", zap.String("listen", srv.Addr()), zap.Bool("tls", h.Server.TLS()),
		zap.String("version", buildinfo.Get().Version))
	sd.Ready()
	select {
	case err := <-errc:
		return err
	case <-s.Ctx.Done():
	}
	s.Log.Info("shutting down")
	if h.Stopping != nil {
		h.Stopping()
	}
	sctx, cancel := context.WithTimeout(context.Background(), shutdownTimeout)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
