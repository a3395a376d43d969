package allocation

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/zap"

	"github.com/metalloc/metalloc/db"
)

// EventsChannel is the NOTIFY channel of allocation changes (triggers
// allocations_event and allocation_groups_event, migrations 00007, 00011
// and 00014): the payload is the allocation's or group's uuid, a space and
// its new state ("deleted" for a deletion); the numbering's own
// notification (metalloc_sequence_allocation_events) has an empty
// payload. Conductors do not listen to it.
const EventsChannel = "metalloc_allocation_events"

// parseEventPayload reads an EventsChannel payload: the uuid and the state
// after the change ("" when the payload has none, as before migration
// 00014); ok is false for a payload without a uuid.
func parseEventPayload(p string) (u uuid.UUID, state string, ok bool) {
	id, rest, _ := strings.Cut(p, " ")
	state, _, _ = strings.Cut(rest, " ") // what follows is the cache's (cache.go)
	u, err := uuid.Parse(id)
	return u, state, err == nil
}

// ParseEventID reads an event id (the SSE id: the event's seq, a
// non-negative decimal integer); ok is false for anything else.
func ParseEventID(s string) (int64, bool) {
	n, err := strconv.ParseInt(strings.TrimSpace(s), 10, 64)
	return n, err == nil && n >= 0
}

// Event kinds. The group_ kinds are an allocation group's (package
// allocgroup; UUID is the group's, NodeUUID nil); its members have the
// allocation kinds. Leases' events (lease.start, lease.ending, lease.end,
// lease.node_replaced, lease.degraded; UUID the lease's) are written by
// the conductors (conductor/leases.go, conductor/leases_replace.go).
const (
	EventCreated      = "created"
	EventUpdated      = "updated" // the state changed
	EventDeleted      = "deleted"
	EventGroupCreated = "group_created"
	EventGroupUpdated = "group_updated" // the state changed
	EventGroupDeleted = "group_deleted"
)

// Event is one change of an allocation, with the allocation as it was
// right after it (before it, for deleted).
type Event struct {
	// ID is the event's seq: events are numbered 1, 2, ... in the order
	// their transactions committed (give or take a numbering round), and
	// every event below a delivered one was delivered before it
	// (migrations/00007_allocation_events.sql).
	ID            int64
	At            time.Time // the writing transaction's start
	Kind          string    // EventCreated, EventUpdated or EventDeleted
	UUID          uuid.UUID
	Name          *string
	State         string
	ResourceClass string
	Owner         *string
	NodeUUID      *uuid.UUID
	LastError     *string
}

func eventFromRow(r EventsAfterRow) Event {
	return Event{ID: r.Seq, At: r.At, Kind: r.Kind, UUID: r.AllocationUuid, Name: r.Name,
		State: r.State, ResourceClass: r.ResourceClass, Owner: r.Owner, NodeUUID: r.NodeUuid, LastError: r.LastError}
}

// batch is a run of events the hub read: every event in (from, to], in
// order. A stream whose cursor is below from missed some and reads them
// from the table.
type batch struct {
	from, to int64
	events   []Event
}

// HubOptions configures a Hub.
type HubOptions struct {
	Log *zap.Logger
	// Retention and MaxEvents bound the event table: events older than
	// Retention (default 1h) or beyond the MaxEvents newest (default
	// 100000) are pruned every PruneInterval (default 1m, jittered), and
	// at once whenever PruneMargin events were notified since the last
	// prune (default MaxEvents/10): the table never holds much more than
	// MaxEvents + PruneMargin events, however fast they come. A stream
	// resuming from a pruned event gets a reset event.
	Retention     time.Duration
	MaxEvents     int64
	PruneInterval time.Duration
	PruneMargin   int64
	// ReadLimit is how many events one read fetches (default 1000).
	ReadLimit int32
	// CacheSize bounds the cache of allocations GET and Prefer: wait are
	// answered from (cache.go; default DefaultCacheSize, negative: no
	// cache).
	CacheSize int
}

