package backend

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/zap"

	"github.com/metalloc/metalloc/db"
	"github.com/metalloc/metalloc/placement"
	"github.com/metalloc/metalloc/placement/client"
	"github.com/metalloc/metalloc/scheduler"
)

// Placement backend modes (PlacementConfig.Mode, placement_backend.mode).
const (
	// PlacementModeAuto claims in-process when the Placement at the
	// endpoint is metalloc-placement on the conductor's own database (its
	// version document names the same database identity), over HTTP
	// otherwise.
	PlacementModeAuto = "auto"
	// PlacementModeLocal always claims in-process: the candidate search and
	// the allocation write of metalloc-placement run in the conductor, the
	// write in the same transaction as the node reservation.
	PlacementModeLocal = "local"
	// PlacementModeHTTP always claims through the Placement API.
	PlacementModeHTTP = "http"
)

// ValidPlacementMode reports whether m is a placement_backend.mode.
func ValidPlacementMode(m string) bool {
	return m == PlacementModeAuto || m == PlacementModeLocal || m == PlacementModeHTTP
}

// modeProbeInterval is how often mode auto asks Placement again while it
// could not tell (Placement unreachable): HTTP is used meanwhile.
const modeProbeInterval = 10 * time.Second

// modeState is Placement's resolved mode.
type modeState struct {
	// local: 0 undecided, 1 local, 2 http.
	local     atomic.Int32
	mu        sync.Mutex
	lastProbe time.Time
}

// Local reports whether the allocator claims in-process, resolving mode
// auto on first use (and again every 10 s while Placement cannot be
// reached: HTTP until then).
func (p *Placement) Local(ctx context.Context) bool {
	switch p.mode.local.Load() {
	case 1:
		return true
	case 2:
		return false
	}
	p.mode.mu.Lock()
	defer p.mode.mu.Unlock()
	if v := p.mode.local.Load(); v != 0 {
		return v == 1
	}
	if time.Since(p.mode.lastProbe) < modeProbeInterval {
		return false
	}
	p.mode.lastProbe = time.Now()
	local, err := p.probeLocal(ctx)
	if err != nil {
		p.log.Warn("placement_backend.mode auto: cannot tell whether Placement shares this database; "+
			"claiming over HTTP until it answers", zap.Error(err))
		return false
	}
	if local {
		p.mode.local.Store(1)
		p.log.Info("placement_backend.mode auto: Placement is metalloc-placement on this database; claiming in-process")
	} else {
		p.mode.local.Store(2)
		p.log.Info("placement_backend.mode auto: Placement is another service or database; claiming over HTTP")
	}
	return local
}

// probeLocal compares the database identity in Placement's version
// document with this database's.
func (p *Placement) probeLocal(ctx context.Context) (bool, error) {
	return PlacementIsLocal(ctx, p.pool, p.pc)
}

// PlacementIsLocal reports whether the Placement service pc talks to is
// metalloc-placement on pool's database: the database identity its
// version document names (placement.IdentityHeader) is this database's.
// Mode auto claims in-process then, and the resource tracker mirrors
// in-process.
func PlacementIsLocal(ctx context.Context, pool *pgxpool.Pool, pc *client.Client) (bool, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	theirs, err := pc.RootHeader(ctx, placement.IdentityHeader)
	if err != nil {
		return false, err
	}
	if theirs == "" {
		return false, nil
	}
	ours, err := placement.DatabaseIdentity(ctx, pool)
	if err != nil {
		return false, fmt.Errorf("reading this database's identity: %w", err)
	}
	return ours == theirs, nil
}

// schedulerFor is the scheduler of the mode: Placement's candidates over
// HTTP or in-process.
func (p *Placement) schedulerFor(local bool) *scheduler.Scheduler {
	if local {
		return p.localSched
	}
	return p.sched
}

// errLocalChanged, errLocalLost and errLocalInstance roll a local claim's
// transaction back with the step it ended with.
var (
	errLocalChanged  = errors.New("node no longer fits")
	errLocalLost     = errors.New("allocation no longer owned")
	errLocalInstance = errors.New("instance uuid in use")
)

