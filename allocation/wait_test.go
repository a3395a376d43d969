package allocation

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/labstack/echo/v4"
	"github.com/labstack/echo/v4/middleware"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"

	"github.com/metalloc/metalloc/db/dbtest"
	"github.com/metalloc/metalloc/web"
	"github.com/metalloc/metalloc/web/webtest"
)

type waitFixture struct {
	*fixture
	hub *Hub
	srv *httptest.Server
	me  int64 // a conductor, to activate and fail rows
}

// setupWait serves the allocation API with a running Hub (Prefer: wait and
// the event stream), MaxWait 3 s.
func setupWait(t *testing.T) *waitFixture {
	t.Helper()
	return setupWaitMax(t, 3*time.Second)
}

// setupWaitMax is setupWait with Prefer: wait capped at maxWait.
func setupWaitMax(t *testing.T, maxWait time.Duration) *waitFixture {
	t.Helper()
	return setupWaitWith(t, HandlerOptions{MaxWait: maxWait})
}

// setupWaitWith is setupWait with opts (MaxWait required; the Hub, the
// request timeout and the heartbeat are the fixture's).
func setupWaitWith(t *testing.T, opts HandlerOptions, mw ...echo.MiddlewareFunc) *waitFixture {
	t.Helper()
	maxWait := opts.MaxWait
	f := setup(t)
	hub := NewHub(f.pool, HubOptions{Log: zaptest.NewLogger(t)})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); hub.Run(ctx) }()
	e := echo.New()
	e.HTTPErrorHandler = web.IronicErrorHandler
	e.Use(mw...)
	opts.Hub, opts.RequestTimeout, opts.EventsHeartbeat = hub, maxWait+2*time.Second, 200*time.Millisecond
	NewHandler(NewStore(f.pool), opts).Register(e.Group("/v1", web.IronicVersion()))
	srv := httptest.NewServer(e)
	t.Cleanup(func() {
		srv.CloseClientConnections()
		srv.Close()
		cancel()
		<-done
	})
	return &waitFixture{fixture: f, hub: hub, srv: srv, me: f.conductor("c-" + uuid.NewString()[:8])}
}

func (w *waitFixture) request(method, path string, hdr map[string]string, body string) (*http.Response, map[string]any) {
	w.t.Helper()
	req, _ := http.NewRequest(method, w.srv.URL+path, strings.NewReader(body))
	req.Header.Set(web.IronicVersionHeader, "1.82")
	req.Header.Set("Content-Type", "application/json")
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(w.t, err)
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var out map[string]any
	if len(raw) > 0 {
		require.NoError(w.t, json.Unmarshal(raw, &out), string(raw))
	}
	return resp, out
}

// activate reserves a node for the allocation named name, as a conductor.
func (w *waitFixture) activate(name string) {
	w.t.Helper()
	ctx := context.Background()
	var id int64
	require.NoError(w.t, w.pool.QueryRow(ctx, `UPDATE allocations SET conductor_affinity = $1 WHERE name = $2 RETURNING id`,
		w.me, name).Scan(&id))
	require.True(w.t, w.reserve(id, w.me))
}

// uuidOf is the uuid of the allocation named name.
func (w *waitFixture) uuidOf(name string) string {
	w.t.Helper()
	var u uuid.UUID
	require.NoError(w.t, w.pool.QueryRow(context.Background(), `SELECT uuid FROM allocations WHERE name = $1`, name).Scan(&u))
	return u.String()
}

func (w *waitFixture) create(name, rc string) {
	resp, body := w.request("POST", "/v1/allocations", nil, `{"resource_class":"`+rc+`","name":"`+name+`"}`)
	require.Equal(w.t, 201, resp.StatusCode, body)
}

func TestPreferWaitAnswersOnChange(t *testing.T) {
	t.Parallel()
	w := setupWaitMax(t, time.Minute) // a wait that outlasts a loaded machine's delays
	w.node("n1", "gold")
	w.create("a1", "gold")
	go func() {
		dbtest.WaitFor(t, 30*time.Second, "a waiter", func() bool { return w.hub.Waiters() == 1 })
		w.activate("a1")
	}()
	resp, body := w.request("GET", "/v1/allocations/a1", map[string]string{"Prefer": "wait=60"}, "")
	require.Equal(t, 200, resp.StatusCode, body)
	require.Equal(t, "active", body["state"])
	require.NotNil(t, body["node_uuid"])
	require.Equal(t, "wait=60", resp.Header.Get("Preference-Applied"))
	require.Zero(t, w.hub.Waiters())

	// Already finished: at once, still saying the wait applied.
	resp, body = w.request("GET", "/v1/allocations/a1", map[string]string{"Prefer": "wait=3"}, "")
	require.Equal(t, "active", body["state"])
	require.Equal(t, "wait=3", resp.Header.Get("Preference-Applied"))
	// Without the preference: no header.
	resp, _ = w.request("GET", "/v1/allocations/a1", nil, "")
	require.Empty(t, resp.Header.Get("Preference-Applied"))
}

