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
}

// NewTracker returns a Tracker mirroring the nodes of pool's database into
// the Placement service pc talks to. cfg's zero fields take their defaults.
func NewTracker(pool *pgxpool.Pool, pc *client.Client, cfg TrackerConfig, log *zap.Logger) *Tracker {
	return &Tracker{pool: pool, q: New(pool), pc: pc, cfg: cfg.WithDefaults(), log: log.Named("tracker"), id: uuid.New()}
}

// registerInterval is how often passes refresh the tracker's row (rows
// older than 10 minutes are expired).
const registerInterval = time.Minute

// register records (or refreshes, at most every registerInterval) this
// tracker in placement_trackers, which turns node-change notifications on,
// and expires the rows of trackers that died without unregistering. Failures are logged: the next pass
// retries, and the periodic sync covers missed notifications.
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

// Run syncs on SyncSchedule and whenever nodes change (LISTEN
// metalloc_nodes on a dedicated connection, reconnecting with back-off;
// notifications are gathered for SyncDelay), plus once at start, until ctx
// ends; then it returns nil. Passes never overlap. A failed pass (Placement
// or the database unreachable) is logged and retried on the next one. It
// returns an error only for an invalid SyncSchedule.
func (t *Tracker) Run(ctx context.Context) error {
	sched, err := parseSyncSchedule(t.cfg.SyncSchedule)
	if err != nil {
		return err
	}
	// Registered before listening: node changes from here on notify.
	t.register(ctx)
	defer t.unregister()
	kick := make(chan struct{}, 1)
	signal := func() {
		select {
		case kick <- struct{}{}:
		default:
		}
	}
	var wg sync.WaitGroup
	wg.Go(func() { db.Listen(ctx, t.pool, NodesNotifyChannel, t.log, signal, func() {}) })
	defer wg.Wait()
	if sched != nil {
		logger := cronLogger{t.log.Sugar()}
		cr := cron.New(cron.WithLogger(logger), cron.WithChain(cron.Recover(logger)))
		cr.Schedule(sched, cron.FuncJob(signal))
		cr.Start()
		defer cr.Stop()
	} else {
		t.log.Info("periodic Placement sync is off; syncing on node changes only")
	}
	signal()
	var last time.Duration // how long the previous pass took
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-kick:
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(passSpacing(t.cfg.SyncDelay, last)):
		}
		select { // fold the notifications that came during the delay
		case <-kick:
		default:
		}
		began := time.Now()
		t.pass(ctx)
		last = time.Since(began)
	}
}

// passSpacing is how long Run gathers node changes before the next pass:
// SyncDelay, or four times the last pass's duration when that is longer
// (capped at 10 s), so that a stream of changes (every reservation changes
// a node) keeps the tracker busy at most a fifth of the time instead of
// re-reading every node back to back.
func passSpacing(delay, last time.Duration) time.Duration {
	return max(delay, min(4*last, 10*time.Second))
}

