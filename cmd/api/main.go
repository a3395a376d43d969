// Command metalloc-api serves the Ironic-compatible HTTP API (nodes,
// allocations) on PostgreSQL, and Prometheus metrics at GET /metrics on the
// same listener (HTTP requests, allocations created, the database pool, Go
// runtime and process). It keeps no state of its own: run as many as you
// like behind a load balancer. While the database is unreachable, requests
// that need it get a quick 503 in Ironic's error body. See docs/deployment.md for
// the configuration keys.
package main

import (
	"context"
	"errors"
	"net/http"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/labstack/echo/v4"
	"github.com/labstack/echo/v4/middleware"
	"github.com/spf13/cobra"
	"go.uber.org/zap"

	"github.com/metalloc/metalloc/allocation"
	"github.com/metalloc/metalloc/allocgroup"
	"github.com/metalloc/metalloc/auth"
	"github.com/metalloc/metalloc/auth/policy"
	"github.com/metalloc/metalloc/chassis"
	"github.com/metalloc/metalloc/cmd/internal/cli"
	"github.com/metalloc/metalloc/conductor/conductorapi"
	"github.com/metalloc/metalloc/config"
	"github.com/metalloc/metalloc/db"
	"github.com/metalloc/metalloc/deploytemplate"
	"github.com/metalloc/metalloc/driver/driverapi"
	"github.com/metalloc/metalloc/ironic"
	"github.com/metalloc/metalloc/lease"
	"github.com/metalloc/metalloc/lease/blazar"
	"github.com/metalloc/metalloc/node"
	"github.com/metalloc/metalloc/port"
	"github.com/metalloc/metalloc/topology"
	"github.com/metalloc/metalloc/ui"
	"github.com/metalloc/metalloc/web"
)

func main() {
	cmd := cli.NewDaemon(config.BinaryAPI, "Ironic-compatible bare-metal allocation API", run)
	cli.AddAccessFlags(cmd)
	cli.Execute(cmd)
}

func run(cmd *cobra.Command, _ []string) error {
	cli.SetGCPercent(cli.ServerGCPercent)
	// Its first allocations are inserted on warm backends.
	svc, err := cli.StartService(cmd, "metalloc-api", func(_ config.Config, opts *db.PoolOptions) { opts.WarmUp = true })
	if err != nil {
		return err
	}
	defer svc.Close()
	cfg, log, pool := svc.Config, svc.Log, svc.Pool

	authn, err := cli.Authenticator(cmd, cfg, cfg.API.Access, cfg.API.Listen, auth.IronicNoAuth{}, log)
	if err != nil {
		return err
	}
	rules, err := cli.Rules(cfg.API.Access, accessDefaults(), true)
	if err != nil {
		return err
	}

	// One LISTEN connection and one event reader for the whole process:
	// Prefer: wait and GET /v1/allocations/events (allocation.Hub).
	hub := allocation.NewHub(pool, allocation.HubOptions{
		Log: log, Retention: cfg.API.EventsRetention, MaxEvents: cfg.API.EventsMaxCount,
	})
	// It runs until the server has stopped, not just until the stop
	// signal: waits go on during the shutdown grace.
	hubDone := make(chan struct{})
	hubCtx, stopHub := context.WithCancel(context.Background())
	go func() { defer close(hubDone); hub.Run(hubCtx) }()
	defer func() { stopHub(); <-hubDone }()

	// In front of Ironic (ironic.endpoint), every route metalloc does not
	// own goes to Ironic (package ironic).
	front, err := newFront(cfg, pool, hub.Has, log)
	if err != nil {
		return err
	}
	if front != nil {
		defer front.Close()
	}
	e, err := newAPIWith(cfg, pool, authn, rules, hub, front, log)
	if err != nil {
		return err
	}

	// At SIGTERM event streams end as the listener closes (clients resume
	// elsewhere); waits go on for the shutdown grace, then answer.
	return svc.ServeHTTP(cli.HTTP{Server: cfg.API.ServerConfig, Handler: e, Malformed: web.IronicMalformed,
		EndStreams: hub.EndStreams, Stopping: hub.Shutdown})
}

// resources are the top-level resources of metalloc-api's /v1 document.
var resources = []string{"chassis", "nodes", "ports", "portgroups", "drivers", "conductors", "allocations", "deploy_templates", "shards"}

// newFront returns metalloc-api's front for the Ironic at ironic.endpoint
// (refreshing nodes it changes in the mirror on pool; known, the allocation
// hub's Has, or nil, is ironic.FrontOptions.Known), or nil when
// ironic.endpoint is empty.
func newFront(cfg config.Config, pool *pgxpool.Pool, known func(uuid.UUID) bool, log *zap.Logger) (*ironic.Front, error) {
	ic, err := cli.IronicClient(cfg)
	if err != nil || ic == nil {
		return nil, err
	}
	log.Info("in front of Ironic: routes metalloc does not own go to Ironic", zap.String("ironic", ic.Root()))
	return ironic.NewFront(ironic.FrontOptions{
		Client: ic, Mirror: ironic.NewMirror(ic, pool, cfg.Ironic.SyncPageSize, log),
		PublicEndpoint: cfg.API.PublicEndpoint, Resources: resources, Log: log,
		Forwarding: ironic.ForwardingFor(cfg.API.AuthStrategy), Known: known,
	})
}