// claimLocal is claimOne in-process: one transaction logs the claim,
// reserves the node (guarded by conductor_affinity = me) and writes the
// Placement allocation with metalloc-placement's own code (replacing what
// an interrupted run left). Any refusal rolls everything back, so nothing
// needs undoing.
func (p *Placement) claimLocal(ctx context.Context, me int64, c Claimed, sel scheduler.Selection) (step, error) {
	node := sel.ComputeNodeUUID
	req, err := sel.Request()
	if err != nil {
		return 0, &placementRefused{err}
	}
	if c.CandidateNodes != nil && !slices.Contains(c.CandidateNodes, node) {
		return stepChanged, nil
	}
	err = db.InTx(ctx, p.pool, func(tx pgx.Tx) error {
		q := p.q.WithTx(tx)
		if err := q.RecordPlacementClaim(ctx, RecordPlacementClaimParams{ConsumerUuid: c.UUID, ProviderUuid: node}); err != nil {
			return err
		}
		r, err := q.Reserve(ctx, ReserveParams{Candidates: []uuid.UUID{node}, ResourceClass: c.ResourceClass,
			Owner: c.Owner, Traits: c.Traits, AllocationID: c.ID, Me: me})
		switch {
		case errors.Is(err, pgx.ErrNoRows):
			return errLocalChanged
		case db.IsUniqueViolation(err, "nodes_instance_uuid_key"):
			return errLocalInstance
		case err != nil:
			return err
		case !r.Reserved:
			return errLocalLost
		}
		return placement.ClaimTx(ctx, tx, placement.LocalClaim{Consumer: c.UUID, ProjectID: projectOf(c),
			UserID: PlacementUserID, ConsumerType: client.ConsumerType, Request: req})
	})
	switch {
	case err == nil:
		return stepReserved, nil
	case errors.Is(err, errLocalChanged):
		return stepChanged, nil
	case errors.Is(err, errLocalLost):
		return stepLost, nil
	case errors.Is(err, errLocalInstance):
		return stepInstanceTaken, nil
	case client.IsConflict(err):
		return stepTaken, nil
	case db.IsUnavailable(err) || ctx.Err() != nil:
		return 0, err
	}
	var ce *client.Error
	if errors.As(err, &ce) {
		return 0, &placementRefused{err}
	}
	p.log.Warn("reserving the claimed node failed; trying the next one", zap.Stringer("allocation", c.UUID),
		zap.Stringer("node", node), zap.Error(err))
	return stepChanged, nil
}

// unclaimLocal removes c's Placement allocations in-process (those an
// earlier run left: a local claim never outlives its transaction) and
// its claim log entry.
func (p *Placement) unclaimLocal(ctx context.Context, c Claimed) error {
	return db.InTx(ctx, p.pool, func(tx pgx.Tx) error {
		if err := placement.UnclaimTx(ctx, tx, c.UUID); err != nil {
			return err
		}
		_, err := p.q.WithTx(tx).ForgetPlacementClaim(ctx, ForgetPlacementClaimParams{ConsumerUuid: c.UUID})
		return err
	})
}

// ClaimReserveLocal is the fast path of mode local, the Placement
// backend's counterpart of Database.ClaimReserve: one statement
// (metalloc_claim_reserve_placement) claims up to batch unowned allocating
// rows for conductor me and, for each that a free node's flat resource
// provider can take now (picked by metalloc's filters, then verified
// against Placement under the providers' lock, up to 4 picks per row:
// migration 00042), writes the Placement consumer and allocation
// (user PlacementUserID, project the owner or PlacementUserID, as claimLocal
// does) and reserves the node, in one transaction. It returns the rows
// reserved (ID, UUID and CreatedAt) and the claimed rows left for
// ClaimBatch and Process (candidate_nodes, a class or trait Placement does
// not know, no free pair, a consumer that exists), read in full. On
// ErrClaimedUnread the reserved rows are valid and the rest stay owned.
// Call it only when Local holds.
func (p *Placement) ClaimReserveLocal(ctx context.Context, me int64, batch int) (reserved, rest []Claimed, err error) {
	rows, err := p.q.ClaimReservePlacement(ctx, ClaimReservePlacementParams{Me: me, Batch: int32(batch),
		UserID: PlacementUserID, ConsumerType: client.ConsumerType})
	if err != nil {
		return nil, nil, fmt.Errorf("claiming and reserving through local Placement: %w", err)
	}
	out := make([]ClaimReserveRow, len(rows))
	for i, r := range rows {
		out[i] = ClaimReserveRow(r)
	}
	return splitClaimed(ctx, p.q, me, out)
}

// batchJob is one claimed row of a batch with its selections.
type batchJob struct {
	c    Claimed
	sels []scheduler.Selection
}