// TestPollHold: with HandlerOptions.PollWindow and PollHold, the first GET
// of an allocating allocation is answered at once; the next, within the
// window, is held until the allocation changes and then answered with its
// new state (no Preference-Applied: the client asked for nothing); an
// allocation no longer allocating is answered at once; a hold that runs
// out answers the state then; a GET after the window is answered at once.
func TestPollHold(t *testing.T) {
	t.Parallel()
	w := setupWaitWith(t, HandlerOptions{MaxWait: time.Minute, PollWindow: time.Minute, PollHold: time.Minute})
	w.node("n1", "gold")
	w.create("a1", "gold")
	path := "/v1/allocations/" + w.uuidOf("a1")
	resp, body := w.request("GET", path, nil, "")
	require.Equal(t, 200, resp.StatusCode, body)
	require.Equal(t, "allocating", body["state"], "a first GET is answered at once")
	go func() {
		dbtest.WaitFor(t, 30*time.Second, "a held poll", func() bool { return w.hub.Waiters() == 1 })
		w.activate("a1")
	}()
	resp, body = w.request("GET", path, nil, "")
	require.Equal(t, 200, resp.StatusCode, body)
	require.Equal(t, "active", body["state"], "the poll was held until the reservation")
	require.Empty(t, resp.Header.Get("Preference-Applied"))
	require.Zero(t, w.hub.Waiters())
	_, body = w.request("GET", path, nil, "")
	require.Equal(t, "active", body["state"])

	// A hold that runs out answers the state then.
	w = setupWaitWith(t, HandlerOptions{MaxWait: time.Minute, PollWindow: time.Minute, PollHold: 200 * time.Millisecond})
	w.create("a2", "gold")
	path = "/v1/allocations/" + w.uuidOf("a2")
	for range 3 {
		resp, body = w.request("GET", path, nil, "")
		require.Equal(t, 200, resp.StatusCode, body)
		require.Equal(t, "allocating", body["state"])
	}

	// A GET after the window (a client polling slower, or someone looking
	// again) is not held, however long the hold: a held one would outlast
	// this client's timeout, an hour short of the hold.
	w = setupWaitWith(t, HandlerOptions{MaxWait: time.Minute, PollWindow: 100 * time.Millisecond, PollHold: time.Hour})
	w.create("a3", "gold")
	client := &http.Client{Timeout: 30 * time.Second}
	for range 3 {
		time.Sleep(150 * time.Millisecond)
		req, _ := http.NewRequest("GET", w.srv.URL+"/v1/allocations/"+w.uuidOf("a3"), nil)
		req.Header.Set(web.IronicVersionHeader, "1.82")
		resp, err := client.Do(req)
		require.NoError(t, err, "a GET after the window was held")
		resp.Body.Close()
		require.Equal(t, 200, resp.StatusCode)
	}

	// A hold longer than the request's timeout (api.request_timeout, as
	// metalloc-api's middleware sets it) ends by half the time left and
	// answers the state, not a 503.
	w = setupWaitWith(t, HandlerOptions{MaxWait: time.Minute, PollWindow: time.Minute, PollHold: time.Hour},
		middleware.ContextTimeoutWithConfig(middleware.ContextTimeoutConfig{Timeout: 2 * time.Second}))
	w.create("a4", "gold")
	for range 3 {
		resp, body = w.request("GET", "/v1/allocations/"+w.uuidOf("a4"), nil, "")
		require.Equal(t, 200, resp.StatusCode, body)
		require.Equal(t, "allocating", body["state"])
	}
}