// accessDefaults are metalloc-api's default access rules: Ironic's, and
// those of metalloc's own routes (the topology's).
func accessDefaults() []policy.Default {
	return append(policy.IronicDefaults(), topology.PolicyDefaults()...)
}

// newAPI builds the API's HTTP handler: Ironic's error body and version
// negotiation, /metrics (Go runtime, process, the database pool and
// metalloc_db_up, HTTP requests, allocations created, the allocating queue,
// conductor liveness), request ids and access log, the request
// timeout and body limit, authentication by authn (/, /v1 and /metrics
// are public), and the node, port, port group, chassis, deploy template,
// driver, allocation and conductor routes checked against rules, the topology routes (package topology), and
// the operator page at /ui/ (package ui;
// its fleet summary is node's GET /v1/ui/fleet).
func newAPI(cfg config.Config, pool *pgxpool.Pool, authn auth.Authenticator, rules auth.Rules, hub *allocation.Hub, log *zap.Logger) (*echo.Echo, error) {
	return newAPIWith(cfg, pool, authn, rules, hub, nil, log)
}

// newAPIWith is newAPI in front of Ironic when front is not nil: owned
// routes are answered at their canonical spelling only
// (ironic.CanonicalPaths), and the route-level switch
// (ironic.Front.Middleware) comes right after the body limit and
// authentication, so that every route metalloc does not own (ironic.Owned)
// goes to Ironic whatever metalloc registers for it, authenticated by
// metalloc first and with the credentials ironic.ForwardingFor
// api.auth_strategy gives.
func newAPIWith(cfg config.Config, pool *pgxpool.Pool, authn auth.Authenticator, rules auth.Rules, hub *allocation.Hub,
	front *ironic.Front, log *zap.Logger) (*echo.Echo, error) {
	e := echo.New()
	e.HideBanner, e.HidePort = true, true
	// Blazar's routes (/reservation/...) answer errors in Blazar's body.
	e.HTTPErrorHandler = blazar.ErrorHandler(web.IronicErrorHandler)
	e.JSONSerializer = web.JSONSerializer{}
	e.Pre(middleware.RemoveTrailingSlash()) // Ironic accepts /v1/nodes/ as /v1/nodes
	// Forwarding headers only from api.trusted_proxies.
	trusted, err := web.ParseTrustedProxies("api.trusted_proxies", cfg.API.TrustedProxies)
	if err != nil {
		return nil, err
	}
	web.TrustProxies(e, trusted)

	// Prometheus metrics at GET /metrics on the API's own listener.
	reg := cli.NewRegistry(pool)
	httpMetrics, err := web.HTTPMetrics(reg)
	if err != nil {
		return nil, err
	}
	created, err := allocation.NewCreatedCounter(reg)
	if err != nil {
		return nil, err
	}
	if hub != nil {
		if err := allocation.RegisterHubMetrics(reg, hub); err != nil {
			return nil, err
		}
	}
	// The allocating queue and the conductors' liveness, read at each scrape.
	if err := errors.Join(reg.Register(allocation.NewQueueCollector(pool)),
		reg.Register(conductorapi.NewCollector(pool))); err != nil {
		return nil, err
	}

	e.Use(httpMetrics, web.RequestID(log), web.AccessLog(), middleware.Recover())
	// No page of another site may change anything (before authentication:
	// a browser's remembered http_basic credentials do not count there),
	// through metalloc's routes or, in front of Ironic, Ironic's.
	e.Use(web.CrossSite(web.CrossSiteOptions{
		RequireJSON: true, PublicEndpoint: cfg.API.PublicEndpoint,
		Forbidden: func(msg string) error { return web.Errorf(http.StatusForbidden, "%s", msg) },
		Unsupported: func(mt string) error {
			return web.Errorf(http.StatusUnsupportedMediaType, "The media type %s is not supported, use application/json", mt)
		},
	}))
	if front != nil {
		// Owned routes only at their canonical spelling: Ironic must never
		// get one of metalloc's requests under another (ironic.CanonicalPaths).
		e.Use(ironic.CanonicalPaths())
	}
	if cfg.API.RequestTimeout > 0 {
		// The request's context ends after RequestTimeout: a database that
		// stopped answering gives 503, not a hung client. Waits and event
		// streams bound each of their reads instead; requests proxied to
		// Ironic are bounded by ironic.timeout.
		e.Use(middleware.ContextTimeoutWithConfig(middleware.ContextTimeoutConfig{
			Timeout: cfg.API.RequestTimeout,
			Skipper: func(c echo.Context) bool {
				return allocation.LongRequest(c.Request()) || allocgroup.LongRequest(c.Request()) ||
					(front != nil && !ironic.Owned(c.Request().URL.Path))
			},
		}))
	}
	e.GET("/metrics", web.MetricsHandler(reg))
	// The body limit and authentication apply to every request, proxied
	// to Ironic or not (ironic.Forwarding says what Ironic then gets).
	e.Use(web.BodyLimit(cfg.API.MaxRequestBodySize, func() error {
		return web.Errorf(http.StatusRequestEntityTooLarge, "Request is too large.")
	}))
	public := web.IronicPublicRoute
	if front != nil {
		// Ironic's own public routes (the ramdisk agent's) stay public.
		public = func(c echo.Context) bool {
			return web.IronicPublicRoute(c) || ironic.PublicRoute(c.Request().URL.Path)
		}
	}
	e.Use(auth.Middleware(authn, public, web.IronicAuthFailure))
	// A body that is not text (invalid UTF-8, a lone surrogate escape) is
	// invalid JSON, before any handler could store U+FFFD in its place
	// (or, in front of Ironic, before Ironic gets it).
	e.Use(web.JSONText(func(problem string) error {
		return web.BadRequest("Invalid JSON in request body: %s", problem)
	}))
	if front != nil {
		m, err := ironic.NewMetrics(reg)
		if err != nil {
			return nil, err
		}
		front.SetMetrics(m)
		e.Use(front.Middleware())
	}
	web.RegisterIronicRoot(e, cfg.API.PublicEndpoint, resources)
	v1 := e.Group("/v1", web.IronicVersion())
	nodes := node.NewStore(pool)
	node.NewHandler(nodes, node.Deallocator{}, node.HandlerOptions{
		PublicEndpoint: cfg.API.PublicEndpoint, MaxLimit: cfg.API.MaxLimit, Rules: rules,
		// Nodes are created and changed only for drivers a live conductor
		// of their group serves, as in Ironic.
		Driver: node.FakeDriver{Registered: nodes.DriverServed},
	}).Register(v1)
	port.NewHandler(port.NewStore(pool), port.HandlerOptions{
		PublicEndpoint: cfg.API.PublicEndpoint, MaxLimit: cfg.API.MaxLimit, Rules: rules,
	}).Register(v1)
	allocation.NewHandler(allocation.NewStore(pool), allocation.HandlerOptions{
		PublicEndpoint: cfg.API.PublicEndpoint, MaxLimit: cfg.API.MaxLimit, Created: created, Rules: rules,
		Hub: hub, MaxWait: cfg.API.MaxWait, RequestTimeout: cfg.API.RequestTimeout,
		EventsHeartbeat: cfg.API.EventsHeartbeat, PollWindow: cfg.API.PollWindow, PollHold: cfg.API.PollHold,
	}).Register(v1)
	allocgroup.NewHandler(pool, allocgroup.HandlerOptions{
		PublicEndpoint: cfg.API.PublicEndpoint, MaxLimit: cfg.API.MaxLimit, Rules: rules,
		Hub: hub, MaxWait: cfg.API.MaxWait, RequestTimeout: cfg.API.RequestTimeout,
	}).Register(v1)
	// One lease store (and so one copy of the reservable pool) for both
	// lease APIs.
	leases := lease.NewStore(pool)
	lease.NewHandler(pool, lease.HandlerOptions{
		PublicEndpoint: cfg.API.PublicEndpoint, MaxLimit: cfg.API.MaxLimit, Rules: rules, Log: log, Store: leases,
	}).Register(v1)
	// Blazar's lease API for its clients (python-blazarclient), a view of
	// the same leases, under /reservation/v1. before_end_date shows the
	// conductors' lease.ending notice, read from the same configuration.
	notice := cfg.Conductor.LeaseEndingNotice
	if notice <= 0 {
		notice = config.DefaultConductorLeaseEndingNotice
	}
	blazar.NewHandler(pool, blazar.Options{Rules: rules, Log: log, EndingNotice: notice, Leases: leases}).Register(e)
	conductorapi.NewHandler(pool, conductorapi.HandlerOptions{
		PublicEndpoint: cfg.API.PublicEndpoint, MaxLimit: cfg.API.MaxLimit, Rules: rules,
	}).Register(v1)
	chassis.NewHandler(chassis.NewStore(pool), chassis.HandlerOptions{
		PublicEndpoint: cfg.API.PublicEndpoint, MaxLimit: cfg.API.MaxLimit, Rules: rules,
	}).Register(v1)
	deploytemplate.NewHandler(deploytemplate.NewStore(pool), deploytemplate.HandlerOptions{
		PublicEndpoint: cfg.API.PublicEndpoint, MaxLimit: cfg.API.MaxLimit, Rules: rules,
	}).Register(v1)
	driverapi.NewHandler(pool, driverapi.HandlerOptions{
		PublicEndpoint: cfg.API.PublicEndpoint, Rules: rules,
	}).Register(v1)
	topology.NewHandler(pool, topology.HandlerOptions{Rules: rules}).Register(v1)
	ui.Register(e) // the operator page at /ui/, behind the same authentication

	return e, nil
}
