package conductor

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"go.uber.org/zap"

	"github.com/metalloc/metalloc/placement"
	"github.com/metalloc/metalloc/placement/client"
)

// mirrorLocal writes the jobs' providers in-process, trackerChunk per
// transaction with their placement_synced rows. A chunk whose transaction
// fails is written again one node per transaction, so that one node's
// problem (its name taken by another provider, an inventory in use) does
// not hold the others back.
func (t *Tracker) mirrorLocal(ctx context.Context, st *SyncStats, jobs []mirrorJob) error {
	for len(jobs) > 0 {
		chunk := jobs[:min(trackerChunk, len(jobs))]
		jobs = jobs[len(chunk):]
		var cs SyncStats
		err := pgx.BeginFunc(ctx, t.pool, func(tx pgx.Tx) error {
			cs = SyncStats{}
			return t.mirrorChunk(ctx, tx, &cs, chunk)
		})
		if err == nil {
			addStats(st, cs)
			continue
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		t.log.Debug("in-process mirror of a chunk failed; writing its nodes one by one", zap.Error(err))
		for _, j := range chunk {
			err := pgx.BeginFunc(ctx, t.pool, func(tx pgx.Tx) error {
				cs = SyncStats{}
				return t.mirrorChunk(ctx, tx, &cs, []mirrorJob{j})
			})
			if err != nil {
				if ctx.Err() != nil {
					return ctx.Err()
				}
				st.Failed++
				t.noteFailed(j.n.ID)
				t.log.Warn("cannot mirror node in Placement; retrying on the next periodic sync",
					zap.Stringer("node", j.n.Uuid), zap.String("name", j.n.Name), zap.Error(err))
				continue
			}
			addStats(st, cs)
		}
	}
	return nil
}

func addStats(st *SyncStats, d SyncStats) {
	st.Created += d.Created
	st.Updated += d.Updated
	st.Unchanged += d.Unchanged
	st.Failed += d.Failed
}

// mirrorChunk writes the providers of jobs in tx and records the
// fingerprints of those written or found as wanted.
func (t *Tracker) mirrorChunk(ctx context.Context, tx pgx.Tx, st *SyncStats, jobs []mirrorJob) error {
	uuids := make([]uuid.UUID, len(jobs))
	for i, j := range jobs {
		uuids[i] = j.n.Uuid
	}
	cur, err := placement.MirrorRead(ctx, tx, uuids)
	if err != nil {
		return err
	}
	ws := make([]placement.MirrorWrite, len(jobs))
	for i, j := range jobs {
		rc := ""
		if strings.TrimSpace(j.n.ResourceClass) != "" {
			rc = client.NormalizeClass(j.n.ResourceClass)
		}
		p := cur[j.n.Uuid]
		ws[i] = placement.MirrorWrite{UUID: j.n.Uuid, Name: j.n.Name,
			Inventories: t.desiredInventories(j.n, rc, p.Inventories, p.Usage), Traits: j.n.Traits}
	}
	res, err := placement.MirrorApply(ctx, tx, cur, ws)
	if err != nil {
		return err
	}
	for _, name := range res.UnknownTraits {
		if _, loaded := t.traits.LoadOrStore(name, false); !loaded {
			t.log.Warn("node trait not accepted by Placement; not mirrored (neither CUSTOM_* nor a standard trait)",
				zap.String("trait", name))
		}
	}
	var done []uuid.UUID
	var fps []string
	for _, j := range jobs {
		if _, bad := res.Failed[j.n.Uuid]; bad || slices.Contains(res.Busy, j.n.Uuid) {
			continue
		}
		done, fps = append(done, j.n.Uuid), append(fps, j.fp)
	}
	for u, err := range res.Failed {
		st.Failed++
		if id := idOf(jobs, u); id != 0 {
			t.noteFailed(id)
		}
		t.log.Warn("cannot mirror node in Placement; retrying on the next periodic sync", zap.Stringer("node", u), zap.Error(err))
	}
	if len(res.Busy) > 0 {
		// Another transaction holds these providers right now: back into
		// the log, for the pass this wakes.
		ids := make([]int64, len(res.Busy))
		for i, u := range res.Busy {
			ids[i] = idOf(jobs, u)
		}
		if err := New(tx).RelogNodes(ctx, RelogNodesParams{Ids: ids, Uuids: res.Busy}); err != nil {
			return fmt.Errorf("logging busy providers again: %w", err)
		}
	}
	st.Created += len(res.Created)
	st.Updated += len(res.Changed) + len(res.Unchanged)
	if len(done) == 0 {
		return nil
	}
	if err := New(tx).UpsertPlacementSyncedMany(ctx, UpsertPlacementSyncedManyParams{NodeUuids: done, Fingerprints: fps}); err != nil {
		return fmt.Errorf("recording mirrored nodes: %w", err)
	}
	return nil
}

func idOf(jobs []mirrorJob, u uuid.UUID) int64 {
	for _, j := range jobs {
		if j.n.Uuid == u {
			return j.n.ID
		}
	}
	return 0
}