func TestPreferWaitTimesOutWithCurrentState(t *testing.T) {
	t.Parallel()
	w := setupWait(t)
	w.create("a1", "gold")
	resp, body := w.request("GET", "/v1/allocations/a1", map[string]string{"Prefer": "respond-async, wait=1"}, "")
	require.Equal(t, 200, resp.StatusCode)
	require.Equal(t, "allocating", body["state"])
	require.Equal(t, "wait=1", resp.Header.Get("Preference-Applied"))
	// Capped by MaxWait (3 s), and said so.
	resp, body = w.request("GET", "/v1/allocations/a1", map[string]string{"Prefer": "wait=3600"}, "")
	require.Equal(t, "allocating", body["state"])
	require.Equal(t, "wait=3", resp.Header.Get("Preference-Applied"))
	// An unreadable wait is ignored (RFC 7240).
	resp, _ = w.request("GET", "/v1/allocations/a1", map[string]string{"Prefer": "wait=soon"}, "")
	require.Equal(t, 200, resp.StatusCode)
	require.Empty(t, resp.Header.Get("Preference-Applied"))
	// Unknown allocation: 404 at once, no wait.
	resp, _ = w.request("GET", "/v1/allocations/nope", map[string]string{"Prefer": "wait=3"}, "")
	require.Equal(t, 404, resp.StatusCode)
}

func TestPreferWaitDeletedIs404(t *testing.T) {
	t.Parallel()
	w := setupWaitMax(t, time.Minute) // a wait that outlasts a loaded machine's delays
	w.create("a1", "gold")
	deleted := make(chan int, 1)
	go func() {
		dbtest.WaitFor(t, 30*time.Second, "a waiter", func() bool { return w.hub.Waiters() == 1 })
		resp, _ := w.request("DELETE", "/v1/allocations/a1", nil, "")
		deleted <- resp.StatusCode
	}()
	resp, body := w.request("GET", "/v1/allocations/a1", map[string]string{"Prefer": "wait=60"}, "")
	require.Equal(t, 404, resp.StatusCode, body)
	require.Equal(t, "wait=60", resp.Header.Get("Preference-Applied"))
	// The wait may answer before the DELETE's own answer arrives: wait
	// for it before the server closes.
	require.Equal(t, 204, <-deleted)
}

func TestPreferWaitOnCreate(t *testing.T) {
	t.Parallel()
	w := setupWaitMax(t, time.Minute) // a wait that outlasts a loaded machine's delays
	w.node("n1", "gold")
	go func() {
		dbtest.WaitFor(t, 30*time.Second, "the row", func() bool {
			return dbtest.Count(t, w.pool, `SELECT count(*) FROM allocations WHERE name = 'a1'`) == 1
		})
		w.activate("a1")
	}()
	resp, body := w.request("POST", "/v1/allocations", map[string]string{"Prefer": "wait=60"}, `{"resource_class":"gold","name":"a1"}`)
	require.Equal(t, 201, resp.StatusCode, body)
	require.Equal(t, "active", body["state"])
	require.Equal(t, "wait=60", resp.Header.Get("Preference-Applied"))
	require.Contains(t, resp.Header.Get("Location"), body["uuid"])
	// Nothing fits and nobody works: the wait ends with the allocating row.
	resp, body = w.request("POST", "/v1/allocations", map[string]string{"Prefer": "wait=1"}, `{"resource_class":"gold","name":"a2"}`)
	require.Equal(t, 201, resp.StatusCode, body)
	require.Equal(t, "allocating", body["state"])
}

// An allocation may be named "events": only an event-stream request gets
// the stream.
func TestAllocationNamedEvents(t *testing.T) {
	t.Parallel()
	w := setupWait(t)
	resp, _ := w.request("GET", "/v1/allocations/events", nil, "")
	require.Equal(t, 404, resp.StatusCode)
	w.create("events", "gold")
	resp, body := w.request("GET", "/v1/allocations/events", nil, "")
	require.Equal(t, 200, resp.StatusCode)
	require.Equal(t, "events", body["name"])
	resp, body = w.request("PATCH", "/v1/allocations/events", nil, `[{"op":"add","path":"/extra/x","value":"y"}]`)
	require.Equal(t, 200, resp.StatusCode, body)
	resp, _ = w.request("DELETE", "/v1/allocations/events", nil, "")
	require.Equal(t, 204, resp.StatusCode)
}

// openStream opens the event stream at microversion 1.82 and checks it
// started.
func openStream(t *testing.T, url string, hdr map[string]string) *webtest.SSE {
	t.Helper()
	h := map[string]string{web.IronicVersionHeader: "1.82"}
	for k, v := range hdr {
		h[k] = v
	}
	s := webtest.OpenSSE(t, url, h)
	require.Equal(t, 200, s.Resp.StatusCode)
	require.Equal(t, "text/event-stream", s.Resp.Header.Get("Content-Type"))
	return s
}

