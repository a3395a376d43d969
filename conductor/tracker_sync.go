package conductor

import (
	"context"
	"fmt"
	"sync"

	"github.com/google/uuid"
	"go.uber.org/zap"

	"github.com/metalloc/metalloc/conductor/backend"
	"github.com/metalloc/metalloc/placement/client"
)

// The tracker's passes: what each reads and how it writes.
//
//   - Full (Sync): every node, in pages of trackerPage by id, then the
//     change log; also releases leaked claims and deletes the providers
//     of every deleted node. At start, and once more at the first
//     periodic pass after it (a change whose transaction overlapped the
//     tracker's registration may have logged nothing).
//   - Changes (SyncChanges): the nodes of the change log
//     (placement_node_changes, written by the nodes' triggers while a
//     tracker is registered), trackerPage entries at a time, until it is
//     empty; deleted nodes' providers are deleted. Run makes one a
//     SyncDelay after every node change notification: a node made
//     available is mirrored a moment after its commit, whatever the
//     fleet's size.
//   - Periodic: a changes pass that also releases leaked claims and
//     retries the nodes an earlier pass could not mirror.
//
// Writes: with Placement on this database (placement_backend.mode local,
// or auto finding it so) the providers are written in-process, trackerChunk
// nodes per transaction (placement.MirrorRead, MirrorApply, together with
// their placement_synced rows); otherwise through the Placement API,
// Concurrency nodes at a time, up to five requests each (syncNode).

// trackerPage is how many nodes (or log entries) a pass reads at a time;
// trackerChunk how many providers one in-process transaction writes.
const (
	trackerPage  = 5000
	trackerChunk = 500
)

// passKind is which pass Run makes.
type passKind int

const (
	passChanges passKind = iota
	passPeriodic
	passFull
)

// SyncChanges makes a changes pass: it mirrors the nodes the change log
// names and deletes the entries it read, under the sync lock (Skipped
// when another conductor holds it), as Sync.
func (t *Tracker) SyncChanges(ctx context.Context) (SyncStats, error) {
	return t.locked(ctx, func(ctx context.Context, st *SyncStats) error { return t.syncChanges(ctx, st, false) })
}

// syncAll is Sync's pass.
func (t *Tracker) syncAll(ctx context.Context, st *SyncStats) error {
	if err := t.releaseLeakedClaims(ctx, st); err != nil {
		return err
	}
	orphans, err := t.q.OrphanPlacementSynced(ctx)
	if err != nil {
		return fmt.Errorf("placement sync: reading deleted nodes: %w", err)
	}
	// The pages below cover every node, the scan above every orphan.
	t.mu.Lock()
	clear(t.failed)
	clear(t.orphans)
	t.mu.Unlock()
	if err := t.deleteOrphans(ctx, st, orphans); err != nil {
		return err
	}
	var after int64
	for {
		page, err := t.q.TrackerNodesPage(ctx, TrackerNodesPageParams{After: after, Lim: trackerPage})
		if err != nil {
			return fmt.Errorf("placement sync: reading nodes: %w", err)
		}
		if len(page) == 0 {
			break
		}
		if err := t.mirror(ctx, st, page); err != nil {
			return err
		}
		after = page[len(page)-1].ID
		if len(page) < trackerPage {
			break
		}
	}
	// What changed while the pages were read (and what they covered).
	return t.syncChanges(ctx, st, false)
}

// syncChanges drains the change log; retry also mirrors the nodes earlier
// passes could not.
func (t *Tracker) syncChanges(ctx context.Context, st *SyncStats, retry bool) error {
	var again []int64
	if retry {
		t.mu.Lock()
		for id := range t.failed {
			again = append(again, id)
		}
		clear(t.failed)
		orphans := make([]uuid.UUID, 0, len(t.orphans))
		for id := range t.orphans {
			orphans = append(orphans, id)
		}
		clear(t.orphans)
		t.mu.Unlock()
		if err := t.deleteOrphans(ctx, st, orphans); err != nil {
			return err
		}
	}
	for {
		entries, err := t.q.NodeChanges(ctx, trackerPage)
		if err != nil {
			return fmt.Errorf("placement sync: reading the node change log: %w", err)
		}
		if len(entries) == 0 && len(again) == 0 {
			return nil
		}
		seen := make(map[int64]bool, len(entries)+len(again))
		ids := make([]int64, 0, len(entries)+len(again))
		seqs := make([]int64, len(entries))
		uuidOf := make(map[int64]uuid.UUID, len(entries))
		for _, id := range again {
			if !seen[id] {
				seen[id] = true
				ids = append(ids, id)
			}
		}
		again = nil
		for i, e := range entries {
			seqs[i] = e.Seq
			uuidOf[e.NodeID] = e.NodeUuid
			if !seen[e.NodeID] {
				seen[e.NodeID] = true
				ids = append(ids, e.NodeID)
			}
		}
		nodes, err := t.q.TrackerNodesByID(ctx, ids)
		if err != nil {
			return fmt.Errorf("placement sync: reading changed nodes: %w", err)
		}
		// Nodes in the log that are gone: their providers go.
		present := make(map[int64]bool, len(nodes))
		for _, n := range nodes {
			present[n.ID] = true
		}
		var gone []uuid.UUID
		for id, u := range uuidOf {
			if !present[id] {
				gone = append(gone, u)
			}
		}
		if len(gone) > 0 {
			synced, err := t.q.SyncedOf(ctx, gone)
			if err != nil {
				return fmt.Errorf("placement sync: reading deleted nodes: %w", err)
			}
			if err := t.deleteOrphans(ctx, st, synced); err != nil {
				return err
			}
		}
		if err := t.mirror(ctx, st, nodes); err != nil {
			return err
		}
		if len(seqs) > 0 {
			if err := t.q.DeleteNodeChanges(ctx, seqs); err != nil {
				return fmt.Errorf("placement sync: deleting read node change log entries: %w", err)
			}
		}
		if len(entries) < trackerPage {
			return nil
		}
	}
}

