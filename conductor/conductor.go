package conductor

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/zap"

	"github.com/metalloc/metalloc/allocation"
	"github.com/metalloc/metalloc/allocgroup"
	"github.com/metalloc/metalloc/config"
	"github.com/metalloc/metalloc/db"
	"github.com/metalloc/metalloc/driver"
	"github.com/metalloc/metalloc/placement/client"
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

// Config tunes a Conductor. Zero values take the defaults noted.
type Config struct {
	// Hostname identifies the conductor in the conductors table and in
	// conductor_affinity. Defaults to os.Hostname().
	Hostname string
	// Group is the conductor_group reported by GET /v1/conductors ("").
	Group string
	// Workers is how many worker goroutines claim and reserve (default 16).
	Workers int
	// ClaimBatch is the most rows one claim-and-reserve transaction takes
	// (default 8).
	ClaimBatch int
	// PollInterval is how often to look for work without a notification
	// (default 1s).
	PollInterval time.Duration
	// ClaimDelay is how long a notification waits before claiming, so that
	// rows arriving together are claimed by one query (default 15ms).
	ClaimDelay time.Duration
	// HeartbeatInterval is how often the conductor row is refreshed
	// (default config.DefaultHeartbeatInterval, 10s).
	HeartbeatInterval time.Duration
	// HeartbeatTimeout is the age after which a heartbeat counts as dead
	// (default config.DefaultHeartbeatTimeout, 60s).
	HeartbeatTimeout time.Duration
	// ShutdownGrace bounds how long a stop waits for in-flight allocations
	// (default 30s).
	ShutdownGrace time.Duration
	// LockedNodeWait is how long an allocation keeps retrying while every
	// node that fits it is locked by others (reservations, API updates)
	// before it goes to error (default 2s).
	LockedNodeWait time.Duration
	// TakeoverSchedule is when to take over the allocating rows of dead
	// conductors: a robfig/cron spec (default "@every 60s") or "off".
	TakeoverSchedule string
	// Version is reported in the conductors table.
	Version string
	// Backend is how allocations get their node: BackendDatabase (the
	// default: reserve straight in PostgreSQL) or BackendPlacement (claim
	// through Placement with Selection objects and alternates).
	Backend string
	// Placement is the Placement service the placement backend claims
	// through (required with BackendPlacement).
	Placement *client.Client
	// PlacementMaxAlternates is how many alternates each selection carries
	// besides the chosen node (default 2; placement backend only).
	PlacementMaxAlternates int
	// PlacementMaxAttempts is how many times one allocation asks Placement
	// for candidates before it goes to error (default 3; placement backend
	// only).
	PlacementMaxAttempts int
	// PlacementMode is allocation.PlacementModeAuto (the default),
	// PlacementModeLocal or PlacementModeHTTP (placement backend only).
	PlacementMode string
}

// Allocation backends (Config.Backend).
const (
	// BackendDatabase reserves nodes straight in PostgreSQL.
	BackendDatabase = "database"
	// BackendPlacement claims nodes through the Placement API.
	BackendPlacement = "placement"
)

// WithDefaults returns c with zero fields set to their defaults.
func (c Config) WithDefaults() Config {
	if c.Hostname == "" {
		c.Hostname, _ = os.Hostname()
	}
	if c.Workers <= 0 {
		c.Workers = 16
	}
	if c.ClaimBatch <= 0 {
		c.ClaimBatch = 8
	}
	if c.PollInterval <= 0 {
		c.PollInterval = time.Second
	}
	if c.ClaimDelay <= 0 {
		c.ClaimDelay = 15 * time.Millisecond
	}
	if c.HeartbeatInterval <= 0 {
		c.HeartbeatInterval = config.DefaultHeartbeatInterval
	}
	if c.HeartbeatTimeout <= 0 {
		c.HeartbeatTimeout = config.DefaultHeartbeatTimeout
	}
	if c.ShutdownGrace <= 0 {
		c.ShutdownGrace = 30 * time.Second
	}
	if c.LockedNodeWait <= 0 {
		c.LockedNodeWait = 2 * time.Second
	}
	if c.TakeoverSchedule == "" {
		c.TakeoverSchedule = "@every 60s"
	}
	if c.Backend == "" {
		c.Backend = BackendDatabase
	}
	if c.PlacementMode == "" {
		c.PlacementMode = allocation.PlacementModeAuto
	}
	return c
}

