package backend

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/zap"

	"github.com/metalloc/metalloc/ironic"
)

// IronicConfig tunes the Ironic backend.
type IronicConfig struct {
	// MaxInFlight caps this conductor's requests in flight to Ironic for
	// allocations at a time (creations, reads, deletions), and is the
	// ceiling of its adaptive limit on allocations in flight in Ironic,
	// from their POST to seeing them settled (ironic.max_in_flight,
	// default 16; ironic_limit.go).
	MaxInFlight int
	// FixedLimit keeps the limit on allocations in flight at MaxInFlight
	// instead of adapting it to Ironic's confirm latency
	// (ironic.adaptive_limit false).
	FixedLimit bool
	// Capacity bounds the rows Claim has taken and Process not finished
	// (the conductor's workers, conductor.workers; default 16): a
	// conductor claims no more than it settles at once, the rest is left
	// to the others.
	Capacity int
	// AllocationTimeout bounds how long one allocation keeps trying nodes
	// while Ironic refuses them and other nodes fit, from its first node
	// tried by this conductor (a takeover, or a resume after an outage,
	// starts again); then it goes to error with Ironic's last reason
	// (ironic.allocation_timeout, default 60 s). A count of nodes would
	// be used up by other clients of Ironic taking nodes directly while
	// many fit (issue 40): time bounds the same loop whatever the
	// contention.
	AllocationTimeout time.Duration
	// LockedWait bounds how long an allocation keeps trying while every
	// fitting node is locked by others (conductor.locked_node_wait,
	// default 2 s).
	LockedWait time.Duration
	// OutageWait is how long Process waits for an unreachable Ironic to
	// come back before it leaves the allocation for a later resume
	// (default 30 s).
	OutageWait time.Duration
	// TombstoneKeep is how long a deleted allocation's journal row is kept,
	// so that a copy a late request created in Ironic is deleted too
	// (default 1 h).
	TombstoneKeep time.Duration
	// Pause, when set, is called at the named stages of an allocation
	// ("before_create": held and journaled, before POST; "after_create":
	// Ironic answered the POST, before the activation): a test hook that
	// stops a conductor between its two writes.
	Pause func(ctx context.Context, stage string, allocation string)
}

// Ironic is the Ironic backend (in front of Ironic: ironic.endpoint): the
// conductor picks and holds a node as the database backend does, without
// activating the allocation, creates the same allocation in Ironic with
// that node as the only candidate, and activates it once Ironic's copy is
// active there. A node Ironic refuses is marked unavailable and read
// again from Ironic at once (the mirror then has Ironic's word: taken
// there, in maintenance, gone), and another is tried while any fits, for
// up to AllocationTimeout; then the allocation goes to error with
// Ironic's reason. The journal
// ironic_allocations records what was sent, so that deletions reach Ironic
// and half-way failures are reconciled. conductor/doc.go ("In front of
// Ironic") is the protocol; the statements are in query.sql and
// migrations/00026_ironic_allocations.sql.
type Ironic struct {
	pool   *pgxpool.Pool
	q      *Queries
	client *ironic.Client
	// mirror reads a node Ironic refused again (Refresh).
	mirror *ironic.Mirror
	cfg    IronicConfig
	log    *zap.Logger

	// sem caps the requests in flight to Ironic (MaxInFlight).
	sem chan struct{}
	// limit bounds the allocations in flight in Ironic, POST sent and not
	// yet seen settled (create; ironic_limit.go).
	limit *limiter
	// down is set when Ironic could not be reached; claims stop until a
	// probe (at most every probeInterval) finds it back.
	down      atomic.Bool
	probeMu   sync.Mutex
	lastProbe time.Time
	// settleNS estimates how long Ironic takes to settle an allocation
	// after answering its POST (nanoseconds; a quantile tracked by
	// settleStep): the first poll waits that long.
	settleNS atomic.Int64
	// fineClock is set once Ironic's timestamps were seen with a
	// fractional second: from then on the limit's sample is Ironic's own
	// settle time (Allocation.InIronic), else the confirm latency.
	fineClock atomic.Bool
	// claimed holds the ids of the rows Claim took and Process has not
	// finished; pending counts them (Claim takes no more than Capacity).
	claimed sync.Map
	pending atomic.Int64
	// groups places allocation groups (Groups).
	groups *GroupReserver
	// Metrics, when set before use, records the backend's metrics.
	Metrics *IronicMetrics
}

// probeInterval is how often an unreachable Ironic is probed.
const probeInterval = time.Second

// ErrIronicUnavailable is wrapped by the errors of Process when Ironic
// could not be reached (or answered 5xx): the allocation stays allocating
// and owned, holding its node, and is resumed later.
var ErrIronicUnavailable = errors.New("Ironic is unavailable")

// NewIronic returns the Ironic backend on pool allocating through client.
func NewIronic(pool *pgxpool.Pool, client *ironic.Client, cfg IronicConfig, log *zap.Logger) *Ironic {
	if cfg.MaxInFlight <= 0 {
		cfg.MaxInFlight = 16
	}
	if cfg.AllocationTimeout <= 0 {
		cfg.AllocationTimeout = time.Minute
	}
	if cfg.Capacity <= 0 {
		cfg.Capacity = 16
	}
	if cfg.LockedWait <= 0 {
		cfg.LockedWait = 2 * time.Second
	}
	if cfg.OutageWait <= 0 {
		cfg.OutageWait = 30 * time.Second
	}
	if cfg.TombstoneKeep <= 0 {
		cfg.TombstoneKeep = time.Hour
	}
	if log == nil {
		log = zap.NewNop()
	}
	ilog := log.With(zap.String("ironic", client.Root()))
	b := &Ironic{pool: pool, q: New(pool), client: client, mirror: ironic.NewMirror(client, pool, 0, ilog), cfg: cfg,
		log: ilog, sem: make(chan struct{}, cfg.MaxInFlight)}
	b.limit = newLimiter(cfg.MaxInFlight, !cfg.FixedLimit, func(s limitState) { b.Metrics.limited(s) })
	b.settleNS.Store(int64(50 * time.Millisecond))
	b.groups = NewGroupReserver(pool, log)
	b.groups.LockedWait = cfg.LockedWait
	b.groups.Hold = true
	return b
}

