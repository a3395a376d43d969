package conductor

import (
	"context"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"go.uber.org/zap"

	"github.com/metalloc/metalloc/db"
	"github.com/metalloc/metalloc/lease"
)

// A leased node that fails before the start (in maintenance, or deleted
// under the lease) is replaced by another that fits the same reservation
// and domain, else the lease is flagged (lease.Repair, docs/leases.md).
// The conductors check:
//   - every leaseRepairPoll, the pending leases LeasesToRepair finds: a node
//     in maintenance at any time before the start (replaced at once: the
//     pick is made while the pool has room), a row missing or a flag set
//     from leaseRepairAhead before the start (a flagged lease is retried
//     until the start, in case a node came free or back);
//   - at the start, in the start's transaction, before the compare-and-set
//     (moveLease): whatever happened since, the lease starts on the nodes
//     it has then.
//
// A node the backend refuses at the start is replaced after it, in the
// active lease (leases_refused.go).
//
// Each check is one transaction under the lease's row lock; however many
// conductors check one lease, the second finds nothing left to do.
const (
	// leaseRepairPoll is how often each conductor looks for leases to check.
	leaseRepairPoll = time.Second
	// leaseRepairAhead is how long before its start a lease short of a
	// row, or flagged, is checked every leaseRepairPoll.
	leaseRepairAhead = time.Hour
)

// Lease event kinds of the replacement (migration 00053): lease.node_replaced
// (last_error: lease.Replacement's words) and lease.degraded (last_error:
// the lease's degraded_reason), sent when the flag is set or reworded.
const (
	EventLeaseNodeReplaced = "lease.node_replaced"
	EventLeaseDegraded     = "lease.degraded"
)

// runLeaseRepairs checks the leases LeasesToRepair finds every
// leaseRepairPoll until ctx ends; with a backend, also the leases whose
// nodes it refused at the start (refusedRound, leases_refused.go).
func (c *Service) runLeaseRepairs(ctx context.Context) {
	var wg sync.WaitGroup
	if c.leaseViaBackend() {
		wg.Add(1)
		go func() { defer wg.Done(); pollBatches(ctx, leaseRepairPoll, c.refusedRound) }()
	}
	pollBatches(ctx, leaseRepairPoll, c.repairRound)
	wg.Wait()
}

// pollBatches runs round every period until ctx ends, and again at once
// while a round takes a full leaseBatch.
func pollBatches(ctx context.Context, period time.Duration, round func(context.Context) int) {
	t := time.NewTicker(period)
	defer t.Stop()
	for {
		for round(ctx) == leaseBatch && ctx.Err() == nil {
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// repairRound checks one batch of leases, each in its own transaction; it
// returns how many were found. Batches are pages (c.repairAfter: the last
// lease checked): a lease flagged and not repairable is found again at
// every round, and without the pages four of them would make pollBatches
// check the same four without a pause and never reach a fifth. A short
// page starts the next round from the beginning.
func (c *Service) repairRound(ctx context.Context) int {
	rows, err := c.q.LeasesToRepair(ctx, LeasesToRepairParams{AheadSeconds: leaseRepairAhead.Seconds(),
		AfterStart: c.repairAfter.start, AfterID: c.repairAfter.id, Batch: leaseBatch})
	if err != nil {
		if ctx.Err() == nil {
			c.log.Warn("could not read the leases to check", zap.Error(err))
		}
		c.repairAfter.start, c.repairAfter.id = time.Time{}, 0
		return 0
	}
	if len(rows) < leaseBatch {
		c.repairAfter.start, c.repairAfter.id = time.Time{}, 0
	} else {
		last := rows[len(rows)-1]
		c.repairAfter.start, c.repairAfter.id = last.StartTime, last.ID
	}
	for _, r := range rows {
		if err := c.checkLease(ctx, r.ID); err != nil && ctx.Err() == nil {
			c.log.Warn("could not check the nodes of a lease; the next poll retries",
				zap.Stringer("lease", r.Uuid), zap.Error(err))
		}
	}
	return len(rows)
}

// checkLease checks pending lease id's nodes in a transaction of its own
// (repairLease) and counts the nodes replaced once it commits.
func (c *Service) checkLease(ctx context.Context, id int64) error {
	var replaced int
	err := db.InTx(ctx, c.pool, func(tx pgx.Tx) (err error) {
		replaced, err = c.repairLease(ctx, tx, id)
		return err
	})
	if err == nil {
		c.Metrics.leaseMoved(MoveReplace, replaced)
	}
	return err
}

// repairLease checks pending lease id's nodes in tx (lease.Repair) and
// writes an event per node replaced and one when the lease is flagged; it
// returns how many nodes it replaced. A lease that is not pending is left
// alone.
func (c *Service) repairLease(ctx context.Context, tx pgx.Tx, id int64) (int, error) {
	res, ok, err := lease.Repair(ctx, tx, id)
	if err != nil || !ok {
		return 0, err
	}
	return len(res.Replaced), c.repairEvents(ctx, c.q.WithTx(tx), res)
}

// repairEvents writes, in q's transaction, the events of what a check of
// a lease's nodes did (lease.Repair, lease.ReplaceRefused): one per node
// replaced and one when the lease is flagged.
func (c *Service) repairEvents(ctx context.Context, q *Queries, res lease.RepairResult) error {
	l := res.Lease
	for _, r := range res.Replaced {
		words := r.String()
		if err := c.leaseEvent(ctx, q, EventLeaseNodeReplaced, l.Uuid, l.Name, l.State, res.ResourceClass, l.ProjectID, &words); err != nil {
			return err
		}
		c.log.Info("leased node replaced", zap.Stringer("lease", l.Uuid), zap.String("project", l.ProjectID),
			zap.Int("reservation", r.Reservation), zap.String("old", r.Old), zap.String("why", r.Why),
			zap.String("new", r.New), zap.Time("start_time", l.StartTime))
	}
	switch {
	case res.Changed && l.DegradedReason != nil:
		if err := c.leaseEvent(ctx, q, EventLeaseDegraded, l.Uuid, l.Name, l.State, res.ResourceClass, l.ProjectID, l.DegradedReason); err != nil {
			return err
		}
		c.log.Warn("lease degraded: failed nodes not replaced", zap.Stringer("lease", l.Uuid),
			zap.String("project", l.ProjectID), zap.String("reason", *l.DegradedReason), zap.Time("start_time", l.StartTime))
	case res.Changed:
		c.log.Info("lease whole again", zap.Stringer("lease", l.Uuid), zap.String("project", l.ProjectID))
	}
	return nil
}