// ClaimBatch reserves nodes for rows (claimed by conductor me) the fast
// way: one allocation-candidates query per group of rows asking for the
// same thing (resource class, traits, owner; in mode local a cached
// answer), SelectDestinations for the whole group (a chosen node and
// alternates per row), the groups concurrently, then the claims:
// in-process, one transaction for the whole batch (localRound: each row
// takes the first of its selections that is free, fits and is unlocked);
// over HTTP, every row concurrently through claimOne. It returns the rows
// reserved (ID, UUID and CreatedAt) and those left for Process: rows with
// candidate_nodes, rows whose group got fewer nodes than rows, rows whose
// selections were all taken, and every row an error stopped.
func (p *Placement) ClaimBatch(ctx context.Context, me int64, rows []Claimed) (reserved, rest []Claimed) {
	began := time.Now()
	var selected time.Duration
	local := p.Local(ctx)
	defer func() {
		p.log.Debug("batch claimed through Placement", zap.Bool("local", local), zap.Int("rows", len(rows)),
			zap.Int("reserved", len(reserved)), zap.Duration("took", time.Since(began)),
			zap.Duration("selecting", selected))
	}()
	groups := map[string][]Claimed{}
	var keys []string
	for _, c := range rows {
		if c.Traits == nil {
			c.Traits = []string{}
		}
		if len(c.CandidateNodes) > 0 {
			rest = append(rest, c)
			continue
		}
		c.CandidateNodes = nil
		traits := slices.Clone(c.Traits)
		slices.Sort(traits)
		key := c.ResourceClass + "\x00" + strings.Join(traits, ",") + "\x00"
		if c.Owner != nil {
			key += "=" + *c.Owner
		}
		if groups[key] == nil {
			keys = append(keys, key)
		}
		groups[key] = append(groups[key], c)
	}
	// One selection per group, the groups concurrently (each is a
	// candidates query, cached in mode local, and a database filter).
	sels := make([][][]scheduler.Selection, len(keys))
	spare := make([][]Claimed, len(keys))
	gs := make([][]Claimed, len(keys))
	for i, key := range keys {
		gs[i] = groups[key]
	}
	var wg sync.WaitGroup
	for i := range keys {
		wg.Add(1)
		go func() {
			defer wg.Done()
			g := gs[i]
			spec := scheduler.RequestSpec{InstanceUUID: g[0].UUID, ResourceClass: g[0].ResourceClass,
				Traits: g[0].Traits, Owner: g[0].Owner}
			s, err := p.selectBatch(ctx, local, spec, len(g))
			var nvh *scheduler.NoValidHostError
			if errors.As(err, &nvh) && nvh.Fitting > 0 && nvh.Fitting < len(g) {
				// Fewer nodes than rows: select for as many rows as
				// there are nodes; Process tells the others why.
				spare[i], g = g[nvh.Fitting:], g[:nvh.Fitting]
				gs[i] = g
				s, err = p.selectBatch(ctx, local, spec, len(g))
			}
			if err != nil {
				// Process says why (no valid host, an unknown trait) or
				// retries later (an outage).
				spare[i], sels[i] = append(spare[i], g...), nil
				return
			}
			sels[i] = s
		}()
	}
	wg.Wait()
	selected = time.Since(began)
	var jobs []*batchJob
	for i := range keys {
		rest = append(rest, spare[i]...)
		if sels[i] == nil {
			continue
		}
		for k, c := range gs[i] {
			jobs = append(jobs, &batchJob{c: c, sels: sels[i][k]})
		}
	}
	if len(jobs) == 0 {
		return nil, rest
	}
	var more []Claimed
	if local {
		reserved, more = p.claimBatchLocal(ctx, me, jobs)
	} else {
		reserved, more = p.claimBatchHTTP(ctx, me, jobs)
	}
	return reserved, append(rest, more...)
}

// httpBatchConcurrency is the most rows of one batch that claimBatchHTTP
// claims at a time: each is a request to Placement, and a batch is up to
// conductor.claim_batch rows (16 by default) on each of the workers.
const httpBatchConcurrency = 8

