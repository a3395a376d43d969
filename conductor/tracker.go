package conductor

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/robfig/cron/v3"
	"go.uber.org/zap"

	"github.com/metalloc/metalloc/config"
	"github.com/metalloc/metalloc/db"
	"github.com/metalloc/metalloc/placement/client"
)

// NodesNotifyChannel is the PostgreSQL channel the nodes_notify triggers
// signal when nodes, their traits or allocations change (migration 00004);
// the resource tracker LISTENs on it.
const NodesNotifyChannel = "metalloc_nodes"

// SyncOff is the SyncSchedule value that disables the periodic sync (the
// tracker then syncs only when nodes change).
const SyncOff = "off"

// trackerLockKey is the session-level advisory lock (pg_try_advisory_lock)
// a sync pass holds, so that one conductor at a time mirrors the nodes.
const trackerLockKey int64 = 0x6d6c_7472_6163_6b72 // "mltrackr"

// maxGenerationRetries bounds the re-read-and-retry rounds of one provider
// write that keeps losing to concurrent writers (409
// placement.concurrent_update).
const maxGenerationRetries = 5

// TrackerConfig tunes a Tracker. Zero values take the defaults noted; build
// it from the configuration file with TrackerConfigFrom.
type TrackerConfig struct {
	// SyncSchedule is the periodic sync: a robfig/cron spec (default
	// "@every 60s") or SyncOff. Run also syncs when nodes change.
	SyncSchedule string
	// SyncDelay gathers node-change notifications for this long before a
	// prompt sync (default 200ms).
	SyncDelay time.Duration
	// ReportGenericResources also reports VCPU, MEMORY_MB and DISK_GB from
	// the node's properties cpus, memory_mb and local_gb (when > 0).
	ReportGenericResources bool
	// Ratios are the allocation-ratio options (see ChooseRatio).
	Ratios Ratios
	// Concurrency bounds the providers written at once (default 8).
	Concurrency int
	// ClaimGrace is the age below which a placement_claims row is left
	// alone even when no allocation backs it: the claim may be in flight
	// (default 10s).
	ClaimGrace time.Duration
	// Mode is placement_backend.mode: "local" writes the providers
	// in-process (Placement is metalloc-placement on this database),
	// "http" through the Placement API, "auto" (the default) in-process
	// when Placement's version document names this database.
	Mode string
}

// TrackerConfigFrom converts the placement_backend section of the
// configuration file. The named options (cpu_/ram_/disk_allocation_ratio
// and their initial_ forms) win over allocation_ratios /
// initial_allocation_ratios entries for VCPU, MEMORY_MB and DISK_GB; map
// keys are upper-cased (the configuration loader lower-cases them).
func TrackerConfigFrom(pb config.PlacementBackend) TrackerConfig {
	r := Ratios{Override: map[string]float64{}, Initial: map[string]float64{}}
	for k, v := range pb.AllocationRatios {
		r.Override[strings.ToUpper(k)] = v
	}
	for k, v := range pb.InitialAllocationRatios {
		r.Initial[strings.ToUpper(k)] = v
	}
	for rc, v := range map[string]*float64{
		ClassVCPU: pb.CPUAllocationRatio, ClassMemoryMB: pb.RAMAllocationRatio, ClassDiskGB: pb.DiskAllocationRatio,
	} {
		if v != nil {
			r.Override[rc] = *v
		}
	}
	for rc, v := range map[string]float64{
		ClassVCPU: pb.InitialCPUAllocationRatio, ClassMemoryMB: pb.InitialRAMAllocationRatio,
		ClassDiskGB: pb.InitialDiskAllocationRatio,
	} {
		if v != 0 {
			r.Initial[rc] = v
		}
	}
	return TrackerConfig{
		Mode:                   pb.Mode,
		SyncSchedule:           pb.SyncSchedule,
		SyncDelay:              pb.SyncDelay,
		ReportGenericResources: pb.ReportGenericResources,
		Ratios:                 r,
	}
}

// WithDefaults returns c with zero fields set to their defaults.
func (c TrackerConfig) WithDefaults() TrackerConfig {
	if c.SyncSchedule == "" {
		c.SyncSchedule = config.DefaultPlacementSyncSchedule
	}
	if c.SyncDelay <= 0 {
		c.SyncDelay = config.DefaultPlacementSyncDelay
	}
	if c.Concurrency <= 0 {
		c.Concurrency = 8
	}
	if c.ClaimGrace <= 0 {
		c.ClaimGrace = 10 * time.Second
	}
	return c
}

// parseSyncSchedule parses a sync schedule: a robfig/cron spec or SyncOff
// (nil schedule).
func parseSyncSchedule(spec string) (cron.Schedule, error) {
	if strings.EqualFold(strings.TrimSpace(spec), SyncOff) {
		return nil, nil
	}
	s, err := cron.ParseStandard(spec)
	if err != nil {
		return nil, fmt.Errorf("placement_backend.sync_schedule %q: %w (use a cron spec such as @every 60s, or %q)",
			spec, err, SyncOff)
	}
	return s, nil
}