var summary = webtest.Summary

func TestEventStreamOrderResumeFilters(t *testing.T) {
	t.Parallel()
	w := setupWait(t)
	w.node("n1", "gold")
	all := openStream(t, w.srv.URL+"/v1/allocations/events", nil)
	silver := openStream(t, w.srv.URL+"/v1/allocations/events?resource_class=silver", nil)
	active := openStream(t, w.srv.URL+"/v1/allocations/events?state=active", nil)

	w.create("a1", "gold")
	w.create("s1", "silver")
	w.activate("a1")
	resp, _ := w.request("DELETE", "/v1/allocations/s1", nil, "")
	require.Equal(t, 204, resp.StatusCode)

	evs := all.Next(t, 4)
	require.Equal(t, []string{"created a1 allocating", "created s1 allocating", "updated a1 active", "deleted s1 allocating"}, summary(evs))
	require.NotNil(t, evs[2].Data["node_uuid"])
	for i := 1; i < len(evs); i++ {
		a, _ := ParseEventID(evs[i-1].ID)
		b, ok := ParseEventID(evs[i].ID)
		require.True(t, ok)
		require.Equal(t, a+1, b, "ids increase by one: %s %s", evs[i-1].ID, evs[i].ID)
	}
	require.Equal(t, []string{"created s1 allocating", "deleted s1 allocating"}, summary(silver.Next(t, 2)))
	require.Equal(t, []string{"updated a1 active"}, summary(active.Next(t, 1)))
	all.Quiet(t, 300*time.Millisecond)

	// Resume after the first event: the other three, in order, then live.
	resumed := openStream(t, w.srv.URL+"/v1/allocations/events", map[string]string{"Last-Event-ID": evs[0].ID})
	require.Equal(t, summary(evs[1:]), summary(resumed.Next(t, 3)))
	w.create("a2", "gold")
	require.Equal(t, []string{"created a2 allocating"}, summary(resumed.Next(t, 1)))
	require.Equal(t, []string{"created a2 allocating"}, summary(all.Next(t, 1)))
	// The query parameter does the same (EventSource cannot set headers).
	q := openStream(t, w.srv.URL+"/v1/allocations/events?last_event_id="+evs[2].ID, nil)
	require.Equal(t, []string{"deleted s1 allocating", "created a2 allocating"}, summary(q.Next(t, 2)))

	// A bad id is a 400.
	resp, body := w.request("GET", "/v1/allocations/events", map[string]string{"Accept": "text/event-stream", "Last-Event-ID": "x"}, "")
	require.Equal(t, 400, resp.StatusCode, body)

	// Pruned past the id: a reset event first, then what is left.
	_, err := w.pool.Exec(context.Background(), `SELECT metalloc_prune_allocation_events('1 hour', 1)`)
	require.NoError(t, err)
	r := openStream(t, w.srv.URL+"/v1/allocations/events", map[string]string{"Last-Event-ID": evs[0].ID})
	first := r.Next(t, 1)[0]
	require.Equal(t, "reset", first.Kind)
	require.Equal(t, []string{"created a2 allocating"}, summary(r.Next(t, 1)))
	// An id from the future (another database): reset, then live.
	f := openStream(t, w.srv.URL+"/v1/allocations/events", map[string]string{"Last-Event-ID": "999999"})
	require.Equal(t, "reset", f.Next(t, 1)[0].Kind)
	w.create("a3", "gold")
	require.Equal(t, []string{"created a3 allocating"}, summary(f.Next(t, 1)))
}

// Many subscribers on one hub each get every event, in the same order.
func TestEventStreamManySubscribers(t *testing.T) {
	t.Parallel()
	w := setupWait(t)
	const subs, allocs = 50, 40
	streams := make([]*webtest.SSE, subs)
	for i := range streams {
		streams[i] = openStream(t, w.srv.URL+"/v1/allocations/events", nil)
	}
	dbtest.WaitFor(t, 30*time.Second, "subscribers", func() bool { return w.hub.Streams() == subs })
	for i := range allocs {
		// One transaction per event batch the hub may see: many batches.
		_, err := w.pool.Exec(context.Background(),
			`INSERT INTO allocations (uuid, name, resource_class) VALUES (gen_random_uuid(), $1, 'gold')`, "m"+strings.Repeat("x", i%3)+uuid.NewString()[:6])
		require.NoError(t, err)
	}
	want := summary(streams[0].Next(t, allocs))
	for _, s := range streams[1:] {
		require.Equal(t, want, summary(s.Next(t, allocs)))
	}
}

