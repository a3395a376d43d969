package web

import (
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"

	"github.com/labstack/echo/v4"
)

// ServerConfig is one listener's settings (the api.*, placement.* and
// conductor.metrics_* keys): address, TLS, timeouts and, for the APIs,
// the pace of their stop.
type ServerConfig struct {
	// Listen is address:port.
	Listen string `mapstructure:"listen"`
	// TLSCertFile and TLSKeyFile (PEM) turn TLS on (1.3, or 1.2 with the
	// ECDHE AEAD suites of tlsCipherSuites); both or neither. The files
	// are read at start.
	TLSCertFile string `mapstructure:"tls_cert_file"`
	TLSKeyFile  string `mapstructure:"tls_key_file"`
	// ReadTimeout bounds reading a whole request (headers and body),
	// WriteTimeout writing its answer (from the end of the request
	// headers), IdleTimeout how long a keep-alive connection waits for the
	// next request. 0 = no limit. Request headers always have 10 s.
	ReadTimeout  time.Duration `mapstructure:"read_timeout"`
	WriteTimeout time.Duration `mapstructure:"write_timeout"`
	IdleTimeout  time.Duration `mapstructure:"idle_timeout"`
	// TrustedProxies are the reverse proxies (CIDRs or addresses) whose
	// forwarding headers (X-Forwarded-Proto, X-Forwarded-For, Forwarded)
	// are believed; from anyone else they are dropped (TrustForwarded).
	// Default: none.
	TrustedProxies []string `mapstructure:"trusted_proxies"`
	// ShutdownDelay and ShutdownGrace pace an HTTP daemon's stop (the
	// api.* and placement.* keys; cli.Service.ServeHTTP): for
	// ShutdownDelay after the stop signal /readyz answers 503 while
	// everything else is served as before, so that load balancers move
	// away; then the listener closes and the requests in flight get
	// ShutdownGrace to finish. 0: no delay; no grace (open waits answer
	// at once).
	ShutdownDelay time.Duration `mapstructure:"shutdown_delay"`
	ShutdownGrace time.Duration `mapstructure:"shutdown_grace"`
}

// tlsCipherSuites are the TLS 1.2 suites the listeners offer: ECDHE key
// exchange with an AEAD cipher only (no CBC mode, no SHA-1 MAC, no static
// RSA key exchange), as Mozilla's "intermediate" profile. TLS 1.3's suites
// are all AEAD and not configurable.
var tlsCipherSuites = []uint16{
	tls.TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256, tls.TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,
	tls.TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384, tls.TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384,
	tls.TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256, tls.TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256,
}

// TLS reports whether the listener serves TLS.
func (c ServerConfig) TLS() bool { return c.TLSCertFile != "" || c.TLSKeyFile != "" }

// Server is an http.Server bound to its listener.
type Server struct {
	*http.Server
	ln net.Listener
	// Malformed, when set before Serve, renders the answers to requests
	// net/http cannot parse (400, 431, 501) in the API's error format
	// instead of Go's bare text/plain (see PlacementMalformed,
	// IronicMalformed). Plain HTTP only: over TLS net/http must see its
	// *tls.Conn (for HTTP/2 and the request's TLS state), so Go's own
	// answer stays.
	Malformed MalformedRenderer
}

// NewServer loads the TLS key pair (if any) and binds cfg.Listen, so that a
// bad certificate or a busy port fails at start; Serve then serves h.
func NewServer(cfg ServerConfig, h http.Handler) (*Server, error) {
	srv := &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       cfg.ReadTimeout,
		WriteTimeout:      cfg.WriteTimeout,
		IdleTimeout:       cfg.IdleTimeout,
	}
	if cfg.TLS() {
		if cfg.TLSCertFile == "" || cfg.TLSKeyFile == "" {
			return nil, errors.New("TLS needs both tls_cert_file and tls_key_file")
		}
		cert, err := tls.LoadX509KeyPair(cfg.TLSCertFile, cfg.TLSKeyFile)
		if err != nil {
			return nil, fmt.Errorf("loading TLS key pair: %w", err)
		}
		srv.TLSConfig = &tls.Config{MinVersion: tls.VersionTLS12, CipherSuites: tlsCipherSuites,
			Certificates: []tls.Certificate{cert}}
	}
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return nil, err
	}
	if srv.TLSConfig != nil {
		ln = tls.NewListener(ln, srv.TLSConfig)
	}
	return &Server{Server: srv, ln: ln}, nil
}

// Addr is the bound address (host:port).
func (s *Server) Addr() string { return s.ln.Addr().String() }

// Serve serves until Shutdown; it returns http.ErrServerClosed then.
func (s *Server) Serve() error {
	if s.Malformed != nil && s.TLSConfig == nil {
		return s.Server.Serve(malformedListener{Listener: s.ln, render: s.Malformed})
	}
	return s.Server.Serve(s.ln)
}

// DefaultMaxRequestBodySize is oslo.middleware's [oslo_middleware]
// max_request_body_size default (bytes), the default of
// api.max_request_body_size and placement.max_request_body_size.
const DefaultMaxRequestBodySize = 114688

// BodyLimit refuses request bodies over max bytes (0 = no limit) with the
// error tooLarge returns (413 in the API's format), as oslo.middleware's
// sizelimit does, before any handler runs: a declared Content-Length over
// max is refused unread; any other body is read up to max+1 bytes first and
// refused if longer, so that nothing of a refused request is stored.
func BodyLimit(max int64, tooLarge func() error) echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			r := c.Request()
			if max <= 0 || r.Body == nil || r.Body == http.NoBody {
				return next(c)
			}
			if r.ContentLength > max {
				return tooLarge()
			}
			body, err := io.ReadAll(io.LimitReader(r.Body, max+1))
			if err != nil {
				if ne, ok := errors.AsType[net.Error](err); ok && ne.Timeout() {
					// The client sent less than its Content-Length and
					// waits: its fault, answered although the server
					// canceled the request's context (ClientGone).
					return bodyTimeout{BadRequest("The request body did not arrive within the server's read timeout " +
						"(fewer bytes than its Content-Length).")}
				}
				return BadRequest("Could not read the request body: %v", err)
			}
			if int64(len(body)) > max {
				return tooLarge()
			}
			r.Body = newReadBody(body)
			r.ContentLength = int64(len(body))
			return next(c)
		}
	}
}

// bodyTimeout is the 400 of a request body that stopped arriving before
// the server's read timeout: the server cancels the request's context
// then, but the client is still waiting for its answer.
type bodyTimeout struct{ err *Error }

func (b bodyTimeout) Error() string { return b.err.Error() }
func (b bodyTimeout) Unwrap() error { return b.err }
