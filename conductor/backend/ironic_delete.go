package backend

import (
	"context"
	"sync"
	"time"

	"github.com/google/uuid"
	"go.uber.org/zap"

	"github.com/metalloc/metalloc/db"
	"github.com/metalloc/metalloc/ironic"
)

// IronicNotifyChannel is the channel the journal's trigger signals when an
// allocation deleted in metalloc is to be deleted in Ironic
// (ironic_allocations_forget).
const IronicNotifyChannel = "metalloc_ironic"

// deleteBatch is how many deletions one round of Run takes.
const deleteBatch = 32

// Run deletes in Ironic the copies of allocations deleted in metalloc (the
// journal's deleting rows, whoever deleted them: the API, a group's
// deletion, the mirror's reconciliation), until ctx ends. Every conductor
// runs it; a row is leased to one for a round (IronicDeletions). A copy
// Ironic no longer has (404) counts as deleted. One Ironic refuses to
// delete (409: its node is active or moving, outside maintenance) is tried
// again later, backing off up to five minutes; so is one while Ironic is
// unreachable. Deleted rows stay as tombstones for TombstoneKeep
// (Reconcile deletes a copy a late request created after all), then go.
func (b *Ironic) Run(ctx context.Context) {
	b.Metrics.limited(b.limit.State()) // the limit's gauges before the first allocation
	wake := make(chan struct{}, 1)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		db.Listen(ctx, b.pool, IronicNotifyChannel, b.log, func() {
			select {
			case wake <- struct{}{}:
			default:
			}
		}, func() {})
	}()
	defer wg.Wait()
	lastPrune := time.Time{}
	for ctx.Err() == nil {
		if time.Since(lastPrune) > time.Minute {
			if n, err := b.q.PruneIronicTombstones(ctx, b.cfg.TombstoneKeep.Seconds()); err == nil {
				lastPrune = time.Now()
				if n > 0 {
					b.log.Debug("removed tombstones of allocations deleted in Ironic", zap.Int64("rows", n))
				}
			}
		}
		n, err := b.deleteRound(ctx)
		if err != nil && ctx.Err() == nil {
			b.log.Warn("deleting allocations in Ironic", zap.Error(err))
		}
		if n == deleteBatch && err == nil {
			continue
		}
		wait := 5 * time.Second
		if due, err := b.q.IronicNextDeletion(ctx); err == nil {
			wait = min(max(time.Until(due), 10*time.Millisecond), wait)
		}
		select {
		case <-ctx.Done():
		case <-wake:
		case <-time.After(wait):
		}
	}
}

// deleteRound deletes up to deleteBatch due copies in Ironic, at once
// (within the in-flight cap), and returns how many it took.
func (b *Ironic) deleteRound(ctx context.Context) (int, error) {
	if !b.up(ctx) {
		return 0, nil
	}
	rows, err := b.q.IronicDeletions(ctx, IronicDeletionsParams{LeaseSeconds: 2 * b.client.Timeout().Seconds(), Batch: deleteBatch})
	if err != nil {
		return 0, err
	}
	var wg sync.WaitGroup
	for _, r := range rows {
		wg.Add(1)
		go func() {
			defer wg.Done()
			b.deleteOne(ctx, r.Uuid, r.UpdatedAt)
		}()
	}
	wg.Wait()
	return len(rows), nil
}

// deleteOne deletes allocation u in Ironic and records the outcome; since
// is when metalloc's allocation went (the back-off grows with it).
func (b *Ironic) deleteOne(ctx context.Context, u uuid.UUID, since time.Time) {
	err := b.request(ctx, "delete", func() error { return b.client.DeleteAllocation(ctx, u.String()) })
	if err == nil || ironic.IsNotFound(err) {
		if _, err := b.q.IronicDeleted(ctx, u); err != nil && ctx.Err() == nil {
			b.log.Warn("recording an allocation deleted in Ironic", zap.Stringer("allocation", u), zap.Error(err))
		}
		return
	}
	if ctx.Err() != nil {
		return
	}
	after := min(max(2*time.Since(since), 2*time.Second), 5*time.Minute)
	if ironic.IsUnavailable(err) {
		_ = b.trouble(err)
		after = 5 * time.Second
	} else {
		b.log.Warn("Ironic refuses to delete an allocation deleted in metalloc; trying again later",
			zap.Stringer("allocation", u), zap.Duration("after", after), zap.Error(err))
	}
	if err := b.q.IronicDeleteLater(ctx, IronicDeleteLaterParams{Error: message(err), AfterSeconds: after.Seconds(), Uuid: u}); err != nil && ctx.Err() == nil {
		b.log.Warn("recording a deletion to retry", zap.Stringer("allocation", u), zap.Error(err))
	}
}

// Reconcile applies a complete listing of Ironic's allocations (allocs,
// read from at on: the full sync's) to metalloc's: a copy Ironic still
// has of an allocation metalloc deleted is deleted again (a tombstone
// revived), and an allocation settled in both (active or in error) that
// Ironic no longer lists is deleted in metalloc too (it was deleted
// directly in Ironic). The node mirror reconciles active allocations node
// by node already (metalloc_ironic_reconcile_nodes); this catches the
// rest. It is ironic.Syncer's Reconcile.
func (b *Ironic) Reconcile(ctx context.Context, allocs []ironic.Allocation, at time.Time) error {
	listed := make([]uuid.UUID, 0, len(allocs))
	for _, a := range allocs {
		if u, err := uuid.Parse(a.UUID); err == nil {
			listed = append(listed, u)
		}
	}
	var r ReconcileIronicAllocationsRow
	err := db.Retry(ctx, func() error {
		var err error
		r, err = b.q.ReconcileIronicAllocations(ctx, ReconcileIronicAllocationsParams{Listed: listed, At: at})
		return err
	})
	if err != nil {
		return err
	}
	if r.Revived+r.Forgotten > 0 {
		b.log.Info("reconciled allocations with Ironic's", zap.Int32("copies_to_delete_again", r.Revived),
			zap.Int32("deleted_in_ironic_deleted_here", r.Forgotten))
	}
	return nil
}
