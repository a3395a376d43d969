// Command metalloc-placement serves the OpenStack Placement API (1.0-1.39)
// on PostgreSQL, on its own port. It keeps no state of its own: run as many
// as you like behind a load balancer. See docs/deployment.md.
package main

import (
	"fmt"
	"net/http"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/labstack/echo/v4"
	"github.com/labstack/echo/v4/middleware"
	"github.com/spf13/cobra"
	"go.uber.org/zap"

	"github.com/metalloc/metalloc/auth"
	"github.com/metalloc/metalloc/auth/policy"
	"github.com/metalloc/metalloc/cmd/internal/cli"
	"github.com/metalloc/metalloc/config"
	"github.com/metalloc/metalloc/placement"
	"github.com/metalloc/metalloc/web"
)

func main() {
	cmd := cli.NewDaemon(config.BinaryPlacement, "OpenStack Placement-compatible API", run)
	cli.AddAccessFlags(cmd)
	cli.Execute(cmd)
}

func run(cmd *cobra.Command, _ []string) error {
	cli.SetGCPercent(cli.ServerGCPercent)
	svc, err := cli.StartService(cmd, "metalloc-placement")
	if err != nil {
		return err
	}
	defer svc.Close()
	cfg, log, pool, ctx := svc.Config, svc.Log, svc.Pool, svc.Ctx
	if err := placement.Prepare(ctx, pool); err != nil {
		return err
	}

	authn, err := cli.Authenticator(cmd, cfg, cfg.Placement.Access, cfg.Placement.Listen, auth.PlacementNoAuth{}, log)
	if err != nil {
		return err
	}
	rules, err := cli.Rules(cfg.Placement.Access, policy.PlacementDefaults(), false)
	if err != nil {
		return err
	}

	e, err := newPlacement(cfg, pool, authn, rules, log)
	if err != nil {
		return err
	}
	return svc.ServeHTTP(cli.HTTP{Server: cfg.Placement.ServerConfig, Handler: e, Malformed: web.PlacementMalformed})
}

// newPlacement is metalloc-placement's HTTP handler: its middleware (request
// ids, access log, metrics at /metrics, body limit and text check, cross-site
// refusal) and Placement's routes on pool, authenticated by authn and
// authorized by rules.
func newPlacement(cfg config.Config, pool *pgxpool.Pool, authn auth.Authenticator, rules auth.Rules, log *zap.Logger) (*echo.Echo, error) {
	e := echo.New()
	e.HideBanner, e.HidePort = true, true
	e.HTTPErrorHandler = web.PlacementErrorHandler
	e.JSONSerializer = web.JSONSerializer{}
	// Forwarding headers only from placement.trusted_proxies.
	trusted, err := web.ParseTrustedProxies("placement.trusted_proxies", cfg.Placement.TrustedProxies)
	if err != nil {
		return nil, err
	}
	web.TrustProxies(e, trusted)
	// Prometheus metrics at GET /metrics (no authentication, as
	// metalloc-api's): Go runtime, process, the database pool, HTTP
	// requests, inventories left over capacity.
	reg := cli.NewRegistry(pool)
	httpMetrics, err := web.HTTPMetrics(reg)
	if err != nil {
		return nil, err
	}
	e.GET("/metrics", web.MetricsHandler(reg))
	e.Use(httpMetrics, web.RequestID(log), web.AccessLog(), middleware.Recover())
	if cfg.API.RequestTimeout > 0 {
		e.Use(middleware.ContextTimeout(cfg.API.RequestTimeout))
	}
	e.Use(web.BodyLimit(cfg.Placement.MaxRequestBodySize, func() error {
		return web.PlacementErr(http.StatusRequestEntityTooLarge, "", "Request is too large.")
	}))
	if n := cfg.Placement.MaxAllocationCandidates; n == 0 || n < -1 {
		return nil, fmt.Errorf("placement.max_allocation_candidates is %d: give -1 (no bound) or a positive number", n)
	}
	// No page of another site may change anything (Placement's handlers
	// already refuse bodies that are not JSON, with 415).
	e.Use(web.CrossSite(web.CrossSiteOptions{
		Forbidden: func(msg string) error { return web.PlacementErr(http.StatusForbidden, "", "%s", msg) },
	}))
	// A body that is not text is malformed JSON (Placement's extract_json
	// says so of invalid UTF-8), lone surrogate escapes included.
	e.Use(web.JSONText(func(problem string) error {
		return web.PlacementErr(http.StatusBadRequest, "", "Malformed JSON: %s", problem)
	}))
	placement.NewHandler(pool, placement.Options{
		RandomizeAllocationCandidates: cfg.Placement.RandomizeAllocationCandidates,
		MaxAllocationCandidates:       cfg.Placement.MaxAllocationCandidates,
		Authenticator:                 authn,
		Authorizer:                    rules.Authorizer,
		Metrics:                       reg,
	}).Register(e)

	return e, nil
}
