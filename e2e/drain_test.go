package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/url"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/metalloc/metalloc/db"
	"github.com/metalloc/metalloc/db/dbtest"
	"github.com/metalloc/metalloc/devstack"
	"github.com/metalloc/metalloc/web"
)

// drainAnswer is what a client of a stopping API got.
type drainAnswer struct {
	status int
	doc    map[string]any
	err    error
}

// waitingPOST creates an allocation of class rc with Prefer: wait=60 and
// sends the answer on out.
func waitingPOST(apiURL, rc, name string, out chan<- drainAnswer) {
	req, _ := http.NewRequest("POST", apiURL+"/v1/allocations",
		strings.NewReader(`{"resource_class":"`+rc+`","name":"`+name+`"}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(web.IronicVersionHeader, "1.82")
	req.Header.Set("Prefer", "wait=60")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		out <- drainAnswer{err: err}
		return
	}
	defer resp.Body.Close()
	a := drainAnswer{status: resp.StatusCode}
	raw, err := io.ReadAll(resp.Body)
	if a.err = err; err == nil {
		a.err = json.Unmarshal(raw, &a.doc)
	}
	out <- a
}

// refusedAfter waits until a new connection to apiURL is refused and
// returns how long after since that was.
func refusedAfter(t *testing.T, apiURL string, since time.Time) time.Duration {
	t.Helper()
	u, err := url.Parse(apiURL)
	require.NoError(t, err)
	var at time.Duration
	require.Eventually(t, func() bool {
		c, err := net.Dial("tcp", u.Host)
		if err == nil {
			c.Close()
			return false
		}
		require.True(t, errors.Is(err, syscall.ECONNREFUSED), err)
		at = time.Since(since)
		return true
	}, 60*time.Second, 20*time.Millisecond, "new connections refused")
	return at
}

// TestAPIDrain: at SIGTERM metalloc-api drains. /readyz answers 503
// ("server": "stopping") at once while the API is served for
// api.shutdown_delay (answers with Connection: close); then new
// connections are refused, the event stream ends, and Prefer: wait POSTs
// open since before the signal keep waiting: a conductor started during
// the grace activates their allocations and they get them, active; the
// process exits 0. With a short api.shutdown_grace a wait still open at
// its end is answered 201 with the allocation still allocating, not cut.
// A second SIGTERM exits at once.
func TestAPIDrain(t *testing.T) {
	t.Parallel()
	t.Run("waits finish within the grace", func(t *testing.T) {
		t.Parallel()
		const delay, n = 3 * time.Second, 3
		dbURL := dbtest.NewURL(t)
		pool, err := db.Open(context.Background(), dbURL, db.PoolOptions{MaxConns: 1})
		require.NoError(t, err)
		defer pool.Close()
		dbtest.Nodes(t, pool, n, "drain")
		stack, _ := startStackOpts(t, 0, devstack.Options{DatabaseURL: dbURL, NoConductors: true, Env: []string{
			"METALLOC_LOG_LEVEL=info", "METALLOC_API_SHUTDOWN_DELAY=" + delay.String(), "METALLOC_API_SHUTDOWN_GRACE=60s",
		}})
		// No conductor: the allocations wait.
		answers := make(chan drainAnswer, n)
		for i := range n {
			go waitingPOST(stack.APIURL, "drain", "d"+string(rune('1'+i)), answers)
		}
		dbtest.WaitFor(t, 30*time.Second, "the allocations created", func() bool {
			return dbtest.Count(t, pool, `SELECT count(*) FROM allocations WHERE state = 'allocating'`) == n
		})
		streamEnd := make(chan error, 1)
		req, _ := http.NewRequest("GET", stack.APIURL+"/v1/allocations/events", nil)
		req.Header.Set("Accept", "text/event-stream")
		req.Header.Set(web.IronicVersionHeader, "1.82")
		stream, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, stream.StatusCode)
		go func() { _, err := io.Copy(io.Discard, stream.Body); stream.Body.Close(); streamEnd <- err }()

		sent := time.Now()
		require.NoError(t, stack.API.Signal(syscall.SIGTERM))
		// The delay: /readyz says stopping, the API still answers.
		require.Eventually(t, func() bool {
			code, body := get(t, stack.APIURL+web.ReadyzPath, "", "")
			return code == http.StatusServiceUnavailable &&
				strings.Contains(body, `"server":"stopping"`) && strings.Contains(body, `"database":"ok"`)
		}, delay, 20*time.Millisecond, "/readyz 503 within the delay")
		req, _ = http.NewRequest("GET", stack.APIURL+"/v1/allocations", nil)
		req.Header.Set(web.IronicVersionHeader, "1.82")
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err, "served during the delay")
		resp.Body.Close()
		require.Equal(t, http.StatusOK, resp.StatusCode)
		require.True(t, resp.Close, "Connection: close during the delay")

		// Then new connections are refused and the stream ends.
		require.GreaterOrEqual(t, refusedAfter(t, stack.APIURL, sent), delay)
		select {
		case err := <-streamEnd:
			require.NoError(t, err, "the stream ends cleanly")
		case <-time.After(30 * time.Second):
			t.Fatal("the event stream did not end")
		}
		select {
		case a := <-answers:
			t.Fatalf("a wait answered before its allocation changed: %+v", a)
		default:
		}

		// A conductor during the grace: every wait gets its node.
		_, err = stack.StartConductor("drain-c1")
		require.NoError(t, err)
		for range n {
			select {
			case a := <-answers:
				require.NoError(t, a.err)
				require.Equal(t, http.StatusCreated, a.status, a.doc)
				require.Equal(t, "active", a.doc["state"], a.doc)
				require.NotNil(t, a.doc["node_uuid"], a.doc)
			case <-time.After(60 * time.Second):
				t.Fatal("a wait was not answered")
			}
		}
		require.NoError(t, stack.API.Wait(30*time.Second), "a clean stop exits 0")
		waitLog(t, stack.API.LogPath, `"msg":"stopped"`)
	})

	t.Run("a wait open at the grace's end is answered", func(t *testing.T) {
		t.Parallel()
		const grace = 2 * time.Second
		dbURL := dbtest.NewURL(t)
		pool, err := db.Open(context.Background(), dbURL, db.PoolOptions{MaxConns: 1})
		require.NoError(t, err)
		defer pool.Close()
		stack, _ := startStackOpts(t, 0, devstack.Options{DatabaseURL: dbURL, NoConductors: true, Env: []string{
			"METALLOC_LOG_LEVEL=info", "METALLOC_API_SHUTDOWN_DELAY=0s", "METALLOC_API_SHUTDOWN_GRACE=" + grace.String(),
		}})
		answers := make(chan drainAnswer, 1)
		go waitingPOST(stack.APIURL, "drain", "g1", answers)
		dbtest.WaitFor(t, 30*time.Second, "the allocation created", func() bool {
			return dbtest.Count(t, pool, `SELECT count(*) FROM allocations`) == 1
		})
		sent := time.Now()
		require.NoError(t, stack.API.Signal(syscall.SIGTERM))
		select {
		case a := <-answers:
			require.NoError(t, a.err, "answered, not cut")
			require.Equal(t, http.StatusCreated, a.status, a.doc)
			require.Equal(t, "allocating", a.doc["state"], a.doc)
			require.GreaterOrEqual(t, time.Since(sent), grace)
		case <-time.After(60 * time.Second):
			t.Fatal("the wait was not answered")
		}
		require.NoError(t, stack.API.Wait(30*time.Second), "a clean stop exits 0")
	})

	t.Run("a second signal exits at once", func(t *testing.T) {
		t.Parallel()
		stack, _ := startStackOpts(t, 0, devstack.Options{NoConductors: true, Env: []string{
			"METALLOC_LOG_LEVEL=info", "METALLOC_API_SHUTDOWN_DELAY=60s",
		}})
		require.NoError(t, stack.API.Signal(syscall.SIGTERM))
		waitLog(t, stack.API.LogPath, `"msg":"stopping: /readyz answers 503, serving on meanwhile"`)
		require.NoError(t, stack.API.Signal(syscall.SIGTERM))
		err := stack.API.Wait(10 * time.Second)
		var exit *exec.ExitError
		require.ErrorAs(t, err, &exit)
		require.Equal(t, 128+int(syscall.SIGTERM), exit.ExitCode())
		waitLog(t, stack.API.LogPath, `"msg":"second stop signal: exiting at once"`)
	})
}
