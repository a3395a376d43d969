package conductor

import (
	"context"
	"errors"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/metalloc/metalloc/conductor/backend"
	"github.com/metalloc/metalloc/db"
	"github.com/metalloc/metalloc/placement/client"
)

// maxBackoff caps a worker's wait between attempts while the database is
// unavailable.
const maxBackoff = 5 * time.Second

// placementRetryDelay is how long a worker waits after Placement could not
// be reached before it takes more work.
const placementRetryDelay = time.Second

// maxClaimers is how many of a conductor's workers run a claim statement
// at the same time (claim). One per conductor serializes the claims behind
// one transaction and puts its latency on every row; one per worker lets
// every notification of a burst run its own claim, most of which find the
// rows taken already. Two, with 2 conductors, 10,000 nodes, 32 clients:
// about 3 rows per claim statement instead of 0.6, and a third fewer
// database buffers per allocation.
const maxClaimers = 2

// queueSize bounds the owned rows waiting for a worker; more stay owned in
// the database and are queued by a later resume.
const queueSize = 1024

// rowStore is what the conductor asks of the rows it owns (*Rows, on the
// database): its unfinished rows and groups, the group claim, dead owners,
// takeover and release.
type rowStore interface {
	Owned(ctx context.Context, me int64) ([]backend.Claimed, error)
	OwnedGroups(ctx context.Context, me int64) ([]backend.ClaimedGroup, error)
	ClaimGroups(ctx context.Context, me int64, batch int) ([]backend.ClaimedGroup, error)
	DeadOwners(ctx context.Context, me int64) ([]DeadOwner, error)
	TakeOver(ctx context.Context, me int64, dead DeadOwner, max int) ([]backend.Claimed, int, error)
	TakeOverGroups(ctx context.Context, me int64, dead DeadOwner, max int) ([]backend.ClaimedGroup, int, error)
	Release(ctx context.Context, me int64) (int64, error)
}

// work runs Workers workers (worker.run) until ctx ends. On stop, in-flight
// rows get ShutdownGrace to finish (claims run to their end: below):
// procCtx (Run's afterStop) ends that long after ctx, and work waits for
// the workers to return. Rows waiting for a locked node (park) are left
// owned and unfinished, for Release.
//
// A statement that gives this conductor rows (a claim, a takeover) must
// end before Release runs, so the stop does not cancel it: pgx gives up
// on a statement whose context ends (it returns at once, then sends
// PostgreSQL a cancel request and closes the connection), but a statement
// that ends before the cancel request arrives commits. A claim given up
// that way at the stop, on a busy machine, claimed rows after Release had
// handed them back, for a conductor gone offline (they waited for a
// peer's next takeover); one given up at the end of a drain's grace
// claimed rows for a drained conductor, which claims nothing and is never
// taken over (TestDrainLetsItsClaimEnd). So a claim runs to its end
// whatever the stop (claim, claimGroups: procCtx without its end), and
// the stop waits for it past the grace if need be: its statements skip
// the rows others hold (in a network partition they end with their
// connection). A takeover's statements still run on procCtx (takeover):
// one running at the end of the grace may win its row after Release.
func (c *Service) work(ctx, procCtx context.Context, wake <-chan struct{}) {
	var wg sync.WaitGroup
	for n := range c.cfg.Workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			(&worker{c: c, n: n}).run(ctx, procCtx, wake)
		}()
	}
	<-ctx.Done()
	// Stop: finish what is in flight within the grace period.
	finished := make(chan struct{})
	go func() { wg.Wait(); close(finished) }()
	c.log.Info("stopping: finishing in-flight allocations", zap.Duration("grace", c.cfg.ShutdownGrace))
	c.signals.stoppingNow()
	select {
	case <-finished:
	case <-procCtx.Done():
		c.log.Warn("shutdown grace period over; releasing the rest")
		<-finished
	}
	c.unpark()
}

// afterStop returns a context that ends grace after ctx ends, or when
// cancel is called: Run's procCtx, the context of the work a stop lets
// finish (see work).
func afterStop(ctx context.Context, grace time.Duration) (context.Context, context.CancelFunc) {
	out, cancel := context.WithCancel(context.WithoutCancel(ctx))
	var mu sync.Mutex
	var timer *time.Timer
	stop := context.AfterFunc(ctx, func() {
		mu.Lock()
		defer mu.Unlock()
		if out.Err() == nil {
			timer = time.AfterFunc(grace, cancel)
		}
	})
	return out, func() {
		stop()
		cancel()
		mu.Lock()
		defer mu.Unlock()
		if timer != nil {
			timer.Stop()
		}
	}
}

// worker is one of a conductor's Workers goroutines: the claim loop. Each
// pass (round) processes a queued owned row or group first (resumed or
// taken over), queues the conductor's unfinished rows again when asked
// (needResume), claims and reserves a batch (claim, through the claim gate)
// and processes itself the rows that need more work, then claims one
// allocation group and places it (claimGroups) when groups may be waiting.
// A worker whose batch came back full, that got a group, or that others
// wanted to claim meanwhile, claims again at once; one whose batch came
// back short waits for a notification (then ClaimDelay, for a burst to
// gather), a queued row or its next poll tick. While the database is
// unavailable it backs off, doubling from 100 ms up to maxBackoff.
type worker struct {
	c *Service
	// n is the worker's index: its first claim waits n ms, so that the
	// workers do not all query at once.
	n int
	// backoff is the wait before the next round while the database is
	// unavailable (0 while it answers).
	backoff time.Duration
}

