package main

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"

	"github.com/metalloc/metalloc/allocation"
	"github.com/metalloc/metalloc/auth"
	"github.com/metalloc/metalloc/config"
	"github.com/metalloc/metalloc/db/dbtest"
	"github.com/metalloc/metalloc/web/webtest"
)

// TestWaitAndEventsAccess: with keystone and the default rules, the event
// stream and Prefer: wait see what GET /v1/allocations and GET
// /v1/allocations/{ident} see: a project member only its project's
// allocations (asking for another owner is 403), a system reader all,
// nobody without a token.
func TestWaitAndEventsAccess(t *testing.T) {
	t.Parallel()
	pool := dbtest.New(t)
	cfg, rules := keystoneDefaults(t)
	cfg.API.MaxWait = 2 * time.Second
	// Shorter than the waits below: they must not be cut to 503 by it.
	cfg.API.RequestTimeout = 500 * time.Millisecond
	hub, srv := hubAPI(t, pool, cfg, personaAuth{}, rules, zap.NewNop())

	url := srv.URL + "/v1/allocations/events"
	as := func(persona string) map[string]string {
		return map[string]string{"X-Auth-Token": persona, "X-OpenStack-Ironic-API-Version": "1.82"}
	}
	owner := webtest.OpenSSE(t, url, as("owner"))
	reader := webtest.OpenSSE(t, url, as("system-reader"))
	other := webtest.OpenSSE(t, url, as("other-project"))
	for _, s := range []*webtest.SSE{owner, reader, other} {
		require.Equal(t, http.StatusOK, s.Resp.StatusCode)
	}
	require.Equal(t, http.StatusUnauthorized, webtest.OpenSSE(t, url, map[string]string{"X-OpenStack-Ironic-API-Version": "1.82"}).Resp.StatusCode)
	require.Equal(t, http.StatusForbidden, webtest.OpenSSE(t, url+"?owner="+otherProject, as("owner")).Resp.StatusCode)

	_, mine := dbtest.Allocation(t, pool, dbtest.AllocationSpec{Owner: ptr(ownerProject)})
	_, theirs := dbtest.Allocation(t, pool, dbtest.AllocationSpec{Owner: ptr(otherProject)})
	uuids := func(evs []webtest.SSEEvent) []string {
		var out []string
		for _, e := range evs {
			out = append(out, e.Data["uuid"].(string))
		}
		return out
	}
	require.Equal(t, []string{mine.String(), theirs.String()}, uuids(reader.Next(t, 2)))
	require.Equal(t, []string{mine.String()}, uuids(owner.Next(t, 1)))
	require.Equal(t, []string{theirs.String()}, uuids(other.Next(t, 1)))
	owner.Quiet(t, 200*time.Millisecond)

	// Prefer: wait on an allocation the caller may not see: 404 at once,
	// as without the preference.
	wait := func(persona, id string) (int, string) {
		req, _ := http.NewRequest("GET", srv.URL+"/v1/allocations/"+id, nil)
		for k, v := range as(persona) {
			req.Header.Set(k, v)
		}
		req.Header.Set("Prefer", "wait=1")
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		return resp.StatusCode, resp.Header.Get("Preference-Applied")
	}
	st, _ := wait("other-project", mine.String())
	require.Equal(t, http.StatusNotFound, st)
	st, applied := wait("owner", mine.String())
	require.Equal(t, http.StatusOK, st)
	require.Equal(t, "wait=1", applied)
	owner.Quiet(t, time.Second)        // outlives api.request_timeout too
	require.Equal(t, 3, hub.Streams()) // owner, reader, other: still open
}

// hubAPI serves metalloc-api with an event hub (Prefer: wait, event
// streams) on pool, until the test ends.
func hubAPI(t *testing.T, pool *pgxpool.Pool, cfg config.Config, authn auth.Authenticator, rules auth.Rules,
	log *zap.Logger) (*allocation.Hub, *httptest.Server) {
	t.Helper()
	hub := allocation.NewHub(pool, allocation.HubOptions{})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); hub.Run(ctx) }()
	e, err := newAPI(cfg, pool, authn, rules, hub, log)
	require.NoError(t, err)
	srv := httptest.NewServer(e)
	t.Cleanup(func() { srv.CloseClientConnections(); srv.Close(); cancel(); <-done })
	return hub, srv
}
