package conductor

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/zap"

	"github.com/metalloc/metalloc/conductor/backend"
	"github.com/metalloc/metalloc/db"
)

// NotifyChannel is the PostgreSQL channel the allocations_notify trigger
// signals when unclaimed work appears: an empty payload for allocations,
// GroupNotifyPayload for allocation groups (allocation_groups_notify).
const NotifyChannel = "metalloc_allocations"

// GroupNotifyPayload is NotifyChannel's payload for unowned allocating
// allocation groups (migrations/00016_group_notify_payload.sql).
const GroupNotifyPayload = "group"

// ErrHostnameTaken is returned by Run when a live conductor already uses the
// configured hostname.
var ErrHostnameTaken = errors.New("a live conductor already uses this hostname")

// Service is one conductor: it claims and processes allocations, and takes
// over the rows of dead conductors. Create with NewService, then Run.
type Service struct {
	cfg  Config
	pool *pgxpool.Pool
	q    *Queries
	// rows changes who owns allocation rows (owned, takeover, release): a
	// *Rows (an interface so that the worker loop's tests need no
	// database).
	rows rowStore
	// backend reserves nodes for owned rows.
	backend backend.Backend
	// groups places owned allocation groups.
	groups backend.GroupBackend
	log    *zap.Logger
	id     int64

	// OnReady, when set, is called once the conductor is registered and
	// listening (used for sd_notify and tests).
	OnReady func()
	// Metrics, when set before Run, records the conductor's metrics.
	Metrics *Metrics

	// inflight holds the ids of owned rows being processed, queued or
	// waiting for a locked node (parked), so that a resume does not queue
	// them twice.
	inflight sync.Map
	// queue carries owned rows to the workers: resumed ones, rows taken
	// over from dead conductors and rows whose wait for a locked node is
	// up (park).
	queue chan backend.Claimed
	// parked holds the timers of the rows waiting for a locked node, by
	// id (park); unparked is set once the workers have stopped.
	parkMu   sync.Mutex
	parked   map[int64]*time.Timer
	unparked bool
	// groupQueue is queue for allocation groups.
	groupQueue chan backend.ClaimedGroup
	// needResume asks a worker to queue this conductor's owned unfinished
	// rows again (set at start and after a database error left some).
	needResume atomic.Bool
	// dbDown is set while workers see the database unavailable.
	dbDown atomic.Bool
	// healthySince is when heartbeats last started succeeding again (unix
	// nanoseconds; registration counts).
	healthySince atomic.Int64
	// gate lets at most maxClaimers workers claim at a time (claimGate).
	gate *claimGate
	// groupsPending says unowned groups may be waiting: set by a group
	// notification, a reconnection of the listener, a poll tick and a
	// group claim that got one; a worker claims groups only when it can
	// clear it (most rounds have none to claim).
	groupsPending atomic.Bool
	// signals reports events to tests (nil in production).
	signals *testSignals
	// leaseStarting, when set (tests), is called in a lease's start
	// transaction once its compare-and-set has passed (leases.go).
	leaseStarting func(ctx context.Context)
	// leaseMoves tracks the lease moves made in Ironic (leases_backend.go).
	leaseMoves leaseMoves
	// repairAfter is where repairRound's next page starts (the start_time
	// and id of the last lease it checked; zero: from the beginning).
	// Only the lease-repair goroutine uses it.
	repairAfter struct {
		start time.Time
		id    int64
	}
	// endWork ends Run's work context: the drain (startDrain) stops the
	// workers and the takeover as a stop does, the process going on.
	// drainStarted is set once the drain has begun.
	endWork      context.CancelFunc
	drainStarted atomic.Bool
	// takeoverMu is held by each takeover run (takeOverDead), so that a
	// drain releases its rows after a run in progress, not before.
	takeoverMu sync.Mutex
}