// run is the worker's loop, until ctx ends. Rows are processed with
// procCtx, which outlives ctx by the shutdown grace.
func (w *worker) run(ctx, procCtx context.Context, wake <-chan struct{}) {
	c := w.c
	if w.n > 0 {
		select {
		case <-ctx.Done():
		case <-time.After(time.Duration(w.n) * time.Millisecond):
		}
	}
	ticker := time.NewTicker(c.cfg.PollInterval)
	defer ticker.Stop()
	for ctx.Err() == nil {
		select {
		case a := <-c.queue:
			c.process(procCtx, a)
			continue
		case g := <-c.groupQueue:
			c.processGroup(procCtx, g)
			continue
		default:
		}
		again, err := w.round(ctx, procCtx)
		if !w.settle(ctx, err) {
			continue // backed off
		}
		if again && err == nil {
			// More may be waiting (a full batch, or work notified while
			// the claim ran): claim again.
			continue
		}
		select {
		case <-ctx.Done():
		case a := <-c.queue:
			c.process(procCtx, a)
		case g := <-c.groupQueue:
			c.processGroup(procCtx, g)
		case <-wake:
			// Let a burst of rows arrive, to claim it with one query.
			select {
			case <-ctx.Done():
			case <-time.After(c.cfg.ClaimDelay):
			}
		case <-ticker.C:
			c.groupsPending.Store(true)
		}
	}
}

// round is one claim pass: the resume when asked, a batch of allocations,
// then, when groups may be waiting, one group (groups and allocations take
// turns: neither starves the other). again: claim again at once.
func (w *worker) round(ctx, procCtx context.Context) (again bool, err error) {
	c := w.c
	if c.needResume.CompareAndSwap(true, false) {
		c.requeueOwned(ctx)
		c.requeueOwnedGroups(ctx)
	}
	again, err = c.claim(procCtx, c.cfg.ClaimBatch)
	if err == nil && c.groupsPending.Swap(false) {
		var gotGroups int
		gotGroups, err = c.claimGroups(procCtx)
		if gotGroups > 0 || err != nil {
			c.groupsPending.Store(true) // more may be waiting
			again = again || err == nil
		}
	}
	return again, err
}

// settle records how a round ended. It returns false when the database was
// unavailable: the worker has backed off (doubling from 100 ms up to
// maxBackoff) and goes straight to its next round.
func (w *worker) settle(ctx context.Context, err error) bool {
	c := w.c
	switch {
	case err == nil:
		c.dbFine()
		w.backoff = 0
	case ctx.Err() != nil:
	case db.IsUnavailable(err):
		c.dbTrouble(err)
		w.backoff = min(max(2*w.backoff, 100*time.Millisecond), maxBackoff)
		select {
		case <-ctx.Done():
		case <-time.After(w.backoff):
		}
		return false
	default:
		c.log.Warn("claim failed", zap.Error(err))
	}
	return true
}

// track marks owned row id as in flight; false means it already is.
func (c *Service) track(id int64) bool {
	_, busy := c.inflight.LoadOrStore(id, struct{}{})
	return !busy
}

// enqueue hands owned row a to the workers unless it is already in flight.
// With the queue full it stays owned and a later resume queues it.
func (c *Service) enqueue(a backend.Claimed) {
	if c.track(a.ID) {
		c.requeue(a)
	}
}

// requeue hands owned row a, marked in flight, to the workers. With the
// queue full it stays owned and a later resume queues it.
func (c *Service) requeue(a backend.Claimed) {
	select {
	case c.queue <- a:
	default:
		c.inflight.Delete(a.ID)
		c.needResume.Store(true)
	}
}

// requeueOwned queues this conductor's allocating rows that are not in
// flight: rows left by a restart, a database outage or a full queue.
func (c *Service) requeueOwned(ctx context.Context) {
	owned, err := c.rows.Owned(ctx, c.id)
	if err != nil {
		if ctx.Err() == nil {
			c.log.Warn("listing owned allocations to resume", zap.Error(err))
			c.needResume.Store(true)
		}
		return
	}
	for _, a := range owned {
		if _, busy := c.inflight.Load(a.ID); !busy {
			c.log.Info("resuming allocation", zap.Stringer("allocation", a.UUID))
			c.enqueue(a)
		}
	}
}