// Hub is one API process's view of allocation changes: ONE LISTEN
// connection (db.ListenPayloads on EventsChannel) whose notifications wake
// the waiters of that allocation (Watch, for Prefer: wait), and one reader
// that follows the event table and hands every batch to all streams
// (GET /v1/allocations/events). After the listener reconnects (a database
// restart) every waiter is woken to look again, and the reader reads from
// where it was: nothing notified while it was away is lost. Memory is a few
// hundred bytes per waiter or stream (the HTTP connection and its
// goroutine cost more; see `metalloc-manage bench waiters`).
type Hub struct {
	pool *pgxpool.Pool
	q    *Queries
	opts HubOptions

	mu       sync.Mutex
	waiters  map[uuid.UUID][]*Waiter
	streams  map[*subscription]struct{}
	cursor   int64
	cursorOK bool // cursor was read from the table

	poke chan struct{} // wakes the reader (capacity 1)
	// listened is set once the listener has connected (reconnected, on the
	// listener's goroutine only).
	listened bool

	sincePrune atomic.Int64  // events notified since the last prune
	pruneNow   chan struct{} // wakes the pruner (capacity 1)

	// reading is true while the reader is in a pass (set before the pass
	// looks for streams): once the last stream closed, a false here means
	// no pass that began while one followed is still numbering (tests wait
	// on it; Cursor's ok drops earlier, at the next notification).
	reading atomic.Bool

	cache *viewCache // nil: no cache (HubOptions.CacheSize < 0)

	stopping   chan struct{} // closed by Shutdown: waits answer
	stopOnce   sync.Once
	streamsEnd chan struct{} // closed by EndStreams and Shutdown: streams end
	endOnce    sync.Once
}

// NewHub returns a Hub on pool; Run makes it work.
func NewHub(pool *pgxpool.Pool, opts HubOptions) *Hub {
	if opts.Log == nil {
		opts.Log = zap.NewNop()
	}
	if opts.Retention <= 0 {
		opts.Retention = time.Hour
	}
	if opts.MaxEvents <= 0 {
		opts.MaxEvents = 100000
	}
	if opts.PruneInterval <= 0 {
		opts.PruneInterval = time.Minute
	}
	if opts.ReadLimit <= 0 {
		opts.ReadLimit = 1000
	}
	if opts.PruneMargin <= 0 {
		opts.PruneMargin = max(1, opts.MaxEvents/10)
	}
	h := &Hub{pool: pool, q: New(pool), opts: opts, waiters: map[uuid.UUID][]*Waiter{},
		streams: map[*subscription]struct{}{}, poke: make(chan struct{}, 1), pruneNow: make(chan struct{}, 1),
		stopping: make(chan struct{}), streamsEnd: make(chan struct{})}
	if opts.CacheSize >= 0 {
		h.cache = newViewCache(opts.CacheSize)
	}
	return h
}

// Run listens, reads and prunes until ctx ends; it returns when all its
// goroutines have.
func (h *Hub) Run(ctx context.Context) {
	var wg sync.WaitGroup
	wg.Go(func() {
		db.ListenPayloadsLost(ctx, h.pool, EventsChannel, h.opts.Log, h.notified, h.reconnected, h.lost)
	})
	wg.Go(func() { h.prune(ctx) })
	h.read(ctx)
	wg.Wait()
}

// Stopping is closed by Shutdown: waits answer at once.
func (h *Hub) Stopping() <-chan struct{} { return h.stopping }

// EndStreams ends every event stream, open or opened later (clients
// reconnect, to another server, with their Last-Event-ID), so that a
// stopping HTTP server need not wait for them; waits go on. metalloc-api
// calls it as its listener closes (cli.HTTP.EndStreams).
func (h *Hub) EndStreams() { h.endOnce.Do(func() { close(h.streamsEnd) }) }

// Shutdown ends every wait (answered with the allocation's state now, as
// when the wait expires) and every stream (EndStreams), so that the HTTP
// server can stop without waiting for them: metalloc-api calls it at the
// end of its shutdown grace (cli.HTTP.Stopping). Run keeps going until its
// context ends.
func (h *Hub) Shutdown() {
	h.EndStreams()
	h.stopOnce.Do(func() { close(h.stopping) })
}

// Waiter is a wait for one allocation's next change: C receives (capacity
// 1, never closed) when a change of it commits, and when the hub's
// listener reconnected (changes may have been missed). Look again after
// every receive.
type Waiter struct {
	C    chan struct{}
	uuid uuid.UUID
	hub  *Hub
}