// claimBatchHTTP claims the jobs over HTTP, httpBatchConcurrency at a time
// (claimOne on each job's selections in order).
func (p *Placement) claimBatchHTTP(ctx context.Context, me int64, jobs []*batchJob) (reserved, rest []Claimed) {
	outs := make([]step, len(jobs))
	errs := make([]error, len(jobs))
	var wg sync.WaitGroup
	slots := make(chan struct{}, httpBatchConcurrency)
	for i, j := range jobs {
		wg.Add(1)
		slots <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-slots }()
			outs[i] = stepTaken
			for _, sel := range j.sels {
				st, err := p.claimOne(ctx, me, j.c, sel)
				outs[i], errs[i] = st, err
				if err != nil || (st != stepTaken && st != stepChanged) {
					return
				}
			}
		}()
	}
	wg.Wait()
	for i, j := range jobs {
		switch {
		case errs[i] == nil && outs[i] == stepReserved:
			reserved = append(reserved, j.c)
		case errs[i] == nil && outs[i] == stepLost:
			p.log.Info("allocation no longer owned by this conductor; dropping it", zap.Stringer("allocation", j.c.UUID))
		default:
			rest = append(rest, j.c)
		}
	}
	return reserved, rest
}

// claimBatchLocal claims the jobs in-process in one transaction: each row
// takes the first of its selections (the chosen node, then the
// alternates) that is free, fits and is not locked by a concurrent claim,
// and that Placement's capacity check accepts.
func (p *Placement) claimBatchLocal(ctx context.Context, me int64, jobs []*batchJob) (reserved, rest []Claimed) {
	ok, err := p.localRound(ctx, me, jobs)
	if err != nil {
		if !db.IsUnavailable(err) && ctx.Err() == nil {
			p.log.Warn("batch claim through local Placement failed; processing the rows one by one", zap.Error(err))
		}
		ok = make([]bool, len(jobs))
	}
	for i, j := range jobs {
		if ok[i] {
			reserved = append(reserved, j.c)
		} else {
			rest = append(rest, j.c)
		}
	}
	return reserved, rest
}