// Validate reports configuration errors, naming the field.
func (c Config) Validate() error {
	if c.Hostname == "" {
		return errors.New("conductor.hostname: must not be empty")
	}
	if c.HeartbeatTimeout <= c.HeartbeatInterval {
		return fmt.Errorf("conductor.heartbeat_timeout (%s) must exceed conductor.heartbeat_interval (%s)",
			c.HeartbeatTimeout, c.HeartbeatInterval)
	}
	if _, err := parseSchedule(c.TakeoverSchedule); err != nil {
		return err
	}
	switch c.Backend {
	case BackendDatabase:
	case BackendPlacement:
		if c.Placement == nil {
			return errors.New("conductor.allocation_backend: placement needs a Placement client (placement_backend.endpoint)")
		}
		if !allocation.ValidPlacementMode(c.PlacementMode) {
			return fmt.Errorf("placement_backend.mode: %q is none of %q, %q, %q", c.PlacementMode,
				allocation.PlacementModeAuto, allocation.PlacementModeLocal, allocation.PlacementModeHTTP)
		}
	default:
		return fmt.Errorf("conductor.allocation_backend: %q is neither %q nor %q", c.Backend, BackendDatabase, BackendPlacement)
	}
	return nil
}

// Service is one conductor: it claims and processes allocations, and takes
// over the rows of dead conductors. Create with NewService, then Run.
type Service struct {
	cfg  Config
	pool *pgxpool.Pool
	q    *Queries
	// rows changes who owns allocation rows (claim, takeover, release).
	rows *Rows
	// backend reserves nodes for owned rows.
	backend Backend
	// groups places owned allocation groups.
	groups groupBackend
	log    *zap.Logger
	id     int64

	// OnReady, when set, is called once the conductor is registered and
	// listening (used for sd_notify and tests).
	OnReady func()
	// Metrics, when set before Run, records the conductor's metrics.
	Metrics *Metrics

	// inflight holds the ids of owned rows being processed or queued, so
	// that a resume does not queue them twice.
	inflight sync.Map
	// queue carries owned rows to the workers: resumed ones and rows taken
	// over from dead conductors.
	queue chan allocation.Claimed
	// groupQueue is queue for allocation groups.
	groupQueue chan allocgroup.Claimed
	// needResume asks a worker to queue this conductor's owned unfinished
	// rows again (set at start and after a database error left some).
	needResume atomic.Bool
	// dbDown is set while workers see the database unavailable.
	dbDown atomic.Bool
	// healthySince is when heartbeats last started succeeding again (unix
	// nanoseconds; registration counts).
	healthySince atomic.Int64
	// claiming counts the workers whose claim statement is running (claim,
	// at most maxClaimers); claimPending is set by a worker that wanted to
	// claim meanwhile, and tells a claiming worker to claim again at once.
	claiming     atomic.Int32
	claimPending atomic.Bool
	// groupsPending says unowned groups may be waiting: set by a group
	// notification, a reconnection of the listener, a poll tick and a
	// group claim that got one; a worker claims groups only when it can
	// clear it (most rounds have none to claim).
	groupsPending atomic.Bool
	// signals reports events to tests (nil in production).
	signals *testSignals
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
	rows := NewRows(q, cfg.HeartbeatTimeout)
	var backend Backend
	groups := allocgroup.NewReserver(pool, log)
	groups.LockedWait = cfg.LockedNodeWait
	switch cfg.Backend {
	case BackendPlacement:
		pa := allocation.NewPlacementAllocator(pool, cfg.Placement, allocation.PlacementConfig{
			Hostname: cfg.Hostname, MaxAlternates: cfg.PlacementMaxAlternates, MaxAttempts: cfg.PlacementMaxAttempts,
			Mode: cfg.PlacementMode, LockedWait: cfg.LockedNodeWait,
		}, log)
		backend = placementBackend{pa, rows, log}
		groups.Placement = pa
	default:
		alloc := allocation.NewAllocator(pool, log)
		alloc.LockedWait = cfg.LockedNodeWait
		backend = databaseBackend{alloc, rows, log}
	}
	return &Service{
		cfg: cfg, pool: pool, q: q, rows: rows, backend: backend, groups: groups, log: log,
		queue: make(chan allocation.Claimed, queueSize), groupQueue: make(chan allocgroup.Claimed, queueSize),
	}, nil
}

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