// NewService returns a conductor Service using pool for queries and a dedicated connection
// (from the pool's config) for LISTEN.
func NewService(cfg Config, pool *pgxpool.Pool, log *zap.Logger) (*Service, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	log = log.With(zap.String("conductor", cfg.Hostname))
	q := New(pool)
	rows := NewRows(pool)
	var be backend.Backend
	var gb backend.GroupBackend
	groups := backend.NewGroupReserver(pool, log)
	groups.LockedWait = cfg.LockedNodeWait
	gb = groups
	switch {
	case cfg.Ironic != nil:
		be, gb = cfg.Ironic, cfg.Ironic.Groups()
	case cfg.Backend == BackendPlacement:
		pa := backend.NewPlacement(pool, cfg.Placement, backend.PlacementConfig{
			Hostname: cfg.Hostname, MaxAlternates: cfg.PlacementMaxAlternates, MaxAttempts: cfg.PlacementMaxAttempts,
			Mode: cfg.PlacementMode, LockedWait: cfg.LockedNodeWait,
		}, log)
		be = pa
		groups.Placement = pa
	default:
		d := backend.NewDatabase(pool, log)
		d.LockedWait = cfg.LockedNodeWait
		be = d
	}
	c := newService(cfg, rows, be, gb, log)
	c.pool, c.q = pool, q
	return c, nil
}

// newService is a Service on rows and the backends, without a database of
// its own: what the worker loop needs (NewService adds the pool for
// registration, heartbeats, LISTEN and housekeeping; the worker loop's
// tests use fakes).
func newService(cfg Config, rows rowStore, be backend.Backend, groups backend.GroupBackend, log *zap.Logger) *Service {
	return &Service{
		cfg: cfg, rows: rows, backend: be, groups: groups, log: log, gate: newClaimGate(maxClaimers),
		queue: make(chan backend.Claimed, queueSize), groupQueue: make(chan backend.ClaimedGroup, queueSize),
	}
}

// ID is the conductor's row id, valid once it is registered (OnReady has
// been called): in front of Ironic, the holder of the node sync lease.
func (c *Service) ID() int64 { return c.id }

// Run registers the conductor and processes allocations until ctx ends. Then
// it stops claiming, waits up to ShutdownGrace for in-flight work, hands the
// rows it could not finish back (unowned, so peers claim them at once), marks
// itself offline and returns nil. It returns ErrHostnameTaken (wrapped) when
// a live conductor has the same hostname (livelock.go: register), and
// ErrLivenessLockLost (wrapped) when another process took its liveness
// lock: it then stops at once, neither releasing its rows nor going offline.
func (c *Service) Run(ctx context.Context) error {
	lockConn, id, started, err := c.register(ctx)
	if err != nil {
		return err
	}
	// Losing the liveness lock to another process (livelock.go) stops
	// everything at once: that process owns this conductor's rows now.
	ctx, stopRun := context.WithCancelCause(ctx)
	defer stopRun(nil)
	c.id = id
	// The work (claims, takeover) runs on workCtx, which a stop or a drain
	// ends (drain.go); the process, its heartbeats and its liveness lock,
	// on ctx.
	workCtx, endWork := context.WithCancel(ctx)
	defer endWork()
	c.endWork = endWork
	c.Metrics.heartbeat()
	c.healthySince.Store(time.Now().UnixNano())
	c.needResume.Store(true)
	c.groupsPending.Store(true)
	c.log.Info("conductor registered", zap.Int64("id", id), zap.Int("workers", c.cfg.Workers),
		zap.String("takeover_schedule", c.cfg.TakeoverSchedule))

	// A notification wakes one idle worker (one pending wake-up at most, so
	// a burst of notifications costs one claim, not one each); a worker that
	// finds a full batch, or that others wanted to claim while its claim
	// ran, claims again (claim).
	wake := make(chan struct{}, 1)
	signal := func() {
		select {
		case wake <- struct{}{}:
		default:
		}
	}
	var bg sync.WaitGroup
	bgCtx, stopBG := context.WithCancel(context.WithoutCancel(ctx))
	bg.Add(3)
	go func() { defer bg.Done(); c.heartbeat(bgCtx) }()
	go func() { defer bg.Done(); c.housekeep(bgCtx) }()
	listening := make(chan struct{})
	go func() { defer bg.Done(); c.listen(ctx, signal, listening) }()
	select {
	case <-listening:
	case <-time.After(5 * time.Second):
		c.log.Warn("LISTEN not established yet; relying on polling until it is")
	case <-ctx.Done():
	}
	// What a stop lets finish (in-flight rows, claims, takeovers) runs on
	// procCtx, which ends ShutdownGrace after the stop (see work).
	procCtx, cancelProc := afterStop(workCtx, c.cfg.ShutdownGrace)
	defer cancelProc()
	// The watch runs until the workers have stopped, and its connection
	// (the lock) is closed only once the conductor is offline: peers do
	// not judge a conductor crashed while it finishes in-flight rows.
	var fenced atomic.Bool
	bg.Add(1)
	go func() {
		defer bg.Done()
		lockConn = c.watchLiveness(bgCtx, workCtx, procCtx, lockConn, started, func(err error) {
			fenced.Store(true)
			stopRun(err)
			cancelProc()
		})
	}()
	defer func() {
		if lockConn != nil {
			_ = lockConn.Close(context.WithoutCancel(ctx))
		}
	}()
	sched := c.startTakeover(workCtx, procCtx)
	if c.OnReady != nil {
		c.OnReady()
	}

	// Leases start and end on workCtx: a move is one transaction, which a
	// stop rolls back for a peer to make (leases.go; in front of Ironic its
	// idempotent part in Ironic first, leases_backend.go).
	var leasesDone sync.WaitGroup
	leasesDone.Add(2)
	go func() { defer leasesDone.Done(); c.runLeases(workCtx) }()
	go func() { defer leasesDone.Done(); c.runLeaseRepairs(workCtx) }()

	c.work(workCtx, procCtx, wake)
	leasesDone.Wait()

	if sched != nil {
		<-sched.Stop().Done()
	}
	if ctx.Err() == nil {
		// Drained, not stopped: hand the rest over and idle until stopped.
		c.idleDrained(ctx)
	}
	stopBG()
	stopRun(nil)
	bg.Wait()
	if fenced.Load() {
		c.log.Error("conductor stopped: another process registered it; its rows are that process's now")
		return context.Cause(ctx)
	}
	offCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if n, err := c.rows.Release(offCtx, id); err != nil {
		c.log.Warn("could not release unfinished allocations; peers will take them over", zap.Error(err))
	} else {
		if n > 0 {
			c.log.Info("released unfinished allocations to the other conductors", zap.Int64("count", n))
		}
		c.signals.releasedRows(n)
	}
	if err := c.q.GoOffline(offCtx, id); err != nil {
		c.log.Warn("could not mark conductor offline", zap.Error(err))
	}
	c.log.Info("conductor stopped")
	return nil
}