// claim takes up to n rows through the backend and processes here, one by
// one, the claimed rows it could not reserve at once. It returns whether the
// caller should claim again at once: the batch was full, or other workers
// wanted to claim while this claim ran. The claim runs to its end, even
// past the end of procCtx: a stop that comes meanwhile waits for it (see
// work); the rows it could not reserve are processed on procCtx.
//
// At most maxClaimers workers of a conductor claim at a time (claimGate). A
// worker that finds them all claiming leaves the claim to them and returns
// false: every notification a burst brings wakes a worker, and without this
// each would run its own claim statement, most of them finding the rows
// already taken. A claiming worker told by the gate that a claim was
// wanted meanwhile claims again, and takes in one batch everything that
// arrived meanwhile.
func (c *Service) claim(procCtx context.Context, n int) (again bool, err error) {
	if !c.gate.enter() {
		return false, nil
	}
	reserved, rest, err := c.backend.Claim(context.WithoutCancel(procCtx), c.id, n)
	again = c.gate.leave()
	if errors.Is(err, backend.ErrClaimedUnread) {
		// Claimed but not read back: resume them once the database answers.
		c.needResume.Store(true)
		c.log.Warn("claimed allocations could not be read; resuming them later", zap.Error(err))
		err = nil
	}
	if err != nil {
		return false, err
	}
	got := len(reserved) + len(rest)
	again = again || got == n
	c.Metrics.claimed(got)
	c.signals.claimedRows(got)
	for _, a := range reserved {
		c.Metrics.reserved(a.CreatedAt)
		c.log.Debug("allocation reserved", zap.Stringer("allocation", a.UUID),
			zap.Duration("since_created", time.Since(a.CreatedAt)))
	}
	if q, ok := c.backend.(backend.Queued); ok && q.ProcessQueued() {
		// The workers process them at the same time (the Ironic backend).
		for _, a := range rest {
			c.enqueue(a)
		}
		return again, nil
	}
	for _, a := range rest {
		if c.track(a.ID) {
			c.process(procCtx, a)
		}
	}
	return again, nil
}

// process runs one owned row that track marked in flight, and clears the
// mark unless the row waits for a locked node (park). When a database
// outage leaves the row owned but unfinished, it asks for a resume.
func (c *Service) process(ctx context.Context, a backend.Claimed) {
	waited := a.Wait.Waiting()
	if !waited {
		c.signals.reservingRow(a.UUID)
		c.log.Debug("reserving allocation", zap.Stringer("allocation", a.UUID))
	}
	out, err := c.backend.Process(ctx, c.id, &a)
	if err == nil && out == backend.Waiting {
		if !waited {
			c.signals.waitingRow(a.UUID)
			c.log.Debug("allocation waiting for a locked node", zap.Stringer("allocation", a.UUID))
		}
		c.park(a)
		return
	}
	defer c.inflight.Delete(a.ID)
	if err != nil {
		c.log.Warn("allocation left for a retry", zap.Stringer("allocation", a.UUID), zap.Error(err))
		c.needResume.Store(true)
		if client.IsUnreachable(err) {
			// The database answers but Placement does not: without a
			// pause the resume would retry at once, over and over.
			select {
			case <-ctx.Done():
			case <-time.After(placementRetryDelay):
			}
		}
		return
	}
	switch out {
	case backend.Reserved:
		c.Metrics.reserved(a.CreatedAt)
	case backend.Failed:
		c.Metrics.failed()
	}
	c.log.Debug("allocation processed", zap.Stringer("allocation", a.UUID), zap.Stringer("outcome", out),
		zap.Duration("since_created", time.Since(a.CreatedAt)))
}

// park keeps row a, which waits for a locked node (Backend.Process said
// Waiting), in flight, and queues it again after a.Wait.Retry. No worker
// holds a waiting row: its worker goes on with other work, and the rows
// waiting for locked nodes wait together, however many they are. Once
// the workers have stopped (unpark) a row is left owned and unfinished,
// for Release.
func (c *Service) park(a backend.Claimed) {
	c.parkMu.Lock()
	defer c.parkMu.Unlock()
	if c.unparked {
		c.inflight.Delete(a.ID)
		return
	}
	if c.parked == nil {
		c.parked = map[int64]*time.Timer{}
	}
	c.parked[a.ID] = time.AfterFunc(a.Wait.Retry, func() {
		c.parkMu.Lock()
		defer c.parkMu.Unlock()
		if c.parked[a.ID] == nil {
			return // unparked meanwhile
		}
		delete(c.parked, a.ID)
		c.requeue(a)
	})
}

// unpark stops the waits of the parked rows once the workers have
// stopped: the rows stay owned and unfinished, for Release.
func (c *Service) unpark() {
	c.parkMu.Lock()
	defer c.parkMu.Unlock()
	c.unparked = true
	for id, t := range c.parked {
		t.Stop()
		c.inflight.Delete(id)
	}
	c.parked = nil
}

// dbTrouble records a database error seen by a worker: the first one after
// a healthy stretch is logged (not every worker's every retry), and the
// caller backs off.
func (c *Service) dbTrouble(err error) {
	if c.dbDown.CompareAndSwap(false, true) {
		c.log.Warn("database unavailable; backing off and retrying", zap.Error(err))
	}
}

// dbFine records a successful database round trip by a worker.
func (c *Service) dbFine() {
	if c.dbDown.CompareAndSwap(true, false) {
		c.log.Info("database reachable again; resuming")
		c.needResume.Store(true)
	}
}
