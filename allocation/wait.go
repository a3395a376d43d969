package allocation

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/metalloc/metalloc/auth"
	"github.com/metalloc/metalloc/node"
	"github.com/metalloc/metalloc/web"
)

// Defaults of the extensions without polling.
const (
	// DefaultMaxWait caps Prefer: wait (api.max_wait).
	DefaultMaxWait = 60 * time.Second
	// DefaultEventsHeartbeat is how often an idle event stream gets a
	// comment line (api.events_heartbeat).
	DefaultEventsHeartbeat = 15 * time.Second
)

// errGone: the allocation waited for was deleted meanwhile.
var errGone = errors.New("allocation deleted while waiting")

// LongRequest reports whether r may outlive api.request_timeout: POST
// /v1/allocations or GET /v1/allocations/{ident} with Prefer: wait, or the
// event stream. metalloc-api does not apply its whole-request timeout to
// those; their handlers bound each database read by it instead.
func LongRequest(r *http.Request) bool {
	p := r.URL.Path
	switch {
	case r.Method == http.MethodPost && p == "/v1/allocations":
		_, ok := web.PreferWait(r.Header)
		return ok
	case r.Method == http.MethodGet && strings.HasPrefix(p, "/v1/allocations/") && !strings.Contains(p[len("/v1/allocations/"):], "/"):
		_, ok := web.PreferWait(r.Header)
		return ok || web.AcceptsEventStream(r.Header)
	}
	return false
}

// preferWait is the wait the request asks for, capped by MaxWait; ok is
// false without a Hub (the extension is off) or without the preference.
func (h *Handler) preferWait(c echo.Context) (time.Duration, bool) {
	return PreferredWait(c.Request().Header, h.opts.Hub, h.opts.MaxWait)
}

// PreferredWait is the wait a request's Prefer: wait asks for, capped by
// maxWait; ok is false without a hub (the extension is off) or without
// the preference.
func PreferredWait(hdr http.Header, hub *Hub, maxWait time.Duration) (time.Duration, bool) {
	if hub == nil {
		return 0, false
	}
	n, ok := web.PreferWait(hdr)
	if !ok {
		return 0, false
	}
	return min(time.Duration(n)*time.Second, maxWait), true
}

// applied says the wait was honoured, with the seconds actually applied
// (RFC 7240 Preference-Applied), and that answers vary with Prefer.
func (h *Handler) applied(c echo.Context, wait time.Duration) {
	PreferenceApplied(c, wait, h.opts.RequestTimeout)
}

// PreferenceApplied answers a Prefer: wait honoured for wait: the
// Preference-Applied and Vary headers, and the connection's deadlines
// lifted for the wait (requestTimeout: api.request_timeout).
func PreferenceApplied(c echo.Context, wait, requestTimeout time.Duration) {
	hd := c.Response().Header()
	hd.Set("Preference-Applied", "wait="+strconv.Itoa(int(wait/time.Second)))
	hd.Add("Vary", "Prefer")
	// The wait may outlast the server's read timeout, which would cancel
	// the request: lift it (the request has been read), and give the write
	// the wait's length on top of the usual.
	rc := http.NewResponseController(c.Response())
	_ = rc.SetReadDeadline(time.Time{})
	_ = rc.SetWriteDeadline(time.Now().Add(wait + max(requestTimeout, 30*time.Second)))
}

// boundRequest gives the request's context RequestTimeout for the work
// before a wait (the creation of POST ... Prefer: wait); unboundRequest
// takes it off again.
func (h *Handler) boundRequest(c echo.Context) context.Context {
	r := c.Request()
	if h.opts.RequestTimeout <= 0 {
		return r.Context()
	}
	ctx, cancel := context.WithTimeout(r.Context(), h.opts.RequestTimeout)
	c.Set("allocation.unbound", r)
	c.Set("allocation.cancel", cancel)
	c.SetRequest(r.WithContext(ctx))
	return ctx
}

func (h *Handler) unboundRequest(c echo.Context) {
	if r, ok := c.Get("allocation.unbound").(*http.Request); ok {
		c.Get("allocation.cancel").(context.CancelFunc)()
		c.SetRequest(r)
	}
}

// readContext bounds one database read of a long request (LongRequest) by
// RequestTimeout; other requests already have their whole-request timeout.
func (h *Handler) readContext(c echo.Context) (context.Context, context.CancelFunc) {
	ctx := c.Request().Context()
	if h.opts.RequestTimeout > 0 && LongRequest(c.Request()) {
		return context.WithTimeout(ctx, h.opts.RequestTimeout)
	}
	return ctx, func() {}
}