// ID is the conductor's row id (valid once Run has registered it).
func (c *Service) ID() int64 { return c.id }

// Run registers the conductor and processes allocations until ctx ends. Then
// it stops claiming, waits up to ShutdownGrace for in-flight work, hands the
// rows it could not finish back (unowned, so peers claim them at once), marks
// itself offline and returns nil. It returns ErrHostnameTaken (wrapped) when
// a live conductor has the same hostname.
func (c *Service) Run(ctx context.Context) error {
	id, err := c.q.Register(ctx, RegisterParams{
		Hostname:       c.cfg.Hostname,
		ConductorGroup: c.cfg.Group,
		Drivers:        driver.Names(),
		Version:        c.cfg.Version,
		AliveSeconds:   c.cfg.HeartbeatTimeout.Seconds(),
	})
	if errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("%w: %q has a heartbeat younger than %s; stop it first or wait for it to time out",
			ErrHostnameTaken, c.cfg.Hostname, c.cfg.HeartbeatTimeout)
	}
	if err != nil {
		return fmt.Errorf("registering conductor: %w", err)
	}
	c.id = id
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
	sched := c.startTakeover(ctx)
	if c.OnReady != nil {
		c.OnReady()
	}

	c.work(ctx, wake)

	if sched != nil {
		<-sched.Stop().Done()
	}
	stopBG()
	bg.Wait()
	offCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if n, err := c.rows.Release(offCtx, id); err != nil {
		c.log.Warn("could not release unfinished allocations; peers will take them over", zap.Error(err))
	} else if n > 0 {
		c.log.Info("released unfinished allocations to the other conductors", zap.Int64("count", n))
	}
	if err := c.q.GoOffline(offCtx, id); err != nil {
		c.log.Warn("could not mark conductor offline", zap.Error(err))
	}
	c.log.Info("conductor stopped")
	return nil
}

// work runs Workers goroutines until ctx ends. Each one processes queued
// owned rows and groups first (resumed or taken over), then claims and
// reserves in batches (claim, maxClaimers at a time) and processes itself the
// rows that need more work, then claims one allocation group and places it
// (claimGroups). A worker whose batch comes back full, that got a group, or
// that others wanted to claim meanwhile, claims again; one whose batch comes
// back short sleeps until a notification, a queued row or its next poll
// tick. On stop, in-flight rows get ShutdownGrace to finish.
func (c *Service) work(ctx context.Context, wake chan struct{}) {
	procCtx, cancelProc := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelProc()
	var wg sync.WaitGroup
	for w := range c.cfg.Workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Stagger the first claims a little so the workers do not
			// all query at once.
			if w > 0 {
				select {
				case <-ctx.Done():
				case <-time.After(time.Duration(w) * time.Millisecond):
				}
			}
			ticker := time.NewTicker(c.cfg.PollInterval)
			defer ticker.Stop()
			var backoff time.Duration // while the database is unavailable
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
				if c.needResume.CompareAndSwap(true, false) {
					c.requeueOwned(ctx)
					c.requeueOwnedGroups(ctx)
				}
				again, err := c.claim(ctx, procCtx, c.cfg.ClaimBatch)
				if err == nil && c.groupsPending.Swap(false) {
					// Groups and allocations take turns: neither starves
					// the other.
					var gotGroups int
					gotGroups, err = c.claimGroups(ctx, procCtx)
					if gotGroups > 0 || err != nil {
						c.groupsPending.Store(true) // more may be waiting
						again = again || err == nil
					}
				}
				switch {
				case err == nil:
					c.dbFine()
					backoff = 0
				case ctx.Err() != nil:
				case db.IsUnavailable(err):
					c.dbTrouble(err)
					backoff = min(max(2*backoff, 100*time.Millisecond), maxBackoff)
					select {
					case <-ctx.Done():
					case <-time.After(backoff):
					}
					continue
				default:
					c.log.Warn("claim failed", zap.Error(err))
				}
				if again && err == nil {
					// More may be waiting (a full batch, or work notified
					// while the claim ran): claim again.
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
		}()
	}
	<-ctx.Done()
	// Stop: finish what is in flight within the grace period.
	finished := make(chan struct{})
	go func() { wg.Wait(); close(finished) }()
	c.log.Info("stopping: finishing in-flight allocations", zap.Duration("grace", c.cfg.ShutdownGrace))
	select {
	case <-finished:
	case <-time.After(c.cfg.ShutdownGrace):
		c.log.Warn("shutdown grace period over; releasing the rest")
		cancelProc()
		<-finished
	}
}