// Watch starts a wait for changes of allocation u. Call it before reading
// the allocation, so that no change between the read and the wait is
// missed, and Close it when done.
func (h *Hub) Watch(u uuid.UUID) *Waiter {
	w := &Waiter{C: make(chan struct{}, 1), uuid: u, hub: h}
	h.mu.Lock()
	h.waiters[u] = append(h.waiters[u], w)
	h.mu.Unlock()
	return w
}

// Close ends the wait.
func (w *Waiter) Close() {
	h := w.hub
	h.mu.Lock()
	defer h.mu.Unlock()
	ws := h.waiters[w.uuid]
	for i, x := range ws {
		if x == w {
			ws[i] = ws[len(ws)-1]
			ws[len(ws)-1] = nil
			ws = ws[:len(ws)-1]
			break
		}
	}
	if len(ws) == 0 {
		delete(h.waiters, w.uuid)
	} else {
		h.waiters[w.uuid] = ws
	}
}

// Waiters is how many waits are open (for tests and the bench).
func (h *Hub) Waiters() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for _, ws := range h.waiters {
		n += len(ws)
	}
	return n
}

func wake(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// notified handles one notification: the allocation's waiters look again
// if it left allocating (a waiter only waits while it is allocating: the
// creation's notification, or a group's return to allocating, would only
// cost it a read), and the reader reads if any stream follows.
func (h *Hub) notified(payload string) {
	if h.cache != nil {
		// Before the waiters wake: their next read finds the entry
		// updated or gone.
		h.cache.notified(payload)
	}
	u, state, ok := parseEventPayload(payload)
	if ok && h.sincePrune.Add(1) >= h.opts.PruneMargin {
		wake(h.pruneNow) // the table may be PruneMargin past MaxEvents by now
	}
	h.mu.Lock()
	if ok && state != "allocating" {
		for _, w := range h.waiters[u] {
			wake(w.C)
		}
	}
	streams := len(h.streams) > 0
	if !streams {
		h.cursorOK = false // the reader idles: its cursor falls behind
	}
	h.mu.Unlock()
	if streams {
		wake(h.poke)
	}
}

// reconnected runs after every (re)connection of the listener:
// notifications may have been missed, so the cache starts empty, every
// waiter looks again and the reader reads. After a reconnection the pool's connections are dropped
// first: the database went away, and a connection it closed meanwhile
// looks fine to the pool until used when it was idle less than the
// pool's ping threshold (pgxpool: 1 s), so a restart that short would
// answer the waiters' reads with 503 (57P01) although the database is back.
func (h *Hub) reconnected() {
	if h.listened {
		h.pool.Reset()
	}
	h.listened = true
	if h.cache != nil {
		h.cache.setLive(true)
	}
	h.mu.Lock()
	n := 0
	for _, ws := range h.waiters {
		for _, w := range ws {
			wake(w.C)
			n++
		}
	}
	h.mu.Unlock()
	h.opts.Log.Info("allocation events: listening", zap.Int("waiters_woken", n))
	wake(h.poke)
}

// lost runs when the listener's connection is gone: notifications may be
// missed until reconnected, so the cache serves nothing meanwhile.
func (h *Hub) lost() {
	if h.cache != nil {
		h.cache.setLive(false)
	}
}

// subscription is one stream's link to the hub: batches arrive on ch;
// lagged receives when a batch was dropped because ch was full (the stream
// then reads from the table).
type subscription struct {
	ch     chan *batch
	lagged chan struct{}
}

// subscribeBuffer is how many batches a stream may have pending before it
// falls back to reading the table.
const subscribeBuffer = 16

// subscribe adds a stream and wakes the reader, which idles while there
// is none.
func (h *Hub) subscribe() *subscription {
	s := &subscription{ch: make(chan *batch, subscribeBuffer), lagged: make(chan struct{}, 1)}
	h.mu.Lock()
	h.streams[s] = struct{}{}
	h.mu.Unlock()
	wake(h.poke)
	return s
}

func (h *Hub) unsubscribe(s *subscription) {
	h.mu.Lock()
	delete(h.streams, s)
	h.mu.Unlock()
}

// Streams is how many streams are subscribed.
func (h *Hub) Streams() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.streams)
}

// Cursor is the key of the last event the hub delivered; ok is false until
// its first read, and again whenever the reader found no stream to read for
// (it then leaves the table alone, and the cursor falls behind).
func (h *Hub) Cursor() (int64, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.cursor, h.cursorOK
}

