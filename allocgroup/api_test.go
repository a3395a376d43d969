package allocgroup_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/labstack/echo/v4"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"

	"github.com/metalloc/metalloc/allocation"
	"github.com/metalloc/metalloc/allocgroup"
	"github.com/metalloc/metalloc/conductor"
	"github.com/metalloc/metalloc/db/dbtest"
	"github.com/metalloc/metalloc/topology"
	"github.com/metalloc/metalloc/web"
	"github.com/metalloc/metalloc/web/webtest"
)

type fixture struct {
	t    *testing.T
	pool *pgxpool.Pool
	srv  *httptest.Server
}

// setup serves the allocation and allocation group APIs with a Hub
// (Prefer: wait, events) and runs one conductor (database backend) on a
// fleet of racks x perRack nodes of class gpu, topology row/rack.
func setup(t *testing.T, racks, perRack int) *fixture {
	t.Helper()
	pool := dbtest.New(t)
	dbtest.RackedNodes(t, pool, racks, perRack, "gpu")
	require.NoError(t, topology.Save(context.Background(), pool,
		[]topology.Level{{Name: "row", Source: "extra.row"}, {Name: "rack", Source: "extra.rack"}}))
	log := zaptest.NewLogger(t)
	hub := allocation.NewHub(pool, allocation.HubOptions{Log: log})
	ctx, cancel := context.WithCancel(context.Background())
	hubDone := make(chan struct{})
	go func() { defer close(hubDone); hub.Run(ctx) }()
	svc, err := conductor.NewService(conductor.Config{Hostname: "c0", Workers: 2}, pool, log)
	require.NoError(t, err)
	ready := make(chan struct{})
	svc.OnReady = func() { close(ready) }
	svcDone := make(chan error, 1)
	go func() { svcDone <- svc.Run(ctx) }()
	<-ready
	e := echo.New()
	e.HTTPErrorHandler = web.IronicErrorHandler
	v1 := e.Group("/v1", web.IronicVersion())
	allocation.NewHandler(allocation.NewStore(pool), allocation.HandlerOptions{Hub: hub, MaxWait: 10 * time.Second,
		RequestTimeout: 5 * time.Second, EventsHeartbeat: time.Second}).Register(v1)
	allocgroup.NewHandler(pool, allocgroup.HandlerOptions{Hub: hub, MaxWait: 10 * time.Second,
		RequestTimeout: 5 * time.Second}).Register(v1)
	srv := httptest.NewServer(e)
	t.Cleanup(func() {
		srv.CloseClientConnections()
		srv.Close()
		cancel()
		<-hubDone
		require.NoError(t, <-svcDone)
	})
	return &fixture{t: t, pool: pool, srv: srv}
}

func (f *fixture) do(method, path string, hdr map[string]string, body string) (int, map[string]any) {
	f.t.Helper()
	req, _ := http.NewRequest(method, f.srv.URL+path, strings.NewReader(body))
	req.Header.Set(web.IronicVersionHeader, "1.82")
	req.Header.Set("Content-Type", "application/json")
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(f.t, err)
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var out map[string]any
	if len(raw) > 0 {
		require.NoError(f.t, json.Unmarshal(raw, &out), string(raw))
	}
	return resp.StatusCode, out
}

var wait = map[string]string{"Prefer": "wait=10"}