// track marks owned row id as in flight; false means it already is.
func (c *Service) track(id int64) bool {
	_, busy := c.inflight.LoadOrStore(id, struct{}{})
	return !busy
}

// enqueue hands owned row a to the workers unless it is already in flight.
// With the queue full it stays owned and a later resume queues it.
func (c *Service) enqueue(a allocation.Claimed) {
	if !c.track(a.ID) {
		return
	}
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
// wanted to claim while this claim ran.
//
// At most maxClaimers workers of a conductor claim at a time. A worker that
// finds them all claiming leaves the claim to them (claimPending) and
// returns false: every notification a burst brings wakes a worker, and
// without this each would run its own claim statement, most of them finding
// the rows already taken. A claiming worker that sees claimPending when its
// statement returns claims again, and takes in one batch everything that
// arrived meanwhile.
func (c *Service) claim(ctx, procCtx context.Context, n int) (again bool, err error) {
	for {
		k := c.claiming.Load()
		if k < maxClaimers {
			if c.claiming.CompareAndSwap(k, k+1) {
				break
			}
			continue
		}
		c.claimPending.Store(true)
		if c.claiming.Load() > 0 {
			// The holder reads claimPending after it lets go of
			// claiming, so it sees ours and claims again.
			return false, nil
		}
	}
	// Rows notified before this point are visible to the statement below.
	c.claimPending.Store(false)
	reserved, rest, err := c.backend.Claim(ctx, c.id, n)
	c.claiming.Add(-1)
	again = c.claimPending.Swap(false)
	if errors.Is(err, allocation.ErrClaimedUnread) {
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
	for _, a := range reserved {
		c.Metrics.reserved(a.CreatedAt)
		c.log.Debug("allocation reserved", zap.Stringer("allocation", a.UUID),
			zap.Duration("since_created", time.Since(a.CreatedAt)))
	}
	for _, a := range rest {
		if c.track(a.ID) {
			c.process(procCtx, a)
		}
	}
	return again, nil
}

// process runs one owned row that track marked in flight, and clears the
// mark. When a database outage leaves the row owned but unfinished, it asks
// for a resume.
func (c *Service) process(ctx context.Context, a allocation.Claimed) {
	defer c.inflight.Delete(a.ID)
	out, err := c.backend.Process(ctx, c.id, a)
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
	case allocation.Reserved:
		c.Metrics.reserved(a.CreatedAt)
	case allocation.Failed:
		c.Metrics.failed()
	}
	c.log.Debug("allocation processed", zap.Stringer("allocation", a.UUID), zap.Stringer("outcome", out),
		zap.Duration("since_created", time.Since(a.CreatedAt)))
}

// heartbeat refreshes the conductor row every HeartbeatInterval. It tracks
// since when heartbeats succeed without a gap (healthySince), which the
// takeover task consults.
func (c *Service) heartbeat(ctx context.Context) {
	t := time.NewTicker(c.cfg.HeartbeatInterval)
	defer t.Stop()
	failing := false
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if _, err := c.q.Heartbeat(ctx, c.id); err != nil {
				if ctx.Err() == nil {
					c.log.Warn("heartbeat failed", zap.Error(err))
				}
				failing = true
				continue
			}
			if failing {
				failing = false
				c.healthySince.Store(time.Now().UnixNano())
				c.log.Info("heartbeat written again")
			}
			c.Metrics.heartbeat()
			c.signals.heartbeatWritten()
		}
	}
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

// listen LISTENs on NotifyChannel (db.Listen) and closes listening the
// first time it is established.
func (c *Service) listen(ctx context.Context, signal func(), listening chan struct{}) {
	var once sync.Once
	db.ListenPayloads(ctx, c.pool, NotifyChannel, c.log, func(payload string) {
		if payload == GroupNotifyPayload {
			c.groupsPending.Store(true)
		}
		signal()
	}, func() {
		once.Do(func() { close(listening) })
		c.groupsPending.Store(true) // notifications may have been missed
		signal()
	})
}
