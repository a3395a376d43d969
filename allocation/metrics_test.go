package allocation

import (
	"net/http/httptest"
	"testing"

	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"

	"github.com/metalloc/metalloc/web"
)

// TestCreatedCounter checks metalloc_allocations_created_total counts 201s
// only, and that registering it twice on one registry fails.
func TestCreatedCounter(t *testing.T) {
	t.Parallel()
	f := setup(t)
	reg := prometheus.NewRegistry()
	created, err := NewCreatedCounter(reg)
	require.NoError(t, err)
	_, err = NewCreatedCounter(reg)
	require.Error(t, err)

	e := echo.New()
	e.HTTPErrorHandler = web.IronicErrorHandler
	e.Use(web.RequestID(zaptest.NewLogger(t)))
	NewHandler(NewStore(f.pool), HandlerOptions{Created: created}).Register(e.Group("/v1", web.IronicVersion()))
	srv := httptest.NewServer(e)
	t.Cleanup(srv.Close)
	a := &apiFixture{fixture: f, srv: srv}

	st, _, _ := a.call("POST", "/v1/allocations", "1.60", map[string]any{"resource_class": "gold"})
	require.Equal(t, 201, st)
	st, _, _ = a.call("POST", "/v1/allocations", "1.60", map[string]any{"resource_class": "gold", "name": "a1"})
	require.Equal(t, 201, st)
	st, _, _ = a.call("POST", "/v1/allocations", "1.60", map[string]any{"resource_class": "gold", "name": "a1"})
	require.Equal(t, 409, st)
	st, _, _ = a.call("POST", "/v1/allocations", "1.60", map[string]any{})
	require.Equal(t, 400, st)
	require.Equal(t, 2.0, testutil.ToFloat64(created))
}