// TestGroupLifeCycleThroughTheAPI: create with Prefer: wait (active in one
// rack), members in /v1/allocations with allocation_group_uuid, grow by
// PATCH, release one member (count down), delete the group (nodes free),
// and the event stream shows the group's state changes.
func TestGroupLifeCycleThroughTheAPI(t *testing.T) {
	t.Parallel()
	f := setup(t, 3, 8)
	events := webtest.OpenSSE(t, f.srv.URL+"/v1/allocations/events?resource_class=gpu",
		map[string]string{web.IronicVersionHeader: "1.82"})
	require.Equal(t, http.StatusOK, events.Resp.StatusCode)

	status, g := f.do("POST", "/v1/allocation_groups", wait,
		`{"name":"train-1","count":4,"resource_class":"gpu","required":"rack","extra":{"job":"j1"}}`)
	require.Equal(t, http.StatusCreated, status, g)
	require.Equal(t, "active", g["state"], g)
	require.Len(t, g["members"], 4)
	require.Equal(t, "rack", g["required"])
	require.NotNil(t, g["domain"])
	gu := g["uuid"].(string)

	status, list := f.do("GET", "/v1/allocations?resource_class=gpu", nil, "")
	require.Equal(t, http.StatusOK, status)
	allocs := list["allocations"].([]any)
	require.Len(t, allocs, 4)
	for _, a := range allocs {
		a := a.(map[string]any)
		require.Equal(t, gu, a["allocation_group_uuid"])
		require.Equal(t, "active", a["state"])
		require.Equal(t, map[string]any{"job": "j1"}, a["extra"])
	}

	status, g = f.do("PATCH", "/v1/allocation_groups/train-1", nil, `[{"op":"replace","path":"/count","value":6}]`)
	require.Equal(t, http.StatusOK, status, g)
	status, g = f.do("GET", "/v1/allocation_groups/"+gu, wait, "")
	require.Equal(t, http.StatusOK, status, g)
	require.Equal(t, "active", g["state"], g)
	require.Len(t, g["members"], 6)
	require.Equal(t, 1, dbtest.Count(t, f.pool, `SELECT count(DISTINCT n.extra->>'rack') FROM allocations a
		JOIN nodes n ON n.id = a.node_id WHERE a.group_id IS NOT NULL`))

	status, _ = f.do("PATCH", "/v1/allocation_groups/train-1", nil, `[{"op":"replace","path":"/count","value":2}]`)
	require.Equal(t, http.StatusBadRequest, status)

	member := g["members"].([]any)[0].(string)
	status, _ = f.do("DELETE", "/v1/allocations/"+member, nil, "")
	require.Equal(t, http.StatusNoContent, status)
	_, g = f.do("GET", "/v1/allocation_groups/"+gu, nil, "")
	require.EqualValues(t, 5, g["count"])
	require.Len(t, g["members"], 5)

	status, _ = f.do("DELETE", "/v1/allocation_groups/"+gu, nil, "")
	require.Equal(t, http.StatusNoContent, status)
	require.Zero(t, dbtest.Count(t, f.pool, `SELECT count(*) FROM allocations`))
	require.Zero(t, dbtest.Count(t, f.pool, `SELECT count(*) FROM nodes WHERE allocation_id IS NOT NULL OR instance_uuid IS NOT NULL`))
	status, _ = f.do("GET", "/v1/allocation_groups/"+gu, nil, "")
	require.Equal(t, http.StatusNotFound, status)

	var kinds []string
	for _, e := range events.Next(t, 1+4+1+1+2+1+1+5+1) {
		if strings.HasPrefix(e.Kind, "group_") {
			kinds = append(kinds, e.Kind+" "+e.Data["state"].(string))
		}
	}
	require.Equal(t, []string{"group_created allocating", "group_updated active", "group_updated allocating",
		"group_updated active", "group_deleted active"}, kinds)
}

// TestGroupCreateValidation: bad bodies are 400 in Ironic's error format,
// an unknown level names the levels, and a group no rack can take ends in
// error with a per-domain last_error.
func TestGroupCreateValidation(t *testing.T) {
	t.Parallel()
	f := setup(t, 2, 4)
	for _, body := range []string{
		`{"resource_class":"gpu"}`,
		`{"count":0,"resource_class":"gpu"}`,
		`{"count":2,"resource_class":"gpu","required":"rack","preferred":"row"}`,
		`{"count":2,"resource_class":"gpu","bogus":1}`,
		`{"count":2,"resource_class":"gpu","traits":["not a trait"]}`,
		`{"count":2,"resource_class":"gpu","candidate_nodes":["nope"]}`,
	} {
		status, out := f.do("POST", "/v1/allocation_groups", nil, body)
		require.Equal(t, http.StatusBadRequest, status, body)
		require.NotEmpty(t, webtest.IronicFault(t, out), body)
	}
	status, out := f.do("POST", "/v1/allocation_groups", nil, `{"count":2,"resource_class":"gpu","required":"switch"}`)
	require.Equal(t, http.StatusBadRequest, status)
	require.Contains(t, webtest.IronicFault(t, out), "row, rack")

	status, g := f.do("POST", "/v1/allocation_groups", wait, `{"count":5,"resource_class":"gpu","required":"rack"}`)
	require.Equal(t, http.StatusCreated, status)
	require.Equal(t, "error", g["state"])
	require.Contains(t, g["last_error"], "no rack has 5 free nodes")
	require.Empty(t, g["members"])
	t.Log(g["last_error"])

	status, _ = f.do("POST", "/v1/allocation_groups", nil, `{"name":"dup","count":1,"resource_class":"gpu"}`)
	require.Equal(t, http.StatusCreated, status)
	status, _ = f.do("POST", "/v1/allocation_groups", nil, `{"name":"dup","count":1,"resource_class":"gpu"}`)
	require.Equal(t, http.StatusConflict, status)
	status, list := f.do("GET", "/v1/allocation_groups?state=error", nil, "")
	require.Equal(t, http.StatusOK, status)
	require.Len(t, list["allocation_groups"], 1)
}