// show reads allocation ident as GET /v1/allocations/{ident} does: 404 when
// unknown or hidden from the caller.
func (h *Handler) show(c echo.Context, ident string) (View, error) {
	v, err := h.lookup(c, ident)
	if err != nil {
		return v, err
	}
	return v, h.checkAllocation(c, v, ident, "")
}

// await waits until allocation v (read as ident) leaves allocating, for at
// most wait, and returns it as it is then; errGone if it was deleted. w,
// when not nil, was started before v was read; otherwise await starts one
// and reads again.
func (h *Handler) await(c echo.Context, v View, ident string, w *Waiter, wait time.Duration) (View, error) {
	if v.State != StateAllocating || wait <= 0 {
		return v, nil
	}
	reread := func() (View, error) {
		nv, err := h.lookup(c, v.Uuid.String())
		var apiErr *web.Error
		if errors.As(err, &apiErr) && apiErr.Status == http.StatusNotFound {
			return nv, errGone
		} else if err != nil {
			return nv, err
		}
		return nv, h.checkAllocation(c, nv, ident, "")
	}
	var err error
	if w == nil || w.uuid != v.Uuid {
		w = h.opts.Hub.Watch(v.Uuid)
		defer w.Close()
		if v, err = reread(); err != nil || v.State != StateAllocating {
			return v, err
		}
	}
	ctx := c.Request().Context()
	timeout := time.NewTimer(wait)
	defer timeout.Stop()
	for {
		select {
		case <-w.C:
		case <-timeout.C:
			return reread() // the current state, even if a notification was lost
		case <-ctx.Done():
			return v, ctx.Err()
		case <-h.opts.Hub.stopping:
			return reread() // shutting down: answer now
		}
		if v, err = reread(); err != nil || v.State != StateAllocating {
			return v, err
		}
	}
}

