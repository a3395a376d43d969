package main

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/metalloc/metalloc/auth"
	"github.com/metalloc/metalloc/config"
	"github.com/metalloc/metalloc/db/dbtest"
)

// TestClientGoneIs499: a Prefer: wait client that hangs up (POST or GET)
// is counted as 499 (client closed request) in
// metalloc_http_requests_total and logged at Info without a stack trace,
// never as a 500 (which feeds the MetallocHTTPServerErrors alert).
func TestClientGoneIs499(t *testing.T) {
	t.Parallel()
	pool := dbtest.New(t)
	cfg, err := config.Load("", nil)
	require.NoError(t, err)
	core, logs := observer.New(zapcore.DebugLevel)
	hub, srv := hubAPI(t, pool, cfg, auth.IronicNoAuth{}, auth.Rules{}, zap.New(core))

	_, waited := dbtest.Allocation(t, pool, dbtest.AllocationSpec{})
	impatient := func(method, path, body string) {
		t.Helper()
		rctx, hangUp := context.WithCancel(context.Background())
		req, err := http.NewRequestWithContext(rctx, method, srv.URL+path, strings.NewReader(body))
		require.NoError(t, err)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-OpenStack-Ironic-API-Version", "1.82")
		req.Header.Set("Prefer", "wait=30")
		errc := make(chan error, 1)
		go func() {
			resp, err := http.DefaultClient.Do(req)
			if err == nil {
				resp.Body.Close()
			}
			errc <- err
		}()
		dbtest.WaitFor(t, 30*time.Second, "the request to wait", func() bool { return hub.Waiters() == 1 })
		hangUp()
		require.ErrorIs(t, <-errc, context.Canceled)
		dbtest.WaitFor(t, 30*time.Second, "the server to notice", func() bool { return hub.Waiters() == 0 })
	}
	impatient(http.MethodPost, "/v1/allocations", `{"resource_class": "gold"}`)
	impatient(http.MethodGet, "/v1/allocations/"+waited.String(), "")

	metric := func(route, method, status string) string {
		return `metalloc_http_requests_total{method="` + method + `",route="` + route + `",status="` + status + `"} 1`
	}
	var text string
	dbtest.WaitFor(t, 30*time.Second, "both requests counted", func() bool {
		resp, err := http.Get(srv.URL + "/metrics")
		require.NoError(t, err)
		defer resp.Body.Close()
		var b strings.Builder
		_, _ = io.Copy(&b, resp.Body)
		text = b.String()
		return strings.Contains(text, metric("/v1/allocations", "POST", "499")) &&
			strings.Contains(text, metric("/v1/allocations/:ident", "GET", "499"))
	})
	require.NotContains(t, text, `status="500"`)
	require.Empty(t, logs.FilterLevelExact(zapcore.ErrorLevel).All(), "nothing at error level")
	abandoned := logs.FilterMessage("request abandoned by the client").All()
	require.Len(t, abandoned, 2)
	for _, l := range abandoned {
		require.Equal(t, zapcore.InfoLevel, l.Level)
		require.Empty(t, l.Stack)
		require.Equal(t, int64(499), l.ContextMap()["status"])
	}
}
