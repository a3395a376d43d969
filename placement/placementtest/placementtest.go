// Package placementtest starts metalloc-placement in-process for tests of
// other packages (the Placement client, the conductor's Placement backend):
// the real handler on a fresh, migrated test database (db/dbtest), behind an
// httptest server, with noauth2 (send X-Auth-Token: admin).
package placementtest

import (
	"context"
	"net/http/httptest"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/labstack/echo/v4"
	"go.uber.org/zap"

	"github.com/metalloc/metalloc/db/dbtest"
	"github.com/metalloc/metalloc/placement"
	"github.com/metalloc/metalloc/web"
)

// NewServer serves the Placement API on its own test database and returns
// the server (closed at the test's end) and that database's pool. opts are
// the handler's options (e.g. RandomizeAllocationCandidates).
func NewServer(t testing.TB, opts placement.Options) (*httptest.Server, *pgxpool.Pool) {
	t.Helper()
	pool := dbtest.New(t)
	return NewServerOn(t, pool, opts), pool
}

// NewServerOn serves the Placement API on pool (a database already migrated,
// e.g. one the test shares with conductors) and returns the server.
func NewServerOn(t testing.TB, pool *pgxpool.Pool, opts placement.Options) *httptest.Server {
	t.Helper()
	if err := placement.Prepare(context.Background(), pool); err != nil {
		t.Fatalf("preparing placement: %v", err)
	}
	e := echo.New()
	e.HTTPErrorHandler = web.PlacementErrorHandler
	e.JSONSerializer = web.JSONSerializer{}
	e.Use(web.RequestID(zap.NewNop()))
	placement.NewHandler(pool, opts).Register(e)
	srv := httptest.NewServer(e)
	t.Cleanup(srv.Close)
	return srv
}
