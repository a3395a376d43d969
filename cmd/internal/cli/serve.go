package cli

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/metalloc/metalloc/buildinfo"
	"github.com/metalloc/metalloc/db"
	"github.com/metalloc/metalloc/web"
)

// lastAnswers bounds how long a stopping HTTP daemon waits, after its
// shutdown grace, for the answers of the waits Stopping ended (one read
// of the allocation each); what still runs then is cut.
const lastAnswers = 5 * time.Second

// HTTP is what Service.ServeHTTP serves: the daemon's handler on its
// listener.
type HTTP struct {
	// Server is the listener's configuration (address, TLS, timeouts, and
	// the stop's ShutdownDelay and ShutdownGrace).
	Server web.ServerConfig
	// Handler is the API, behind /healthz and /readyz (web.Health, with the
	// service's DatabaseCheck and the "server" check, "stopping" from the
	// stop signal on).
	Handler http.Handler
	// Malformed renders the answers to requests net/http refuses before
	// routing in the API's own error format (web.IronicMalformed,
	// web.PlacementMalformed).
	Malformed web.MalformedRenderer
	// EndStreams, when set, runs as the listener closes, after the
	// shutdown delay: requests that would never end by themselves end now
	// (metalloc-api: event streams, whose clients resume elsewhere with
	// Last-Event-ID).
	EndStreams func()
	// Stopping, when set, runs at the end of the shutdown grace: requests
	// still waiting answer now (metalloc-api: Prefer: wait, with the
	// allocation as it is).
	Stopping func()
}

// ServeHTTP serves h until the service's Ctx ends (the first SIGINT or
// SIGTERM; a second one exits at once, see stopOnSignal), then drains so
// that no client request fails:
//
//  1. /readyz answers 503 ("server": "stopping") at once, while every
//     other request is served as before for h.Server.ShutdownDelay, so that
//     a load balancer probing /readyz takes the server out before it stops
//     accepting. Every answer meanwhile carries Connection: close, so that
//     clients connected straight (or through a TCP balancer) reconnect, to
//     another server; idle connections are left open until the listener
//     closes: closing one while /readyz still looked ready to a balancer
//     raced the balancer's next request on it (a reset, which a balancer
//     does not retry for a POST: TestRollingUpgrade saw a 502).
//  2. The listener closes (new connections are refused; a request net/http
//     had not read yet was not served and may be retried) and the requests
//     in flight get h.Server.ShutdownGrace to finish, Prefer: wait
//     included; EndStreams runs as the listener closes.
//  3. At the grace's end Stopping runs (open waits answer now) and the
//     answers get lastAnswers more; connections still open then are
//     closed.
//
// It tells systemd (Type=notify) READY=1 once the socket is bound,
// STOPPING=1 at the stop signal, WATCHDOG=1 when the unit asks for it,
// and logs "<name> listening" with the address and each step of the stop.
// From listening until it has drained, the process is registered in
// api_servers (db.RegisterServer: service "api" or "placement", the name
// without "metalloc-"), which `metalloc-manage db sync --contract` reads.
func (s *Service) ServeHTTP(h HTTP) error {
	sd := StartSystemd(s.Ctx, s.Log)
	defer sd.Close()
	var stopping atomic.Bool
	// /healthz and /readyz answer before routing and authentication.
	srv, err := web.NewServer(h.Server, closeWhenStopping(&stopping, web.Health(h.Handler, s.DatabaseCheck(), stoppingCheck(&stopping))))
	if err != nil {
		return err
	}
	srv.Malformed = h.Malformed
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve() }()
	s.Log.Info(s.name+" listening", zap.String("listen", srv.Addr()), zap.Bool("tls", h.Server.TLS()),
		zap.String("version", buildinfo.Get().Version))
	// In api_servers from now until the last request is answered, so that
	// `db sync --contract` waits for this binary to be gone.
	reg := db.RegisterServer(context.WithoutCancel(s.Ctx), s.Pool,
		db.ServerInfo{Service: strings.TrimPrefix(s.name, "metalloc-"), Version: buildinfo.Get().Version}, s.Log)
	defer reg.Close()
	sd.Ready()
	select {
	case err := <-errc:
		return err
	case <-s.Ctx.Done():
	}
	stopping.Store(true)
	return drain(srv.Server, h, s.Log)
}

// stoppingCheck is the readiness check "server" of an HTTP daemon:
// "stopping" once stopping is set (at the stop signal).
func stoppingCheck(stopping *atomic.Bool) web.Check {
	return web.Check{Name: "server", Func: func(context.Context) error {
		if stopping.Load() {
			return errors.New("stopping")
		}
		return nil
	}}
}

// closeWhenStopping answers every request with Connection: close once
// stopping is set (net/http then closes the connection after the answer).
func closeWhenStopping(stopping *atomic.Bool, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if stopping.Load() {
			w.Header().Set("Connection", "close")
		}
		next.ServeHTTP(w, r)
	})
}

// drain stops srv as ServeHTTP describes, once /readyz says stopping (and
// srv's handler, through closeWhenStopping, closes connections).
func drain(srv *http.Server, h HTTP, log *zap.Logger) error {
	delay, grace := max(h.Server.ShutdownDelay, 0), max(h.Server.ShutdownGrace, 0)
	log.Info("stopping: /readyz answers 503, serving on meanwhile",
		zap.Duration("delay", delay), zap.Duration("grace", grace))
	time.Sleep(delay)
	if h.EndStreams != nil {
		srv.RegisterOnShutdown(h.EndStreams) // run once the listener is closed
	}
	log.Info("stopping: listener closed, finishing the requests in flight", zap.Duration("grace", grace))
	graceOver := time.AfterFunc(grace, func() {
		log.Warn("stopping: the grace is over, open waits answer now", zap.Duration("grace", grace),
			zap.Duration("last_answers", lastAnswers))
		if h.Stopping != nil {
			h.Stopping()
		}
	})
	defer graceOver.Stop()
	ctx, cancel := context.WithTimeout(context.Background(), grace+lastAnswers)
	defer cancel()
	err := srv.Shutdown(ctx)
	if errors.Is(err, context.DeadlineExceeded) {
		log.Warn("stopping: cutting the requests still in flight", zap.Duration("after", grace+lastAnswers))
		err = srv.Close()
	}
	if err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	log.Info("stopped")
	return nil
}