// Housekeeping: how often a conductor looks at the allocations table's dead
// rows, and how many make it vacuum the table.
const (
	housekeepInterval = 5 * time.Second
	housekeepDeadRows = 2000
)

// housekeep vacuums the allocations table when it holds housekeepDeadRows
// dead rows or more. Every reserved allocation leaves a dead entry in the
// partial index the claim scans (allocations_allocating_idx) until the
// table is vacuumed; the claim marks them dead on its first pass but still
// reads their index pages, three per 1,000 allocations, at every claim.
// Autovacuum visits a database once per autovacuum_naptime (1 min by
// default): at 1,000 allocations/s that is 60,000 entries, 180 pages per
// claim. VACUUM (SKIP_LOCKED) is skipped when another conductor or
// autovacuum is vacuuming the table; a conductor whose database role may
// not vacuum it gets a warning from PostgreSQL, logged at debug level, and
// leaves it to autovacuum.
func (c *Service) housekeep(ctx context.Context) {
	t := time.NewTicker(housekeepInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		dead, err := c.q.AllocationsDeadRows(ctx)
		if err != nil || dead < housekeepDeadRows {
			continue
		}
		start := time.Now()
		if err := c.q.VacuumAllocations(ctx); err != nil {
			if ctx.Err() == nil {
				c.log.Debug("vacuuming allocations failed", zap.Error(err))
			}
			continue
		}
		c.log.Debug("vacuumed allocations", zap.Int64("dead_rows", dead), zap.Duration("took", time.Since(start)))
	}
}

// listen LISTENs on NotifyChannel (db.Listen) and closes listening the
// first time it is established. A drain notification (DrainNotifyPayload)
// starts this conductor's drain if it names it and wakes no worker; after
// every (re)connection the drain column is read, since one may have been
// missed.
func (c *Service) listen(ctx context.Context, signal func(), listening chan struct{}) {
	var once sync.Once
	db.ListenPayloads(ctx, c.pool, NotifyChannel, c.log, func(payload string) {
		if drain, mine := drainPayload(payload, c.id); drain {
			if mine {
				c.startDrain()
			}
			return
		}
		if payload == GroupNotifyPayload {
			c.groupsPending.Store(true)
		}
		signal()
	}, func() {
		once.Do(func() { close(listening) })
		c.groupsPending.Store(true) // notifications may have been missed
		signal()
		dctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		c.checkDrain(dctx)
	})
}
