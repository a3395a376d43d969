package e2e

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"

	"github.com/metalloc/metalloc/allocation"
	"github.com/metalloc/metalloc/db"
	"github.com/metalloc/metalloc/devstack"
	"github.com/metalloc/metalloc/web/webtest"
)

// TestWaitWithoutPolling runs metalloc-api (http_basic) and a conductor
// on a private PostgreSQL: `metalloc-manage allocation create --wait`
// gets its node in one request, show --wait and delete work, the event
// stream shows every change in order; then, with every node locked so the
// allocation stays allocating, a Prefer: wait GET is open while PostgreSQL
// restarts, and is answered with the node the conductor reserves
// afterwards (the API's listener reconnected and its waiters looked
// again), while the stream opened before the restart delivers the events
// that follow it.
func TestWaitWithoutPolling(t *testing.T) {
	if testing.Short() {
		t.Skip("starts its own PostgreSQL and restarts it")
	}
	ctx := context.Background()
	cluster, _ := privateCluster(t, nil, 3, "wt")
	dbURL := cluster.URL("metalloc")
	users := filepath.Join(t.TempDir(), "htpasswd")
	htpasswd(t, users, "operator", "op-pw")
	stack, err := devstack.Start(ctx, devstack.Options{
		BinDir: binDir, DatabaseURL: dbURL, Conductors: 1, LogDir: t.TempDir(), Log: zaptest.NewLogger(t),
		Env: []string{
			"METALLOC_LOG_LEVEL=info",
			"METALLOC_API_AUTH_STRATEGY=http_basic",
			"METALLOC_API_HTTP_BASIC_AUTH_USER_FILE=" + users,
			// Locked nodes keep an allocation allocating, not failed.
			"METALLOC_CONDUCTOR_LOCKED_NODE_WAIT=120s",
		},
	})
	require.NoError(t, err)
	t.Cleanup(func() {
		stack.Stop(context.Background())
		if t.Failed() {
			for _, p := range append([]*devstack.Process{stack.API}, stack.Conductors...) {
				logTail(t, p.LogPath, 40)
			}
		}
	})
	basic := "Basic " + base64.StdEncoding.EncodeToString([]byte("operator:op-pw"))
	hdr := map[string]string{"Authorization": basic, "X-OpenStack-Ironic-API-Version": "1.82"}

	stream := webtest.OpenSSE(t, stack.APIURL+"/v1/allocations/events", hdr)
	require.Equal(t, http.StatusOK, stream.Resp.StatusCode)

	manage := func(args ...string) (map[string]any, int, string) {
		cmd := exec.Command(filepath.Join(binDir, "metalloc-manage"), append([]string{"allocation"}, args...)...)
		cmd.Env = append(os.Environ(), "METALLOC_API_AUTH_STRATEGY=http_basic", "METALLOC_API_USERNAME=operator",
			"METALLOC_API_PASSWORD=op-pw", "METALLOC_LOG_LEVEL=warn")
		cmd.Args = append(cmd.Args, "--endpoint", stack.APIURL)
		if args[0] != "delete" { // delete prints a sentence
			cmd.Args = append(cmd.Args, "-f", "json")
		}
		var stderr strings.Builder
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else {
			require.NoError(t, err)
		}
		var doc map[string]any
		if len(out) > 0 && args[0] != "delete" {
			require.NoError(t, json.Unmarshal(out, &doc), string(out))
		}
		return doc, code, stderr.String()
	}
	doc, code, stderr := manage("create", "--resource-class", "wt", "--name", "m1", "--wait=30")
	require.Equal(t, 0, code, stderr)
	require.Equal(t, "active", doc["state"])
	require.NotNil(t, doc["node_uuid"])
	doc, code, stderr = manage("show", "m1", "--wait=5")
	require.Equal(t, 0, code, stderr)
	require.Equal(t, "active", doc["state"])
	_, code, stderr = manage("delete", "m1")
	require.Equal(t, 0, code, stderr)
	_, code, stderr = manage("show", "m1")
	require.Equal(t, 1, code)
	require.Contains(t, stderr, "404: Allocation m1 could not be found.")
	require.Equal(t, []string{"created m1 allocating", "updated m1 active", "deleted m1 active"},
		webtest.Summary(stream.Next(t, 3)))

	// Every node locked: the next allocation stays allocating.
	pool, err := db.Open(ctx, dbURL, db.PoolOptions{MaxConns: 2})
	require.NoError(t, err)
	defer pool.Close()
	release := lockNodes(t, pool, "wt")
	defer release()
	_, code, stderr = manage("create", "--resource-class", "wt", "--name", "m2")
	require.Equal(t, 0, code, stderr)
	require.Equal(t, []string{"created m2 allocating"}, webtest.Summary(stream.Next(t, 1)))

	type answer struct {
		status  int
		applied string
		state   string
	}
	answered := make(chan answer, 1)
	go func() {
		req, _ := http.NewRequest("GET", stack.APIURL+"/v1/allocations/m2", nil)
		for k, v := range hdr {
			req.Header.Set(k, v)
		}
		req.Header.Set("Prefer", "wait=60")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			answered <- answer{status: -1, state: err.Error()}
			return
		}
		defer resp.Body.Close()
		raw, _ := io.ReadAll(resp.Body)
		var a struct{ State string }
		_ = json.Unmarshal(raw, &a)
		answered <- answer{resp.StatusCode, resp.Header.Get("Preference-Applied"), a.State + " " + string(raw)}
	}()
	require.Eventually(t, func() bool {
		return metricValue(scrape(t, stack.APIURL+"/metrics"), "metalloc_allocation_waiters") == "1"
	}, 10*time.Second, 50*time.Millisecond)

	require.NoError(t, cluster.Stop(ctx)) // the locks die with their session
	// The database comes back once the API has seen it go: its event
	// listener lost the connection while the wait was open.
	waitLog(t, stack.API.LogPath, `"msg":"notification listener lost; reconnecting"`,
		`"channel":"`+allocation.EventsChannel+`"`)
	require.NoError(t, cluster.StartAgain(ctx))

	select {
	case a := <-answered:
		require.Equal(t, http.StatusOK, a.status, a.state)
		require.Equal(t, "wait=60", a.applied)
		require.True(t, strings.HasPrefix(a.state, "active "), a.state)
	case <-time.After(70 * time.Second):
		t.Fatal("the wait was not answered")
	}
	require.Equal(t, []string{"updated m2 active"}, webtest.Summary(stream.Next(t, 1)))
}