// pass runs one Sync for Run and logs its outcome.
func (t *Tracker) pass(ctx context.Context) {
	t.register(ctx)
	st, err := t.Sync(ctx)
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

// Sync makes one pass: it releases leaked claims, deletes the providers of
// deleted nodes, and creates or updates the providers of nodes whose desired
// state changed since it was last written (placement_synced). It holds a
// session-level advisory lock for the pass; when another conductor holds it,
// Sync returns at once with Skipped set. The error reports what could not be
// done (Placement unreachable: client.IsUnreachable; a database error; some
// providers failed); what could be done is done and recorded.
func (t *Tracker) Sync(ctx context.Context) (st SyncStats, err error) {
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
	err = t.sync(ctx, &st)
	return st, err
}

func (t *Tracker) sync(ctx context.Context, st *SyncStats) error {
	if err := t.releaseLeakedClaims(ctx, st); err != nil {
		return err
	}
	if err := t.deleteOrphans(ctx, st); err != nil {
		return err
	}
	nodes, err := t.q.TrackerNodes(ctx)
	if err != nil {
		return fmt.Errorf("placement sync: reading nodes: %w", err)
	}
	type job struct {
		n  TrackerNodesRow
		fp string
	}
	var jobs []job
	for _, n := range nodes {
		if n.Claimed && !t.cfg.ReportGenericResources {
			// In use through its own Placement claim: the claim's usage
			// takes the whole CUSTOM_ class already, so the provider stays
			// as it was while available, and a placement-backend
			// reservation costs the tracker no Placement request. (Generic
			// resources, when reported, must be reserved while in use.)
			n.Available = true
		}
		fp := t.fingerprint(n)
		if n.SyncedFingerprint != nil && *n.SyncedFingerprint == fp {
			st.Unchanged++
			continue
		}
		jobs = append(jobs, job{n, fp})
	}
	// The first unreachable answer stops the pass: the rest would only
	// wait for their timeouts.
	wctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var mu sync.Mutex
	var firstErr error
	forEach(wctx, t.cfg.Concurrency, jobs, func(ctx context.Context, j job) {
		created, err := t.syncNode(ctx, j.n)
		if err == nil {
			err = t.q.UpsertPlacementSynced(ctx, UpsertPlacementSyncedParams{NodeUuid: j.n.Uuid, Fingerprint: j.fp})
		}
		mu.Lock()
		defer mu.Unlock()
		switch {
		case err != nil:
			st.Failed++
			if firstErr == nil {
				firstErr = err
			}
			if client.IsUnreachable(err) {
				cancel(err)
			} else if ctx.Err() == nil {
				t.log.Warn("cannot mirror node in Placement; retrying on the next sync",
					zap.Stringer("node", j.n.Uuid), zap.String("name", j.n.Name), zap.Error(err))
			}
		case created:
			st.Created++
		default:
			st.Updated++
		}
	})
	if err := context.Cause(wctx); err != nil && ctx.Err() == nil {
		return err
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if firstErr != nil {
		return fmt.Errorf("placement sync: %d of %d changed nodes not mirrored; first: %w", st.Failed, len(jobs), firstErr)
	}
	return nil
}

// forEach calls fn for every item with at most n calls running at once,
// and returns when all have returned; items not yet started when ctx ends
// are skipped.
func forEach[T any](ctx context.Context, n int, items []T, fn func(context.Context, T)) {
	sem := make(chan struct{}, max(n, 1))
	var wg sync.WaitGroup
	for _, it := range items {
		select {
		case <-ctx.Done():
		case sem <- struct{}{}:
			wg.Go(func() {
				defer func() { <-sem }()
				fn(ctx, it)
			})
			continue
		}
		break
	}
	wg.Wait()
}

// releaseLeakedClaims deletes the Placement allocations of claims no
// allocation backs any more (LeakedPlacementClaims), then their rows, and
// marks their providers stale so that reserved is recomputed.
func (t *Tracker) releaseLeakedClaims(ctx context.Context, st *SyncStats) error {
	rows, err := t.q.LeakedPlacementClaims(ctx, t.cfg.ClaimGrace.Seconds())
	if err != nil {
		return fmt.Errorf("placement sync: reading claims: %w", err)
	}
	for _, r := range rows {
		if err := t.releaseClaim(ctx, r.ConsumerUuid, r.ProviderUuid); err != nil {
			if client.IsUnreachable(err) || ctx.Err() != nil {
				return err
			}
			t.log.Warn("cannot release leaked Placement claim; retrying on the next sync",
				zap.Stringer("consumer", r.ConsumerUuid), zap.Stringer("provider", r.ProviderUuid), zap.Error(err))
			continue
		}
		st.ClaimsReleased++
		t.log.Info("released leaked Placement claim", zap.Stringer("consumer", r.ConsumerUuid),
			zap.Stringer("provider", r.ProviderUuid))
	}
	return nil
}

// releaseClaim deletes consumer's allocations in Placement (none is fine)
// and its placement_claims row, and marks provider stale.
func (t *Tracker) releaseClaim(ctx context.Context, consumer, provider uuid.UUID) error {
	if err := t.pc.DeleteAllocations(ctx, consumer); err != nil && !client.IsNotFound(err) {
		return err
	}
	if err := t.q.DeletePlacementClaim(ctx, DeletePlacementClaimParams{ConsumerUuid: consumer, ProviderUuid: provider}); err != nil {
		return err
	}
	return t.q.MarkPlacementStale(ctx, provider)
}

// deleteOrphans deletes the providers of deleted nodes. One that still has
// allocations (409) first loses those of the consumers placement_claims
// lists for it; if it still cannot go, it stays until a later pass.
func (t *Tracker) deleteOrphans(ctx context.Context, st *SyncStats) error {
	ids, err := t.q.OrphanPlacementSynced(ctx)
	if err != nil {
		return fmt.Errorf("placement sync: reading deleted nodes: %w", err)
	}
	for _, id := range ids {
		err := t.pc.DeleteProvider(ctx, id)
		if client.IsConflict(err) {
			consumers, qerr := t.q.ClaimsOfProvider(ctx, id)
			if qerr != nil {
				return qerr
			}
			for _, c := range consumers {
				if rerr := t.releaseClaim(ctx, c, id); rerr != nil {
					err = rerr
					break
				}
				st.ClaimsReleased++
			}
			if len(consumers) > 0 && !client.IsUnreachable(err) {
				err = t.pc.DeleteProvider(ctx, id)
			}
		}
		if err != nil && !client.IsNotFound(err) {
			if client.IsUnreachable(err) || ctx.Err() != nil {
				return err
			}
			t.log.Warn("cannot delete the provider of a deleted node; retrying on the next sync",
				zap.Stringer("provider", id), zap.Error(err))
			continue
		}
		if err := t.q.DeletePlacementSynced(ctx, id); err != nil {
			return err
		}
		st.Deleted++
		t.log.Info("deleted the provider of a deleted node", zap.Stringer("provider", id))
	}
	return nil
}
