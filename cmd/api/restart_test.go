package main

import (
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"

	"github.com/metalloc/metalloc/auth"
	"github.com/metalloc/metalloc/config"
	"github.com/metalloc/metalloc/db"
	"github.com/metalloc/metalloc/db/dbtest"
	"github.com/metalloc/metalloc/web"
	"github.com/metalloc/metalloc/web/webtest"
)

// TestPreferWaitPOSTAcrossRestart: a Prefer: wait POST whose row is
// committed answers 201 with the state known when it was created, even
// though PostgreSQL stopped during the wait and its state could not be
// read at the end of it (a 503 would make the client retry, and hold two
// nodes). Once the database is back, the row is there, and a retry with
// the same name gets 409 "already exists" (how a client makes its POST
// safe to retry, as docs/api-compatibility.md says).
func TestPreferWaitPOSTAcrossRestart(t *testing.T) {
	if testing.Short() {
		t.Skip("starts its own PostgreSQL and stops it")
	}
	t.Parallel()
	ctx := t.Context()
	cluster, _ := dbtest.PrivateCluster(t, nil)
	pool, err := db.Open(ctx, cluster.URL("metalloc"), db.PoolOptions{MaxConns: 4})
	require.NoError(t, err)
	t.Cleanup(pool.Close)

	cfg, err := config.Load("", nil)
	require.NoError(t, err)
	// No conductor runs: the allocation stays allocating, and the wait
	// ends by its own timeout, after the database stopped.
	hub, srv := hubAPI(t, pool, cfg, auth.IronicNoAuth{}, auth.Rules{}, zaptest.NewLogger(t))
	hdr := []string{"Content-Type", "application/json", web.IronicVersionHeader, "1.82", "Prefer", "wait=2"}
	type answer struct {
		status int
		body   []byte
	}
	answered := make(chan answer, 1)
	go func() {
		st, _, body := webtest.Do(t, http.MethodPost, srv.URL+"/v1/allocations", `{"resource_class": "gold", "name": "once"}`, hdr...)
		answered <- answer{st, body}
	}()
	dbtest.WaitFor(t, 30*time.Second, "the POST to wait on its committed row", func() bool {
		return hub.Waiters() == 1 && dbtest.Count(t, pool, `SELECT count(*) FROM allocations WHERE name = 'once'`) == 1
	})
	require.NoError(t, cluster.Stop(ctx))

	var a answer
	select {
	case a = <-answered:
	case <-time.After(2 * time.Minute):
		t.Fatal("the POST was not answered")
	}
	require.Equal(t, http.StatusCreated, a.status, "%s", a.body)
	var doc struct{ UUID, Name, State string }
	require.NoError(t, json.Unmarshal(a.body, &doc), "%s", a.body)
	require.Equal(t, "once", doc.Name)
	require.Equal(t, "allocating", doc.State)

	require.NoError(t, cluster.StartAgain(ctx))
	var got struct{ UUID string }
	dbtest.WaitFor(t, 60*time.Second, "the API to read the allocation again", func() bool {
		st, _, body := webtest.Do(t, http.MethodGet, srv.URL+"/v1/allocations/once", "", web.IronicVersionHeader, "1.82")
		return st == http.StatusOK && json.Unmarshal(body, &got) == nil
	})
	require.Equal(t, doc.UUID, got.UUID, "the 201 named the row that is stored")
	st, _, body := webtest.Do(t, http.MethodPost, srv.URL+"/v1/allocations", `{"resource_class": "gold", "name": "once"}`, hdr...)
	require.Equal(t, http.StatusConflict, st, "%s", body)
	require.Equal(t, "An allocation with name once already exists.", web.IronicFaultString(body))
}