// Client is the backend's Ironic client.
func (b *Ironic) Client() *ironic.Client { return b.client }

// Claim is the Ironic backend's claim (Backend): one statement claims up
// to n rows, and no more than the conductor can settle at once
// (Capacity, less the rows claimed and not yet processed), and holds a
// free node for each (metalloc_ironic_claim_hold). It makes no request to
// Ironic: every row is returned for Process, which the conductor's
// workers run at the same time (ProcessQueued). While Ironic is
// unreachable it claims nothing.
func (b *Ironic) Claim(ctx context.Context, me int64, n int) (reserved, rest []Claimed, err error) {
	n = min(n, b.cfg.Capacity-int(b.pending.Load()))
	if n <= 0 || !b.up(ctx) {
		return nil, nil, nil
	}
	rows, err := b.q.IronicClaimHold(ctx, IronicClaimHoldParams{Me: me, Batch: int32(n)})
	if err != nil {
		return nil, nil, fmt.Errorf("claiming allocations: %w", err)
	}
	if len(rows) == 0 {
		return nil, nil, nil
	}
	ids := make([]int64, len(rows))
	for i, r := range rows {
		ids[i] = r.ID
		if _, dup := b.claimed.LoadOrStore(r.ID, struct{}{}); !dup {
			b.pending.Add(1)
		}
	}
	rest, err = readClaimed(ctx, b.q, me, ids)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: reading claimed allocations: %w", ErrClaimedUnread, err)
	}
	return nil, rest, nil
}

// ProcessQueued is true: the rows Claim returns go to the conductor's
// workers, each settled in Ironic at the same time as the others (Queued).
func (b *Ironic) ProcessQueued() bool { return true }

// Process settles owned row c (Backend): the node it holds, or a node
// held now, created in Ironic and activated, another node after a
// refusal, or error. While Ironic is unreachable it waits for it up to
// OutageWait, then returns an error wrapping ErrIronicUnavailable (the row
// stays allocating and owned, with its node).
func (b *Ironic) Process(ctx context.Context, me int64, c *Claimed) (Outcome, error) {
	defer func() {
		if _, ok := b.claimed.LoadAndDelete(c.ID); ok {
			b.pending.Add(-1)
		}
	}()
	if err := b.waitUp(ctx); err != nil {
		return Lost, fmt.Errorf("processing allocation %s: %w", c.UUID, err)
	}
	reqs, err := b.q.IronicRequests(ctx, IronicRequestsParams{Ids: []int64{c.ID}, Me: me})
	if err != nil {
		return Lost, fmt.Errorf("processing allocation %s: %w", c.UUID, err)
	}
	if len(reqs) == 0 || reqs[0].GroupID != nil {
		// Not ours any more; or a member of a group being placed, which
		// its group settles (a takeover or resume moved it here).
		return Lost, nil
	}
	return b.settle(ctx, me, reqs[0])
}

// up reports whether Ironic is taken to be reachable; while it is not, it
// probes it at most every probeInterval.
func (b *Ironic) up(ctx context.Context) bool {
	if !b.down.Load() {
		return true
	}
	b.probeMu.Lock()
	if time.Since(b.lastProbe) < probeInterval {
		b.probeMu.Unlock()
		return false
	}
	b.lastProbe = time.Now()
	b.probeMu.Unlock()
	if err := b.client.Probe(ctx); err != nil {
		return false
	}
	if b.down.CompareAndSwap(true, false) {
		b.log.Info("Ironic reachable again; allocations proceed")
		b.Metrics.unavailable(false)
	}
	return true
}

// waitUp waits until Ironic is reachable (up), for at most OutageWait.
func (b *Ironic) waitUp(ctx context.Context) error {
	deadline := time.Now().Add(b.cfg.OutageWait)
	for !b.up(ctx) {
		if time.Now().After(deadline) {
			return ErrIronicUnavailable
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(probeInterval / 4):
		}
	}
	return nil
}

// trouble records that err from Ironic says it is unavailable: claims
// stop until a probe finds it back. It returns err wrapped with
// ErrIronicUnavailable.
func (b *Ironic) trouble(err error) error {
	if b.down.CompareAndSwap(false, true) {
		b.log.Warn("Ironic unavailable; allocations stay allocating until it is back", zap.Error(err))
		b.Metrics.unavailable(true)
	}
	return fmt.Errorf("%w: %w", ErrIronicUnavailable, err)
}

// request runs fn, one request to Ironic of kind ("create", "get",
// "delete", "refresh"), within the in-flight cap.
func (b *Ironic) request(ctx context.Context, kind string, fn func() error) error {
	b.Metrics.request(kind)
	select {
	case b.sem <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	defer func() { <-b.sem }()
	sent := time.Now()
	err := fn()
	b.Metrics.answered(kind, time.Since(sent))
	return err
}

// transient is the error of Process when the database or Ironic could not
// be reached (or ctx ended): the row stays allocating and owned.
func transientErr(c Claimed, err error) (Outcome, error) {
	return Lost, fmt.Errorf("processing allocation %s: %w", c.UUID, err)
}
