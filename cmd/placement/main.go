// Command metalloc-placement serves the OpenStack Placement API (1.0-1.39)
// on PostgreSQL, on its own port. It keeps no state of its own: run as many
// as you like behind a load balancer. See README.md.
package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/labstack/echo/v4/middleware"
	"github.com/spf13/cobra"
	"go.uber.org/zap"

	"github.com/metalloc/metalloc/auth"
	"github.com/metalloc/metalloc/auth/policy"
	"github.com/metalloc/metalloc/cmd/internal/cli"
	"github.com/metalloc/metalloc/placement"
	"github.com/metalloc/metalloc/web"
)

func main() {
	cmd := &cobra.Command{
		Use:           "metalloc-placement",
		Short:         "OpenStack Placement-compatible API",
		SilenceUsage:  true,
		SilenceErrors: true,
		RunE:          run,
	}
	cmd.Flags().String("config", "", "YAML config file (see configs/metalloc.yaml)")
	cmd.Flags().String("placement.listen", "", "address:port to serve on (default 127.0.0.1:8778)")
	cmd.Flags().String("database.url", "", "PostgreSQL URL (default $DATABASE_URL)")
	cli.AddAccessFlags(cmd)
	if err := cmd.Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "metalloc-placement:", err)
		os.Exit(1)
	}
}

func run(cmd *cobra.Command, _ []string) error {
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

	e := echo.New()
	e.HideBanner, e.HidePort = true, true
	e.HTTPErrorHandler = web.PlacementErrorHandler
	e.JSONSerializer = web.JSONSerializer{}
	// Forwarding headers only from placement.trusted_proxies.
	trusted, err := web.ParseTrustedProxies("placement.trusted_proxies", cfg.Placement.TrustedProxies)
	if err != nil {
		return err
	}
	web.TrustProxies(e, trusted)
	// Prometheus metrics at GET /metrics (no authentication, as
	// metalloc-api's): Go runtime, process, the database pool, HTTP
	// requests, inventories left over capacity.
	reg := cli.NewRegistry(pool)
	httpMetrics, err := web.HTTPMetrics(reg)
	if err != nil {
		return err
	}
	e.GET("/metrics", web.MetricsHandler(reg))
	e.Use(httpMetrics, web.RequestID(log), web.AccessLog(), middleware.Recover())
	if cfg.API.RequestTimeout > 0 {
		e.Use(middleware.ContextTimeout(cfg.API.RequestTimeout))
	}
	e.Use(web.BodyLimit(cfg.Placement.MaxRequestBodySize, func() error {
		return web.PlacementErr(http.StatusRequestEntityTooLarge, "", "Request is too large.")
	}))
	// No page of another site may change anything (Placement's handlers
	// already refuse bodies that are not JSON, with 415).
	e.Use(web.CrossSite(web.CrossSiteOptions{
		Forbidden: func(msg string) error { return web.PlacementErr(http.StatusForbidden, "", "%s", msg) },
	}))
	placement.NewHandler(pool, placement.Options{
		RandomizeAllocationCandidates: cfg.Placement.RandomizeAllocationCandidates,
		Authenticator:                 authn,
		Authorizer:                    rules.Authorizer,
		Metrics:                       reg,
	}).Register(e)

	srv, err := web.NewServer(cfg.Placement.ServerConfig, e)
	if err != nil {
		return err
	}
	srv.Malformed = web.PlacementMalformed
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve() }()
	log.Info("metalloc-placement listening", zap.String("listen", srv.Addr()), zap.Bool("tls", cfg.Placement.TLS()))
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