// SyncStats describes one sync pass.
type SyncStats struct {
	// Skipped is set when another conductor held the sync lock: the pass
	// did nothing.
	Skipped bool
	// Created counts providers created for nodes new to Placement;
	// Updated, providers of changed nodes checked and written where they
	// differed; Unchanged, nodes whose desired state (fingerprint) had not
	// changed and that were not touched; Failed, nodes whose provider
	// could not be written (retried next pass).
	Created, Updated, Unchanged, Failed int
	// Deleted counts providers of deleted nodes removed from Placement.
	Deleted int
	// ClaimsReleased counts Placement consumers whose allocations were
	// deleted because no allocation backs their placement_claims row any
	// more (or their node is gone).
	ClaimsReleased int
	// Duration is the pass's wall time.
	Duration time.Duration
}

// Tracker is the Placement backend's resource tracker, the counterpart of
// Nova's ResourceTracker with the ironic driver: it mirrors every node as a
// resource provider (uuid = node uuid, name = node name or uuid) with one
// unit of CUSTOM_<RESOURCE_CLASS>, the node's traits and optionally
// VCPU/MEMORY_MB/DISK_GB, keeps unavailable nodes fully reserved, deletes the
// providers of deleted nodes and releases leaked claims. Create with
// NewTracker; Run it in every conductor (one syncs at a time).
type Tracker struct {
	pool *pgxpool.Pool
	q    *Queries
	pc   *client.Client
	cfg  TrackerConfig
	log  *zap.Logger

	// OnSync, when set before Run, is called after every pass Run makes.
	OnSync func(SyncStats, error)

	id          uuid.UUID // this tracker's row in placement_trackers
	registered  time.Time // when register last wrote it (Run's goroutine only)
	classes     sync.Map  // custom resource classes known to exist
	traits      sync.Map  // trait name → bool: exists (or was created) in Placement
	unreachable atomic.Bool

	mu      sync.Mutex
	failed  map[int64]bool     // nodes a pass could not mirror: the next periodic pass retries them
	orphans map[uuid.UUID]bool // providers of deleted nodes not deleted yet, likewise
	isLocal *bool              // mode auto's answer, once known
}

// NewTracker returns a Tracker mirroring the nodes of pool's database into
// the Placement service pc talks to. cfg's zero fields take their defaults.
func NewTracker(pool *pgxpool.Pool, pc *client.Client, cfg TrackerConfig, log *zap.Logger) *Tracker {
	return &Tracker{pool: pool, q: New(pool), pc: pc, cfg: cfg.WithDefaults(), log: log.Named("tracker"), id: uuid.New(),
		failed: map[int64]bool{}, orphans: map[uuid.UUID]bool{}}
}

// registerInterval is how often passes refresh the tracker's row (rows
// older than 10 minutes are expired).
const registerInterval = time.Minute

// register records (or refreshes, at most every registerInterval) this
// tracker in placement_trackers, which turns the node change log and its
// notifications on, and expires the rows of trackers that died without
// unregistering. Failures are logged: the next pass retries.
func (t *Tracker) register(ctx context.Context) {
	if time.Since(t.registered) < registerInterval {
		return
	}
	host, _ := os.Hostname()
	err := t.q.RegisterTracker(ctx, RegisterTrackerParams{ID: t.id, Hostname: host})
	if err == nil {
		err = t.q.ExpireTrackers(ctx)
	}
	if err == nil {
		t.registered = time.Now()
	}
	if err != nil && ctx.Err() == nil {
		t.log.Warn("could not register the resource tracker; node changes may wait for the periodic sync", zap.Error(err))
	}
}

// unregister removes this tracker's row (at the end of Run).
func (t *Tracker) unregister() {
	t.registered = time.Time{}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := t.q.UnregisterTracker(ctx, t.id); err != nil {
		t.log.Debug("could not unregister the resource tracker; it expires in 10 minutes", zap.Error(err))
	}
}

// Run makes a full pass at start and once more at the first periodic pass
// after it, a changes pass a SyncDelay after every node change
// notification (LISTEN metalloc_nodes on a dedicated connection,
// reconnecting with back-off; the notifications of the delay are folded
// into one pass), and a periodic pass on SyncSchedule (see
// tracker_sync.go), until ctx ends; then it returns nil. Passes never
// overlap. A failed pass (Placement or the database unreachable) is
// logged; its nodes stay in the change log or are retried by the next
// periodic pass. It returns an error only for an invalid SyncSchedule.
func (t *Tracker) Run(ctx context.Context) error {
	sched, err := parseSyncSchedule(t.cfg.SyncSchedule)
	if err != nil {
		return err
	}
	// Registered before listening: node changes from here on are logged.
	t.register(ctx)
	defer t.unregister()
	kick := make(chan struct{}, 1)
	tick := make(chan struct{}, 1)
	signal := func(ch chan struct{}) func() {
		return func() {
			select {
			case ch <- struct{}{}:
			default:
			}
		}
	}
	var wg sync.WaitGroup
	wg.Go(func() { db.Listen(ctx, t.pool, NodesNotifyChannel, t.log, signal(kick), signal(kick)) })
	defer wg.Wait()
	if sched != nil {
		logger := cronLogger{t.log.Sugar()}
		cr := cron.New(cron.WithLogger(logger), cron.WithChain(cron.Recover(logger)))
		cr.Schedule(sched, cron.FuncJob(signal(tick)))
		cr.Start()
		defer cr.Stop()
	} else {
		t.log.Info("periodic Placement sync is off; syncing on node changes only")
	}
	fulls := 2 // at start, and at the first periodic pass
	t.pass(ctx, passFull)
	fulls--
	var last time.Duration // how long the previous pass took
	for {
		kind := passChanges
		select {
		case <-ctx.Done():
			return nil
		case <-kick:
		case <-tick:
			kind = passPeriodic
		}
		spacing := t.cfg.SyncDelay
		if kind != passChanges {
			spacing = passSpacing(t.cfg.SyncDelay, last)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(spacing):
		}
		select { // fold what came during the delay
		case <-kick:
		default:
		}
		select {
		case <-tick:
			kind = passPeriodic
		default:
		}
		if kind == passPeriodic && fulls > 0 {
			kind, fulls = passFull, fulls-1
		}
		began := time.Now()
		t.pass(ctx, kind)
		last = time.Since(began)
	}
}