// mirrorJob is a node whose provider must be written, with the
// fingerprint to record once it is.
type mirrorJob struct {
	n  TrackerNode
	fp string
}

// mirror writes the providers of the nodes whose desired state changed
// since it was last written (fingerprint), in-process or through the API.
// Nodes that could not be mirrored are counted in st.Failed and kept for
// the next periodic pass; an error stops the pass (Placement or the
// database unreachable).
func (t *Tracker) mirror(ctx context.Context, st *SyncStats, nodes []TrackerNode) error {
	var jobs []mirrorJob
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
		jobs = append(jobs, mirrorJob{n, fp})
	}
	if len(jobs) == 0 {
		return nil
	}
	if t.local(ctx) {
		return t.mirrorLocal(ctx, st, jobs)
	}
	return t.mirrorHTTP(ctx, st, jobs)
}

// local reports whether providers are written in-process: mode local, or
// mode auto with Placement on this database (asked once, and again after
// a failed probe).
func (t *Tracker) local(ctx context.Context) bool {
	switch t.cfg.Mode {
	case backend.PlacementModeLocal:
		return true
	case backend.PlacementModeHTTP:
		return false
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.isLocal != nil {
		return *t.isLocal
	}
	local, err := backend.PlacementIsLocal(ctx, t.pool, t.pc)
	if err != nil {
		t.log.Debug("cannot tell whether Placement shares this database; mirroring through its API", zap.Error(err))
		return false
	}
	t.isLocal = &local
	if local {
		t.log.Info("Placement is metalloc-placement on this database; mirroring nodes in-process")
	}
	return local
}

// noteFailed records node id for the next periodic pass.
func (t *Tracker) noteFailed(id int64) {
	t.mu.Lock()
	t.failed[id] = true
	t.mu.Unlock()
}

// mirrorHTTP writes the jobs' providers through the Placement API,
// Concurrency at a time (the first unreachable answer stops the pass: the
// rest would only wait for their timeouts).
func (t *Tracker) mirrorHTTP(ctx context.Context, st *SyncStats, jobs []mirrorJob) error {
	wctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var mu sync.Mutex
	var firstErr error
	failed := 0
	forEach(wctx, t.cfg.Concurrency, jobs, func(ctx context.Context, j mirrorJob) {
		created, err := t.syncNode(ctx, j.n)
		if err == nil {
			err = t.q.UpsertPlacementSynced(ctx, UpsertPlacementSyncedParams{NodeUuid: j.n.Uuid, Fingerprint: j.fp})
		}
		mu.Lock()
		defer mu.Unlock()
		switch {
		case err != nil:
			st.Failed++
			failed++
			t.noteFailed(j.n.ID)
			if firstErr == nil {
				firstErr = err
			}
			if client.IsUnreachable(err) {
				cancel(err)
			} else if ctx.Err() == nil {
				t.log.Warn("cannot mirror node in Placement; retrying on the next periodic sync",
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
		return fmt.Errorf("placement sync: %d of %d changed nodes not mirrored; first: %w", failed, len(jobs), firstErr)
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
// marks their providers stale so that reserved is recomputed. (A claim in
// this database's metalloc-placement is released by the deallocation
// itself, metalloc_placement_release; these are the others.)
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
// and its placement_claims row, and marks provider stale (the next
// periodic pass writes it again).
func (t *Tracker) releaseClaim(ctx context.Context, consumer, provider uuid.UUID) error {
	if err := t.pc.DeleteAllocations(ctx, consumer); err != nil && !client.IsNotFound(err) {
		return err
	}
	if err := t.q.DeletePlacementClaim(ctx, DeletePlacementClaimParams{ConsumerUuid: consumer, ProviderUuid: provider}); err != nil {
		return err
	}
	if err := t.q.MarkPlacementStale(ctx, provider); err != nil {
		return err
	}
	if id, err := t.q.NodeIDOf(ctx, provider); err == nil {
		t.noteFailed(id)
	}
	return nil
}

// deleteOrphans deletes the providers ids of deleted nodes. One that
// still has allocations (409) first loses those of the consumers
// placement_claims lists for it; if it still cannot go, it stays until a
// later pass.
func (t *Tracker) deleteOrphans(ctx context.Context, st *SyncStats, ids []uuid.UUID) error {
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
			t.log.Warn("cannot delete the provider of a deleted node; retrying on the next periodic sync",
				zap.Stringer("provider", id), zap.Error(err))
			t.mu.Lock()
			t.orphans[id] = true
			t.mu.Unlock()
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