// A change whose notification the hub's listener never got (its
// connection was killed before the commit) still ends the wait: after the
// listener reconnects every waiter looks again. The hub is listening
// before the wait starts, and the wait (60 s) outlasts a loaded machine's
// delays: the waiter must be woken by the new look, long before its wait
// would end (CI failed it when a 3 s wait ended first, the listener having
// started late, and an expired wait reads the row too).
func TestPreferWaitAfterListenerLoss(t *testing.T) {
	t.Parallel()
	w := setupWaitMax(t, time.Minute)
	w.node("n1", "gold")
	w.create("a1", "gold")
	listeners := `SELECT count(*) FROM pg_stat_activity
		WHERE datname = current_database() AND query LIKE 'LISTEN %' AND position($1 in query) > 0`
	dbtest.WaitFor(t, 30*time.Second, "the hub listening", func() bool { return dbtest.Count(t, w.pool, listeners, EventsChannel) == 1 })
	go func() {
		// Generous bounds: on a loaded machine the waiter may take seconds
		// to start.
		dbtest.WaitFor(t, 30*time.Second, "a waiter", func() bool { return w.hub.Waiters() == 1 })
		ctx := context.Background()
		tx, err := w.pool.Begin(ctx)
		require.NoError(t, err)
		defer tx.Rollback(ctx)
		var killed int
		require.NoError(t, tx.QueryRow(ctx, `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
			WHERE datname = current_database() AND query LIKE 'LISTEN %' AND position($1 in query) > 0`, EventsChannel).Scan(&killed))
		require.Equal(t, 1, killed, "the listener's connection killed")
		var id int64
		require.NoError(t, tx.QueryRow(ctx, `UPDATE allocations SET state = 'error', last_error = 'x', updated_at = now()
			WHERE name = 'a1' RETURNING id`).Scan(&id))
		require.NoError(t, tx.Commit(ctx))
		dbtest.WaitFor(t, 30*time.Second, "the waiter woken by the listener's new look", func() bool { return w.hub.Waiters() == 0 })
	}()
	resp, body := w.request("GET", "/v1/allocations/a1", map[string]string{"Prefer": "wait=60"}, "")
	require.Equal(t, 200, resp.StatusCode, body)
	require.Equal(t, "error", body["state"])
}

// Shutdown answers open waits at once and ends the streams.
func TestHubShutdownEndsWaitsAndStreams(t *testing.T) {
	t.Parallel()
	w := setupWait(t)
	w.create("a1", "gold")
	s := openStream(t, w.srv.URL+"/v1/allocations/events", nil)
	go func() {
		dbtest.WaitFor(t, 30*time.Second, "a waiter", func() bool { return w.hub.Waiters() == 1 })
		w.hub.Shutdown()
	}()
	resp, body := w.request("GET", "/v1/allocations/a1", map[string]string{"Prefer": "wait=3"}, "")
	require.Equal(t, 200, resp.StatusCode)
	require.Equal(t, "allocating", body["state"])
	_, err := io.ReadAll(s.Resp.Body) // the stream ends
	require.NoError(t, err)
}

// EndStreams (metalloc-api's listener closing at SIGTERM) ends the
// streams, and one opened after it, but not the waits: a wait open then
// still answers with the allocation's change.
func TestHubEndStreamsKeepsWaits(t *testing.T) {
	t.Parallel()
	w := setupWaitMax(t, time.Minute)
	w.node("n1", "gold")
	w.create("a1", "gold")
	s := openStream(t, w.srv.URL+"/v1/allocations/events", nil)
	go func() {
		dbtest.WaitFor(t, 30*time.Second, "a waiter", func() bool { return w.hub.Waiters() == 1 })
		w.hub.EndStreams()
		_, err := io.ReadAll(s.Resp.Body) // the stream ends
		require.NoError(t, err)
		later := openStream(t, w.srv.URL+"/v1/allocations/events", nil)
		_, err = io.ReadAll(later.Resp.Body)
		require.NoError(t, err)
		require.Equal(t, 1, w.hub.Waiters(), "the wait goes on")
		w.activate("a1")
	}()
	resp, body := w.request("GET", "/v1/allocations/a1", map[string]string{"Prefer": "wait=60"}, "")
	require.Equal(t, 200, resp.StatusCode, body)
	require.Equal(t, "active", body["state"])
}