// events serves GET /v1/allocations/events (a metalloc extension): Server-
// Sent Events, one per allocation created, state change or deletion, in
// order, id the event's seq (1, 2, ...; Event.ID), event
// created/updated/deleted, data a JSON object (uuid, name, state, resource_class, owner from 1.60,
// node_uuid, last_error, at). Filters: resource_class, owner (1.60),
// state. Last-Event-ID (header, or the last_event_id query parameter)
// resumes after that event; an id older than the pruned events, or newer
// than any given, starts with a reset event (re-list, then follow). Without one the stream starts
// with the next change. A comment line every EventsHeartbeat keeps it
// open. Access as GET /v1/allocations: a caller who may list only its
// project's allocations sees only their events. A request that does not
// accept text/event-stream gets the allocation named "events" instead.
func (h *Handler) events(c echo.Context) error {
	r := c.Request()
	if !web.AcceptsEventStream(r.Header) || h.opts.Hub == nil {
		c.SetParamNames("ident")
		c.SetParamValues("events")
		return h.get(c)
	}
	ver := web.RequestVersion(c)
	var f struct{ owner, rc, state *string }
	if s := c.QueryParam("owner"); s != "" {
		if !ver.AtLeast(1, 60) {
			return web.Errorf(http.StatusNotAcceptable, "Request not acceptable.")
		}
		f.owner = &s
	}
	if s := c.QueryParam("resource_class"); s != "" {
		f.rc = &s
	}
	if s := c.QueryParam("state"); s != "" {
		f.state = &s
	}
	project, err := node.ListScope(c, h.opts.Rules, "allocation", f.owner)
	if err != nil {
		return err
	}
	var cur int64
	resume := r.Header.Get("Last-Event-ID")
	if resume == "" {
		resume = c.QueryParam("last_event_id")
	}
	if resume != "" {
		var ok bool
		if cur, ok = ParseEventID(resume); !ok {
			return web.BadRequest("Invalid Last-Event-ID %q: expected the id of an event (a non-negative integer)", resume)
		}
	}
	hub := h.opts.Hub
	sub := hub.subscribe() // before reading the table: no batch is missed
	defer hub.unsubscribe(sub)

	reset := false
	hubCur, hubOK := hub.Cursor()
	var head EventsHeadRow
	if resume != "" || !hubOK {
		ctx, cancel := h.readContext(c)
		if !hubOK {
			// The hub's reader idled (no stream): number what committed
			// until now, so that the head is now and the stream starts
			// with the next change.
			_, err = hub.q.SequenceEvents(ctx)
		}
		if err == nil {
			head, err = hub.q.EventsHead(ctx)
		}
		cancel()
		if err != nil {
			return err
		}
	}
	switch {
	case resume == "" && hubOK:
		cur = hubCur // no database read: opening many streams stays cheap
	case resume == "":
		cur = head.LastSeq
	case cur < head.PrunedSeq:
		reset, cur = true, head.PrunedSeq
	case cur > head.LastSeq: // not from this database (restored from a backup?)
		reset, cur = true, head.LastSeq
	}

	// Streams outlive the server's read and write timeouts: lift the read
	// deadline, and give every write its own.
	rc := http.NewResponseController(c.Response())
	_ = rc.SetReadDeadline(time.Time{})
	hd := c.Response().Header()
	hd.Set("Content-Type", "text/event-stream")
	hd.Set("Cache-Control", "no-cache")
	hd.Set("X-Accel-Buffering", "no")
	c.Response().WriteHeader(http.StatusOK)
	bw := bufio.NewWriterSize(c.Response(), 4096)
	writeTimeout := max(h.opts.EventsHeartbeat*2, 30*time.Second)
	flush := func() error {
		_ = rc.SetWriteDeadline(time.Now().Add(writeTimeout))
		if err := bw.Flush(); err != nil {
			return err
		}
		return rc.Flush()
	}
	bw.WriteString("retry: 1000\n")
	if reset {
		bw.WriteString("id: " + strconv.FormatInt(cur, 10) + "\nevent: reset\ndata: {}\n\n")
	} else {
		bw.WriteString(": stream of allocation events after " + strconv.FormatInt(cur, 10) + "\n\n")
	}
	if err := flush(); err != nil {
		return nil
	}

	creds := auth.Caller(r.Context())
	allowed := map[string]bool{} // per owner: baremetal:allocation:get
	visible := func(e *Event) bool {
		if (f.rc != nil && e.ResourceClass != *f.rc) || (f.state != nil && e.State != *f.state) ||
			(f.owner != nil && deref(e.Owner) != *f.owner) || (project != nil && deref(e.Owner) != *project) {
			return false
		}
		if h.opts.Rules.Open() {
			return true
		}
		owner := deref(e.Owner)
		ok, seen := allowed[owner]
		if !seen {
			if len(allowed) > 1024 {
				clear(allowed)
			}
			ok = h.opts.Rules.Allowed(ruleGet, auth.Target(creds, "allocation.owner", owner), creds)
			allowed[owner] = ok
		}
		return ok
	}
	send := func(events []Event) {
		for i := range events {
			e := &events[i]
			if e.ID > cur {
				cur = e.ID
				if visible(e) {
					writeEvent(bw, e, ver)
				}
			}
		}
	}
	// catchUp reads the table from cur until it has caught up with to.
	catchUp := func(to int64) error {
		for cur < to {
			ctx, cancel := h.readContext(c)
			events, err := readEvents(ctx, hub.q, cur, hub.opts.ReadLimit)
			cancel()
			if err != nil {
				return err
			}
			if len(events) == 0 {
				return nil
			}
			send(events)
			if err := flush(); err != nil {
				return err
			}
		}
		return nil
	}
	if to, ok := hub.Cursor(); ok {
		if err := catchUp(to); err != nil {
			return nil // the status is sent; the client reconnects with its last id
		}
	}
	heartbeat := time.NewTicker(h.opts.EventsHeartbeat)
	defer heartbeat.Stop()
	for {
		err = nil
		select {
		case <-r.Context().Done():
			return nil
		case <-hub.streamsEnd:
			return nil // shutting down: the client reconnects elsewhere with its last id
		case b := <-sub.ch:
			if cur < b.from {
				err = catchUp(b.to)
			} else {
				send(b.events)
			}
		case <-sub.lagged:
			to, _ := hub.Cursor()
			err = catchUp(to)
		case <-heartbeat.C:
			bw.WriteString(":\n\n")
		}
		if err == nil {
			err = flush()
		}
		if err != nil {
			return nil
		}
	}
}

// writeEvent writes e as one SSE event: id, event (its kind) and data, a
// JSON object with the allocation's uuid, name, state, resource_class,
// owner (from 1.60), node_uuid, last_error and at (when the change's
// transaction started, RFC 3339).
func writeEvent(w *bufio.Writer, e *Event, ver web.Version) {
	d := map[string]any{"uuid": e.UUID.String(), "name": e.Name, "state": e.State,
		"resource_class": e.ResourceClass, "node_uuid": nil, "last_error": e.LastError,
		"at": e.At.UTC().Format(time.RFC3339Nano)}
	if ver.AtLeast(1, 60) {
		d["owner"] = e.Owner
	}
	if e.NodeUUID != nil {
		d["node_uuid"] = e.NodeUUID.String()
	}
	data, _ := json.Marshal(d)
	w.WriteString("id: " + strconv.FormatInt(e.ID, 10) + "\nevent: " + e.Kind + "\ndata: ")
	w.Write(data)
	w.WriteString("\n\n")
}