// read follows the event table while streams are subscribed: on every
// poke (a notification, a reconnection, a new stream) it numbers what
// committed (SequenceEvents) and reads every event after its cursor; after
// an error it tries again from 100 ms to 5 s later. Without streams it does
// nothing (nobody needs the numbers yet: a stream that opens numbers what
// committed before it reads the head, prune numbers before it deletes),
// so that waiters alone cost the database no event reads.
func (h *Hub) read(ctx context.Context) {
	var retry time.Duration
	for {
		var timer <-chan time.Time
		if retry > 0 {
			timer = time.After(retry)
		}
		select {
		case <-ctx.Done():
			return
		case <-h.poke:
		case <-timer:
		}
		h.reading.Store(true)
		err := h.readOnce(ctx)
		h.reading.Store(false)
		switch {
		case ctx.Err() != nil:
			return
		case err != nil:
			h.opts.Log.Warn("allocation events: read failed", zap.Error(err))
			retry = min(max(retry*2, 100*time.Millisecond), 5*time.Second)
		default:
			retry = 0
		}
	}
}

func (h *Hub) readOnce(ctx context.Context) error {
	h.mu.Lock()
	if len(h.streams) == 0 {
		h.cursorOK = false // falls behind from now on
		h.mu.Unlock()
		return nil
	}
	cur, ok := h.cursor, h.cursorOK
	h.mu.Unlock()
	if !ok {
		head, err := h.q.EventsHead(ctx)
		if err != nil {
			return err
		}
		cur = head.LastSeq
		h.mu.Lock()
		h.cursor, h.cursorOK = cur, true
		h.mu.Unlock()
	}
	if _, err := h.q.SequenceEvents(ctx); err != nil {
		return fmt.Errorf("numbering allocation events: %w", err)
	}
	for {
		events, err := readEvents(ctx, h.q, cur, h.opts.ReadLimit)
		if err != nil {
			return err
		}
		if len(events) > 0 {
			b := &batch{from: cur, to: events[len(events)-1].ID, events: events}
			cur = b.to
			h.broadcast(b)
		}
		if len(events) < int(h.opts.ReadLimit) {
			return nil
		}
	}
}

// readEvents reads up to limit numbered events after seq cur.
func readEvents(ctx context.Context, q *Queries, cur int64, limit int32) ([]Event, error) {
	rows, err := q.EventsAfter(ctx, EventsAfterParams{After: cur, MaxRows: limit})
	if err != nil {
		return nil, fmt.Errorf("reading allocation events: %w", err)
	}
	events := make([]Event, len(rows))
	for i, r := range rows {
		events[i] = eventFromRow(r)
	}
	return events, nil
}

// broadcast hands b to every stream without blocking: a stream whose buffer
// is full is told it lagged.
func (h *Hub) broadcast(b *batch) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.cursor = b.to
	for s := range h.streams {
		select {
		case s.ch <- b:
		default:
			wake(s.lagged)
		}
	}
}

// prune deletes old events every PruneInterval (± 25 %, so that API
// processes spread out), and at once when PruneMargin events were notified
// since the last prune (notified).
func (h *Hub) prune(ctx context.Context) {
	for {
		d := h.opts.PruneInterval
		d = d*3/4 + time.Duration(rand.Int64N(int64(d/2)+1))
		select {
		case <-ctx.Done():
			return
		case <-time.After(d):
		case <-h.pruneNow:
		}
		h.sincePrune.Store(0)
		// Number first: pruning removes numbered events only, and the
		// reader numbers nothing while no stream follows.
		if _, err := h.q.SequenceEvents(ctx); err != nil {
			if ctx.Err() == nil {
				h.opts.Log.Warn("allocation events: numbering failed", zap.Error(err))
			}
			continue
		}
		n, err := h.q.PruneEvents(ctx, PruneEventsParams{MaxAgeSeconds: h.opts.Retention.Seconds(), MaxRows: h.opts.MaxEvents})
		if err != nil {
			if ctx.Err() == nil {
				h.opts.Log.Warn("allocation events: pruning failed", zap.Error(err))
			}
			continue
		}
		if n > 0 {
			h.opts.Log.Debug("allocation events pruned", zap.Int64("deleted", n))
		}
	}
}
