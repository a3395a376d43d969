package cli

import (
	"bufio"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"

	"github.com/metalloc/metalloc/web"
)

// TestDrainSequence: at the stop signal /readyz answers 503 ("server":
// "stopping") at once while other requests are served for the delay, with
// Connection: close; then new connections are refused, streams end, a
// request in flight that finishes within the grace is answered as usual,
// and one still waiting at the grace's end is answered by Stopping, not
// cut; drain returns nil.
func TestDrainSequence(t *testing.T) {
	const delay, grace = time.Second, 1500 * time.Millisecond
	release := make(chan struct{})    // ends the first wait
	stopped := make(chan struct{})    // closed by Stopping
	streamsEnd := make(chan struct{}) // closed by EndStreams
	var stoppingAt, endStreamsAt atomic.Int64
	mux := http.NewServeMux()
	mux.HandleFunc("/v1/x", func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") })
	mux.HandleFunc("/wait/{n}", func(w http.ResponseWriter, r *http.Request) {
		changed := release // wait 1 sees a change; wait 2 none
		if r.PathValue("n") != "1" {
			changed = nil
		}
		select {
		case <-changed:
			io.WriteString(w, "changed")
		case <-stopped:
			io.WriteString(w, "as it is")
		}
	})
	mux.HandleFunc("/stream", func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusOK)
		io.WriteString(w, ": open\n\n")
		http.NewResponseController(w).Flush()
		<-streamsEnd
	})
	var stopping atomic.Bool
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	srv := &http.Server{Handler: closeWhenStopping(&stopping, web.Health(mux, stoppingCheck(&stopping)))}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	base := "http://" + ln.Addr().String()
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr}
	get := func(path string) (*http.Response, string) {
		t.Helper()
		resp, err := client.Get(base + path)
		require.NoError(t, err, path)
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		require.NoError(t, err, path)
		return resp, string(b)
	}
	resp, _ := get(web.ReadyzPath)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	resp, _ = get("/v1/x")
	require.False(t, resp.Close, "keep-alive before the stop")

	type answer struct {
		body string
		err  error
	}
	waits := make(chan answer, 2)
	for _, n := range []string{"1", "2"} {
		go func() {
			resp, err := client.Get(base + "/wait/" + n)
			if err != nil {
				waits <- answer{err: err}
				return
			}
			defer resp.Body.Close()
			b, err := io.ReadAll(resp.Body)
			waits <- answer{string(b), err}
		}()
	}
	stream, err := client.Get(base + "/stream")
	require.NoError(t, err)
	defer stream.Body.Close()

	start := time.Now()
	stopping.Store(true)
	drained := make(chan error, 1)
	go func() {
		drained <- drain(srv, HTTP{
			Server:     web.ServerConfig{ShutdownDelay: delay, ShutdownGrace: grace},
			EndStreams: func() { endStreamsAt.Store(int64(time.Since(start))); close(streamsEnd) },
			Stopping:   func() { stoppingAt.Store(int64(time.Since(start))); close(stopped) },
		}, zaptest.NewLogger(t))
	}()

	// The delay: /readyz says stopping, the rest is served, with
	// Connection: close.
	resp, body := get(web.ReadyzPath)
	require.Equal(t, http.StatusServiceUnavailable, resp.StatusCode)
	var hb web.HealthBody
	require.NoError(t, json.Unmarshal([]byte(body), &hb), body)
	require.Equal(t, web.HealthBody{Status: "unavailable", Checks: map[string]string{"server": "stopping"}}, hb)
	resp, body = get("/v1/x")
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Equal(t, "ok", body)
	require.True(t, resp.Close, "Connection: close during the delay")

	// Then new connections are refused, not before the delay.
	require.Eventually(t, func() bool {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err == nil {
			c.Close()
			return false
		}
		// Refused, or reset when the connection reached the backlog of the
		// listener as it closed.
		require.True(t, errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET), err)
		return true
	}, 10*time.Second, 20*time.Millisecond)
	require.GreaterOrEqual(t, time.Since(start), delay, "refused only after the delay")

	// The stream ends once the listener is closed.
	_, err = io.ReadAll(stream.Body)
	require.NoError(t, err, "the stream ends cleanly")
	require.GreaterOrEqual(t, time.Duration(endStreamsAt.Load()), delay)

	// A wait that ends within the grace gets its answer; the other one is
	// answered at the grace's end.
	close(release)
	a := <-waits
	require.NoError(t, a.err)
	require.Equal(t, "changed", a.body)
	a = <-waits
	require.NoError(t, a.err, "a wait open at the grace's end is answered, not cut")
	require.Equal(t, "as it is", a.body)
	require.GreaterOrEqual(t, time.Duration(stoppingAt.Load()), delay+grace, "waits answer at the grace's end")

	select {
	case err := <-drained:
		require.NoError(t, err)
	case <-time.After(30 * time.Second):
		t.Fatal("drain did not return")
	}
	require.ErrorIs(t, <-served, http.ErrServerClosed)
}

// TestDrainKeepsIdleConnections: a keep-alive connection idle at the stop
// signal stays open during the delay, and its next request is answered
// (with Connection: close), not reset: a load balancer that has not yet
// seen /readyz go 503 may send one more request on a pooled connection,
// and a reset then fails a POST it cannot retry (TestRollingUpgrade saw
// that 502 while the drain closed idle connections at the signal).
func TestDrainKeepsIdleConnections(t *testing.T) {
	const delay = 2 * time.Second
	mux := http.NewServeMux()
	mux.HandleFunc("/v1/x", func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") })
	var stopping atomic.Bool
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	srv := &http.Server{Handler: closeWhenStopping(&stopping, web.Health(mux, stoppingCheck(&stopping)))}
	go func() { _ = srv.Serve(ln) }()
	conn, err := net.Dial("tcp", ln.Addr().String())
	require.NoError(t, err)
	defer conn.Close()
	rd := bufio.NewReader(conn)
	ask := func() (*http.Response, error) {
		if _, err := io.WriteString(conn, "GET /v1/x HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
			return nil, err
		}
		_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
		resp, err := http.ReadResponse(rd, nil)
		if err == nil {
			_, err = io.ReadAll(resp.Body)
			resp.Body.Close()
		}
		return resp, err
	}
	resp, err := ask()
	require.NoError(t, err)
	require.False(t, resp.Close, "keep-alive before the stop")

	stopping.Store(true)
	drained := make(chan error, 1)
	go func() {
		drained <- drain(srv, HTTP{Server: web.ServerConfig{ShutdownDelay: delay, ShutdownGrace: time.Second}}, zaptest.NewLogger(t))
	}()
	time.Sleep(delay / 4) // the connection idles into the delay
	resp, err = ask()
	require.NoError(t, err, "a request on a connection idle at the stop signal is answered")
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.True(t, resp.Close, "with Connection: close")
	require.NoError(t, <-drained)
}