// TestHubIdleWithoutStreams: with waiters only, the hub neither numbers
// nor reads the event log, and a waiter is not woken by changes that
// leave its allocation allocating; a stream opened later starts with the
// next change (what committed before it is numbered, not sent), and a
// stream resuming from before the idle spell gets every event since.
func TestHubIdleWithoutStreams(t *testing.T) {
	t.Parallel()
	w := setupWait(t)
	w.node("n1", "gold")
	first := openStream(t, w.srv.URL+"/v1/allocations/events", nil)
	w.create("a0", "gold")
	seen := first.Next(t, 1)
	require.Equal(t, []string{"created a0 allocating"}, summary(seen))
	first.Close()
	dbtest.WaitFor(t, 30*time.Second, "the stream to close", func() bool { return w.hub.Streams() == 0 })
	// The hub's reader may still be in a pass that began while the stream
	// was open, and that pass numbers what has committed when it gets to
	// it (it numbered a1's creation below when the numbering took 100 ms:
	// JIT, migration 00046): wait until the reader is in no pass (one that
	// starts now finds no stream), after which nothing is numbered until a
	// stream opens.
	dbtest.WaitFor(t, 30*time.Second, "the hub's reader to end its pass", func() bool { return !w.hub.reading.Load() })

	// A waiter on an allocating row: the creation of other rows and a
	// change that keeps it allocating do not wake it.
	w.create("a1", "gold")
	h := w.hub.Watch(uuid.MustParse(w.uuidOf("a1")))
	defer h.Close()
	w.create("a2", "gold")
	_, err := w.pool.Exec(context.Background(), `SELECT pg_notify($1, $2)`, EventsChannel, w.uuidOf("a1")+" allocating")
	require.NoError(t, err)
	select {
	case <-h.C:
		t.Fatal("a waiter was woken by a change that left its allocation allocating")
	case <-time.After(300 * time.Millisecond):
	}
	w.activate("a1")
	select {
	case <-h.C:
	case <-time.After(30 * time.Second):
		t.Fatal("the waiter was not woken when its allocation became active")
	}
	// Nobody streamed: nothing was numbered since the stream closed.
	require.Equal(t, 3, dbtest.Count(t, w.pool, `SELECT count(*) FROM allocation_events WHERE seq IS NULL`))

	// A new stream starts with the next change.
	later := openStream(t, w.srv.URL+"/v1/allocations/events", nil)
	w.create("a3", "gold")
	require.Equal(t, []string{"created a3 allocating"}, summary(later.Next(t, 1)))
	// Resuming from the first stream's last event gets the idle spell's.
	resumed := openStream(t, w.srv.URL+"/v1/allocations/events", map[string]string{"Last-Event-ID": seen[0].ID})
	require.Equal(t, []string{"created a1 allocating", "created a2 allocating", "updated a1 active", "created a3 allocating"},
		summary(resumed.Next(t, 4)))
}

// TestEventsPrunedByCount: the event table is pruned as soon as it grows
// PruneMargin events past MaxEvents, not only every PruneInterval (it
// reached 146 % of its cap between once-a-minute prunes).
func TestEventsPrunedByCount(t *testing.T) {
	t.Parallel()
	f := setup(t)
	const maxEvents, margin = 40, 10
	hub := NewHub(f.pool, HubOptions{Log: zaptest.NewLogger(t), MaxEvents: maxEvents, PruneMargin: margin,
		PruneInterval: time.Hour}) // the periodic prune never comes in this test
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); hub.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	// Listening before the events start.
	dbtest.WaitFor(t, 30*time.Second, "the hub to listen", func() bool {
		return dbtest.Count(t, f.pool, `SELECT count(*) FROM pg_stat_activity WHERE query LIKE 'LISTEN%' AND datname = current_database()`) > 0
	})
	for range 200 {
		dbtest.Allocation(t, f.pool, dbtest.AllocationSpec{})
	}
	events := func() int { return dbtest.Count(t, f.pool, `SELECT count(*) FROM allocation_events`) }
	dbtest.WaitFor(t, 30*time.Second, "the events pruned down to the cap", func() bool { return events() <= maxEvents+margin })
}