// passSpacing is how long Run waits before a periodic pass: SyncDelay,
// or four times the last pass's duration when that is longer (capped at
// 10 s). A changes pass waits SyncDelay: it reads only what changed.
func passSpacing(delay, last time.Duration) time.Duration {
	return max(delay, min(4*last, 10*time.Second))
}

// pass runs one pass of the kind for Run and logs its outcome.
func (t *Tracker) pass(ctx context.Context, kind passKind) {
	t.register(ctx)
	var st SyncStats
	var err error
	switch kind {
	case passFull:
		st, err = t.Sync(ctx)
	case passPeriodic:
		st, err = t.locked(ctx, func(ctx context.Context, st *SyncStats) error {
			if err := t.releaseLeakedClaims(ctx, st); err != nil {
				return err
			}
			return t.syncChanges(ctx, st, true)
		})
	default:
		st, err = t.SyncChanges(ctx)
	}
	if ctx.Err() != nil {
		return
	}
	switch {
	case client.IsUnreachable(err):
		if !t.unreachable.Swap(true) {
			t.log.Warn("Placement unreachable; retrying on the next sync", zap.String("endpoint", t.pc.Endpoint()),
				zap.Error(err))
		}
	case err != nil:
		t.log.Warn("Placement sync incomplete; retrying on the next sync", zap.Error(err))
	default:
		if t.unreachable.Swap(false) {
			t.log.Info("Placement reachable again", zap.String("endpoint", t.pc.Endpoint()))
		}
	}
	if st.Created+st.Updated+st.Deleted+st.ClaimsReleased+st.Failed > 0 {
		t.log.Info("Placement sync", zap.Int("created", st.Created), zap.Int("updated", st.Updated),
			zap.Int("unchanged", st.Unchanged), zap.Int("deleted", st.Deleted), zap.Int("failed", st.Failed),
			zap.Int("claims_released", st.ClaimsReleased), zap.Duration("duration", st.Duration))
	} else {
		t.log.Debug("Placement sync", zap.Bool("skipped", st.Skipped), zap.Int("unchanged", st.Unchanged),
			zap.Duration("duration", st.Duration))
	}
	if t.OnSync != nil {
		t.OnSync(st, err)
	}
}

// Sync makes a full pass: it releases leaked claims, deletes the
// providers of deleted nodes, creates or updates the providers of every
// node whose desired state changed since it was last written
// (placement_synced), then mirrors what the change log names. It holds a
// session-level advisory lock for the pass; when another conductor holds
// it, Sync returns at once with Skipped set. The error reports what could
// not be done (Placement unreachable: client.IsUnreachable; a database
// error; some providers failed); what could be done is done and recorded.
func (t *Tracker) Sync(ctx context.Context) (SyncStats, error) {
	return t.locked(ctx, t.syncAll)
}

// locked runs one pass, fn, under the sync lock (Skipped when another
// conductor holds it).
func (t *Tracker) locked(ctx context.Context, fn func(context.Context, *SyncStats) error) (st SyncStats, err error) {
	start := time.Now()
	defer func() { st.Duration = time.Since(start) }()
	conn, aerr := t.pool.Acquire(ctx)
	if aerr != nil {
		return st, fmt.Errorf("placement sync: %w", aerr)
	}
	defer conn.Release()
	var got bool
	if err := conn.QueryRow(ctx, "SELECT pg_try_advisory_lock($1)", trackerLockKey).Scan(&got); err != nil {
		return st, fmt.Errorf("placement sync: taking the sync lock: %w", err)
	}
	if !got {
		st.Skipped = true
		return st, nil
	}
	defer func() {
		uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if _, err := conn.Exec(uctx, "SELECT pg_advisory_unlock($1)", trackerLockKey); err != nil {
			// Closing the session releases the lock; the pool drops the
			// closed connection on Release.
			_ = conn.Conn().Close(uctx)
		}
	}()
	err = fn(ctx, &st)
	return st, err
}