// localRound is one transaction claiming a node for every job, in three
// pipelined round trips on one connection: lock, for each job, the first
// of its selections' nodes that is free, fits and is not locked
// (PickFirstFree; a node is offered to one job only), the rows (still
// me's), and insert the consumers; lock the picked nodes' providers (id
// order) and read their inventories with usage; then, for the jobs
// Placement's check accepts on their node, write the allocations
// (generation bumps), the claim log, activate the rows and hold the
// nodes, and commit. ok[i] says which jobs were
// reserved; the others wrote nothing. An error means nothing was written.
func (p *Placement) localRound(ctx context.Context, me int64, round []*batchJob) ([]bool, error) {
	n := len(round)
	claims := make([]placement.LocalClaim, n)
	lists := make([][]uuid.UUID, n)
	ids := make([]int64, n)
	consumers := make([]uuid.UUID, n)
	offered := map[uuid.UUID]bool{}
	for i, j := range round {
		ids[i], consumers[i] = j.c.ID, j.c.UUID
		claims[i] = placement.LocalClaim{Consumer: j.c.UUID, ProjectID: projectOf(j.c), UserID: PlacementUserID,
			ConsumerType: client.ConsumerType}
		for _, sel := range j.sels {
			if offered[sel.ComputeNodeUUID] {
				continue
			}
			req, err := sel.Request()
			if err != nil {
				return nil, err
			}
			offered[sel.ComputeNodeUUID] = true
			lists[i] = append(lists[i], sel.ComputeNodeUUID)
			claims[i].Options = append(claims[i].Options, req)
		}
		if len(claims[i].Options) == 0 {
			// Every selection went to an earlier row: nothing to lock.
			claims[i].Options = []client.AllocationRequest{{}}
		}
	}
	conn, err := p.pool.Acquire(ctx)
	if err != nil {
		return nil, err
	}
	defer conn.Release()
	rollback := func(cause error) error {
		if _, err := conn.Exec(context.WithoutCancel(ctx), "ROLLBACK"); err != nil {
			// The connection's state is unknown: do not reuse it.
			_ = conn.Conn().Close(context.WithoutCancel(ctx))
		}
		return cause
	}

	b := &pgx.Batch{}
	b.Queue("BEGIN")
	nodeIDs := make([]int64, n)
	picked := make([]uuid.UUID, n)
	for i, j := range round {
		b.Queue(pickFirstFree, lists[i], j.c.ResourceClass, j.c.Owner, j.c.Traits).Query(func(rows pgx.Rows) error {
			for rows.Next() {
				if err := rows.Scan(&nodeIDs[i], &picked[i]); err != nil {
					return err
				}
			}
			return rows.Err()
		})
	}
	owned := map[int64]bool{}
	b.Queue(lockOwnedAllocating, ids, me).Query(func(rows pgx.Rows) error {
		for rows.Next() {
			var id int64
			if err := rows.Scan(&id); err != nil {
				return err
			}
			owned[id] = true
		}
		return rows.Err()
	})
	inUse := map[uuid.UUID]bool{}
	b.Queue(instancesInUse, consumers).Query(func(rows pgx.Rows) error {
		for rows.Next() {
			var u uuid.UUID
			if err := rows.Scan(&u); err != nil {
				return err
			}
			inUse[u] = true
		}
		return rows.Err()
	})
	pc := placement.QueueConsumers(b, claims)
	if err := conn.SendBatch(ctx, b).Close(); err != nil {
		return nil, rollback(err)
	}
	// Only the picked nodes' providers: those of the nodes not picked may
	// be another claim's, and locking them would queue behind it.
	b = &pgx.Batch{}
	for i := range round {
		pc.Choose(i, slices.Index(lists[i], picked[i])) // -1 when none was picked
	}
	pc.QueueProviders(b)
	if err := conn.SendBatch(ctx, b).Close(); err != nil {
		return nil, rollback(err)
	}
	checks := pc.Check()
	ok := make([]bool, n)
	var okConsumers, okNodes []uuid.UUID
	for i, j := range round {
		ok[i] = nodeIDs[i] != 0 && owned[j.c.ID] && !inUse[j.c.UUID] && checks[i] == nil
		if ok[i] {
			okConsumers = append(okConsumers, consumers[i])
			okNodes = append(okNodes, picked[i])
		}
	}

	b = &pgx.Batch{}
	pc.QueueWrite(b, ok)
	if len(okConsumers) > 0 {
		b.Queue(recordPlacementClaims, okConsumers, okNodes)
	}
	// One statement activates the rows and holds their nodes.
	var holdNodes, holdIDs []int64
	var holdTraits []string
	for i, j := range round {
		if ok[i] {
			holdNodes = append(holdNodes, nodeIDs[i])
			holdIDs = append(holdIDs, j.c.ID)
			holdTraits = append(holdTraits, strings.Join(j.c.Traits, ","))
		}
	}
	heldIDs := map[int64]bool{}
	if len(holdIDs) > 0 {
		b.Queue(holdPickedMany, holdNodes, holdIDs, holdTraits, me).Query(func(rows pgx.Rows) error {
			for rows.Next() {
				var id int64
				if err := rows.Scan(&id); err != nil {
					return err
				}
				heldIDs[id] = true
			}
			return rows.Err()
		})
	}
	b.Queue("COMMIT")
	if err := conn.SendBatch(ctx, b).Close(); err != nil {
		return nil, rollback(err)
	}
	for i, j := range round {
		if ok[i] && !heldIDs[j.c.ID] {
			// The row was locked and owned: this cannot happen. Its
			// Placement allocation is in the claim log, for the tracker.
			p.log.Error("allocation not activated by its batch claim", zap.Stringer("allocation", round[i].c.UUID))
			ok[i] = false
		}
	}
	return ok, nil
}

// candidateCacheTTL is how long mode local reuses one allocation-candidates
// answer for the same request (resource class, traits, tree) across
// batches and workers. A stale candidate costs nothing wrong: the
// scheduler's database filter (FitNodes) drops the nodes reserved since,
// and the claim transaction checks the node and Placement's capacity
// under their locks; when the filter leaves too few, the answer is
// dropped and asked again (selectDestinations).
const candidateCacheTTL = time.Second

// candidateCacheLimit is the smallest limit= a cached query asks for, so
// that batches of any size share one answer.
const candidateCacheLimit = 240

// cachedCandidates is the in-process candidate source of mode local with a
// short-lived answer per query (limit aside). Queries without a limit
// (all candidates) pass through.
type cachedCandidates struct {
	inner scheduler.CandidateSource
	mu    sync.Mutex
	byKey map[string]*candidateEntry
}

// candidateEntry is one cached answer; ready is closed once it is loaded.
type candidateEntry struct {
	ready   chan struct{}
	cands   *client.Candidates
	err     error
	limit   int
	fetched time.Time
	// refreshing: a newer answer is loading (c.mu guards it).
	refreshing bool
}

