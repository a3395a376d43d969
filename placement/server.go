package placement

import (
	"context"
	"net/http"
	"sync/atomic"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/metalloc/metalloc/auth"
	"github.com/metalloc/metalloc/placement/candidate"
	"github.com/metalloc/metalloc/web"
)

// Options configures the Placement API handlers.
type Options struct {
	// RandomizeAllocationCandidates is Placement's [placement]
	// randomize_allocation_candidates (default false): when true, a
	// limited GET /allocation_candidates returns a random sample of the
	// candidates and an unlimited one returns them shuffled; when false the
	// first candidates are returned, in provider order.
	RandomizeAllocationCandidates bool
	// MaxAllocationCandidates is Placement's [placement]
	// max_allocation_candidates: the most candidates one GET
	// /allocation_candidates generates (see candidate.Finder.SetMax); 0
	// is candidate.DefaultMax, -1 no bound.
	MaxAllocationCandidates int
	// Authenticator authenticates every request but "/" (nil:
	// auth.PlacementNoAuth{}, noauth2).
	Authenticator auth.Authenticator
	// Authorizer applies the access rules (nil: LegacyAdmin{}).
	Authorizer auth.Authorizer
	// Metrics, when set, registers the handlers' own metrics
	// (metalloc_placement_inventory_over_capacity_total).
	Metrics prometheus.Registerer
}

// Handler serves the Placement API on a database pool.
type Handler struct {
	pool *pgxpool.Pool
	q    *Queries
	opts Options
	// randomize is the live randomize_allocation_candidates option.
	randomize atomic.Bool
	// candidates answers GET /allocation_candidates.
	candidates *candidate.Finder
	// overCapacity counts inventory writes that left allocations above
	// capacity, by resource class (nil without Options.Metrics).
	overCapacity *prometheus.CounterVec
	// identity is DatabaseIdentity, read once (nil until then).
	identity atomic.Pointer[string]
}

// NewHandler returns the Placement API handlers on pool.
func NewHandler(pool *pgxpool.Pool, opts Options) *Handler {
	if opts.Authenticator == nil {
		opts.Authenticator = auth.PlacementNoAuth{}
	}
	if opts.Authorizer == nil {
		opts.Authorizer = LegacyAdmin{}
	}
	h := &Handler{pool: pool, q: New(pool), opts: opts}
	h.randomize.Store(opts.RandomizeAllocationCandidates)
	h.candidates = candidate.NewFinder(pool, h.randomizeCandidates)
	if opts.MaxAllocationCandidates != 0 {
		h.candidates.SetMax(opts.MaxAllocationCandidates)
	}
	if opts.Metrics != nil {
		h.overCapacity = prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "metalloc_placement_inventory_over_capacity_total",
			Help: "Inventory writes accepted although the provider's allocations of the class use more than its new capacity, by resource class.",
		}, []string{"resource_class"})
		opts.Metrics.MustRegister(h.overCapacity)
	}
	return h
}

// Register installs the version document at "/" (no authentication, as
// Placement) and every API route. Authentication and microversion
// negotiation are e-wide middleware, so that they also run for unknown
// routes (404) and known routes with another method (405, with an Allow
// header), as Placement's do; a route group with middleware would turn
// every 405 into a 404. Each route checks its access rule in its handler
// (can), as Placement does.
func (h *Handler) Register(e *echo.Echo) {
	e.Use(h.authenticate(), web.PlacementVersion(), web.PlacementNoOptions(), requireContentType())
	e.GET("/", h.root)
	h.registerRoutes(e.Group(""))
}

// requireContentType refuses a request with a body (Content-Length above 0)
// but no Content-Type, whatever the route, with 400 "content-type header
// required when content-length > 0", as Placement's handler does before
// dispatching.
func requireContentType() echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			r := c.Request()
			if r.ContentLength > 0 && r.Header.Get("Content-Type") == "" {
				return web.PlacementErr(http.StatusBadRequest, "", "content-type header required when content-length > 0")
			}
			return next(c)
		}
	}
}

// root serves the version document; from 1.15 with cache-control and
// last-modified, as Placement.
func (h *Handler) root(c echo.Context) error {
	if web.PlacementRequestVersion(c).AtLeast(1, 15) {
		setCacheHeaders(c, nil)
	}
	if id := h.databaseIdentity(c.Request().Context()); id != "" {
		c.Response().Header().Set(IdentityHeader, id)
	}
	return c.JSON(http.StatusOK, web.PlacementVersionDoc())
}

// databaseIdentity is DatabaseIdentity of h's database, read on first use;
// "" when it cannot be read (the header is then left out, and conductors
// in mode auto talk HTTP).
func (h *Handler) databaseIdentity(ctx context.Context) string {
	if id := h.identity.Load(); id != nil {
		return *id
	}
	id, err := DatabaseIdentity(ctx, h.pool)
	if err != nil {
		return ""
	}
	h.identity.Store(&id)
	return id
}

// registerRoutes adds the resource routes, each resource's from its own
// file.
func (h *Handler) registerRoutes(g *echo.Group) {
	h.registerAggregates(g)
	h.registerAllocations(g)
	h.registerCandidates(g)
	h.registerClasses(g)
	h.registerInventories(g)
	h.registerProviders(g)
	h.registerReshaper(g)
	h.registerTraits(g)
	h.registerUsages(g)
}

// setLocation sets the Location header to path made absolute with the
// request's scheme and host, as Placement's (webob's) answers carry it.
func setLocation(c echo.Context, path string) {
	c.Response().Header().Set("Location", c.Scheme()+"://"+c.Request().Host+path)
}