func (c *cachedCandidates) AllocationCandidates(ctx context.Context, q url.Values) (*client.Candidates, error) {
	limit, _ := strconv.Atoi(q.Get("limit"))
	if limit <= 0 {
		return c.inner.AllocationCandidates(ctx, q)
	}
	key := make(url.Values, len(q))
	for k, v := range q {
		if k != "limit" {
			key[k] = v
		}
	}
	k := key.Encode()
	c.mu.Lock()
	e := c.byKey[k]
	if e != nil {
		select {
		case <-e.ready:
			switch {
			case e.err != nil || e.limit < limit:
				e = nil
			case time.Since(e.fetched) > candidateCacheTTL && !e.refreshing:
				// Serve this answer while a fresh one loads.
				e.refreshing = true
				go c.load(context.WithoutCancel(ctx), k, key, e.limit)
			}
		default: // loading: wait for it
		}
	}
	if e == nil {
		e = c.start(k, max(limit, candidateCacheLimit))
		c.mu.Unlock()
		c.fill(ctx, e, key)
		return sample(e.cands, limit), e.err
	}
	c.mu.Unlock()
	select {
	case <-e.ready:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return sample(e.cands, limit), e.err
}

// start records a new entry for key k, loading (c.mu held).
func (c *cachedCandidates) start(k string, limit int) *candidateEntry {
	e := &candidateEntry{ready: make(chan struct{}), limit: limit}
	c.byKey[k] = e
	return e
}

// fill loads e's answer to query key (with e's limit).
func (c *cachedCandidates) fill(ctx context.Context, e *candidateEntry, key url.Values) {
	q := make(url.Values, len(key)+1)
	for k, v := range key {
		q[k] = v
	}
	q.Set("limit", strconv.Itoa(e.limit))
	e.cands, e.err = c.inner.AllocationCandidates(ctx, q)
	e.fetched = time.Now()
	close(e.ready)
}

// load refreshes the answer for key k in the background: the new entry
// replaces the old one once loaded (a failed load is dropped: the old
// answer stays until forget).
func (c *cachedCandidates) load(ctx context.Context, k string, key url.Values, limit int) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	e := &candidateEntry{ready: make(chan struct{}), limit: limit}
	c.fill(ctx, e, key)
	c.mu.Lock()
	defer c.mu.Unlock()
	if old := c.byKey[k]; old != nil && old.refreshing && e.err == nil {
		c.byKey[k] = e
	} else if old != nil {
		old.refreshing = false
	}
}

// sample is a uniformly random choice of limit of cands' allocation
// requests (all of them when there are no more), as a limited query of
// randomized Placement would answer: the scheduler then filters only
// those against the database.
func sample(cands *client.Candidates, limit int) *client.Candidates {
	if cands == nil || len(cands.AllocationRequests) <= limit {
		return cands
	}
	ars := slices.Clone(cands.AllocationRequests)
	for i := range limit {
		j := i + rand.IntN(len(ars)-i)
		ars[i], ars[j] = ars[j], ars[i]
	}
	return &client.Candidates{AllocationRequests: ars[:limit], ProviderSummaries: cands.ProviderSummaries}
}

// forget drops every cached answer.
func (c *cachedCandidates) forget() {
	c.mu.Lock()
	clear(c.byKey)
	c.mu.Unlock()
}

// selectDestinations is sched.SelectDestinations; in mode local, when the
// cached candidates leave too few nodes, it drops them and asks again.
func (p *Placement) selectDestinations(ctx context.Context, local bool, spec scheduler.RequestSpec, n int) ([][]scheduler.Selection, error) {
	sched := p.schedulerFor(local)
	sels, err := sched.SelectDestinations(ctx, spec, n)
	if local && errors.Is(err, scheduler.ErrNoValidHost) {
		p.localCands.forget()
		sels, err = sched.SelectDestinations(ctx, spec, n)
	}
	return sels, err
}

// selectBatch is selectDestinations for ClaimBatch: in mode local without
// the database filter, which the batch's own lock of each row's first free
// fitting node (PickFirstFree) does under lock.
func (p *Placement) selectBatch(ctx context.Context, local bool, spec scheduler.RequestSpec, n int) ([][]scheduler.Selection, error) {
	if !local {
		return p.selectDestinations(ctx, false, spec, n)
	}
	sels, err := p.localBatchSched.SelectDestinations(ctx, spec, n)
	if errors.Is(err, scheduler.ErrNoValidHost) {
		p.localCands.forget()
		sels, err = p.localBatchSched.SelectDestinations(ctx, spec, n)
	}
	return sels, err
}
