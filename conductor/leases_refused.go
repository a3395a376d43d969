package conductor

import (
	"context"
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"go.uber.org/zap"

	"github.com/metalloc/metalloc/db"
	"github.com/metalloc/metalloc/lease"
)

// A node the backend refuses at a lease's start ends the allocation the
// start made for it in error: in front of Ironic, Ironic refused the node
// (in maintenance there, not available, taken there directly); with the
// placement backend, another consumer has it. Such a node is replaced as
// one that fails before the start is (leases_replace.go): by another that
// fits the same reservation and domain, free over the lease's window and
// free now, which gets the allocation instead; when none is, the lease is
// flagged (lease.ReplaceRefused). Every leaseRepairPoll each conductor
// with a backend looks for active leases with a refused allocation
// (LeasesWithRefusedNodes: index allocations_lease_error_idx) and makes,
// for each, three steps, each idempotent and read from the database, so
// that a conductor that dies between two leaves the rest to the next poll
// of any conductor:
//
//  1. one transaction under the lease's row lock: the refused nodes
//     swapped for their replacements in lease_nodes (lease.ReplaceRefused:
//     the exclusion constraint keeps its guarantee), each refused
//     allocation marked with its replacement (extra lease_replaced_by, a
//     node uuid; conductor/query.sql),
//     the events lease.node_replaced and lease.degraded;
//  2. in front of Ironic, each replacement lent to the project in Ironic
//     (Ironic gives an allocation owned by a project only nodes that
//     project owns or leases) and the refused node's lessee removed there;
//  3. one transaction under the lease's row lock: for each marked
//     allocation, the replacement's lessee set and its allocation inserted
//     (allocating, that node its only candidate, as the start does) while
//     the lease books it and it is free, and the refused allocation
//     deleted (the journal deletes Ironic's copy, if any).
//
// The backend then makes the new allocation as any other; one it refuses
// again is replaced again, while nodes fit. An unmarked refusal is looked
// at for leaseRepairAhead after the start (a flagged lease is retried
// until then: a node may come free), a marked one until step 3 is made.
// The refused allocations left (not replaced) are deleted by the end.
const (
	// leaseRefusedBatch is how many leases a round looks at; all of them
	// at each poll (a flagged lease comes back every poll until its
	// window passes, so a full round is not followed by another).
	leaseRefusedBatch = 64
)

// refusedRound replaces the refused nodes of the leases
// LeasesWithRefusedNodes finds, each lease in turn; it returns 0 (see
// leaseRefusedBatch).
func (c *Service) refusedRound(ctx context.Context) int {
	rows, err := c.q.LeasesWithRefusedNodes(ctx, LeasesWithRefusedNodesParams{
		WindowSeconds: leaseRepairAhead.Seconds(), Batch: leaseRefusedBatch,
	})
	if err != nil {
		if ctx.Err() == nil {
			c.log.Warn("could not read the leases with refused nodes", zap.Error(err))
		}
		return 0
	}
	for _, r := range rows {
		if err := c.replaceRefused(ctx, r.ID); err != nil && ctx.Err() == nil {
			c.log.Warn("could not replace the refused nodes of a lease; the next poll retries",
				zap.Stringer("lease", r.Uuid), zap.Error(err))
		}
	}
	return 0
}

// replaceRefused makes the three steps for active lease id.
func (c *Service) replaceRefused(ctx context.Context, id int64) error {
	why := "refused by Placement"
	if c.cfg.Ironic != nil {
		why = "refused by Ironic"
	}
	// Step 1.
	var replaced int
	err := db.InTx(ctx, c.pool, func(tx pgx.Tx) error {
		replaced = 0
		q := c.q.WithTx(tx)
		rows, err := q.RefusedLeaseAllocations(ctx, id)
		if err != nil {
			return err
		}
		var refused []lease.Refused
		for _, r := range rows {
			if r.ReplacedBy == "" {
				refused = append(refused, lease.Refused{NodeID: r.NodeID, Why: why})
			}
		}
		if len(refused) == 0 {
			return nil
		}
		res, ok, err := lease.ReplaceRefused(ctx, tx, id, refused)
		if err != nil || !ok {
			return err
		}
		for _, rp := range res.Replaced {
			for _, r := range rows {
				if r.NodeID == rp.OldNodeID && r.ReplacedBy == "" {
					if err := q.MarkLeaseAllocationReplaced(ctx, MarkLeaseAllocationReplacedParams{ID: r.ID, NodeUuid: rp.NewUUID}); err != nil {
						return err
					}
				}
			}
		}
		replaced = len(res.Replaced)
		return c.repairEvents(ctx, q, res)
	})
	if err != nil {
		return err
	}
	c.Metrics.leaseMoved(MoveReplace, replaced)

	// Step 2, on a read outside any transaction: step 3 reads again under
	// the lease's lock.
	rows, err := c.q.RefusedLeaseAllocations(ctx, id)
	if err != nil {
		return err
	}
	marked := 0
	for _, r := range rows {
		if r.ReplacedBy == "" {
			continue
		}
		marked++
		if c.cfg.Ironic == nil {
			continue
		}
		to, err := uuid.Parse(r.ReplacedBy)
		if err != nil {
			continue // not ours: step 3 leaves it
		}
		if err := c.setIronicLessee(ctx, to, r.ProjectID, ""); err != nil {
			return fmt.Errorf("lending the replacement %s of node %s to the project: %w", to, r.NodeUuid, err)
		}
		if err := c.setIronicLessee(ctx, r.NodeUuid, "", r.ProjectID); err != nil {
			return fmt.Errorf("removing the lessee of refused node %s: %w", r.NodeUuid, err)
		}
	}
	if marked == 0 {
		return nil
	}

	// Step 3.
	return db.InTx(ctx, c.pool, func(tx pgx.Tx) error {
		q := c.q.WithTx(tx)
		all, err := q.RefusedLeaseAllocations(ctx, id)
		if err != nil {
			return err
		}
		var rows []RefusedLeaseAllocationsRow // the marked ones
		for _, r := range all {
			if _, err := uuid.Parse(r.ReplacedBy); err == nil {
				rows = append(rows, r)
			}
		}
		if len(rows) == 0 {
			return nil
		}
		nodes, err := q.LeaseNodesForUpdate(ctx, id)
		if err != nil {
			return err
		}
		var ids, old []int64
		var classes []string
		var uuids []uuid.UUID
		for _, r := range rows {
			to := uuid.MustParse(r.ReplacedBy)
			for _, n := range nodes {
				if n.Uuid == to && n.Free {
					ids, classes, uuids = append(ids, n.ID), append(classes, n.ResourceClass), append(uuids, n.Uuid)
				}
			}
			old = append(old, r.NodeID)
		}
		l := rows[0]
		if err := q.ClearLeaseLessee(ctx, ClearLeaseLesseeParams{NodeIds: old, Project: l.ProjectID}); err != nil {
			return err
		}
		if err := q.SetLeaseLessee(ctx, SetLeaseLesseeParams{Project: l.ProjectID, NodeIds: ids}); err != nil {
			return err
		}
		if len(ids) > 0 {
			if _, err := q.InsertLeaseAllocationRequests(ctx, InsertLeaseAllocationRequestsParams{
				ResourceClasses: classes, LeaseUuid: l.LeaseUuid, Owner: l.ProjectID, NodeUuids: uuids,
			}); err != nil {
				return err
			}
		}
		for _, r := range rows {
			if err := q.DeallocateLease(ctx, r.ID); err != nil {
				return err
			}
			c.log.Info("refused node's allocation moved to its replacement", zap.Stringer("lease", l.LeaseUuid),
				zap.String("project", l.ProjectID), zap.Stringer("refused", r.NodeUuid), zap.String("replacement", r.ReplacedBy),
				zap.Stringer("allocation_deleted", r.Uuid))
		}
		if len(ids) < len(old) {
			c.log.Warn("a replacement of a refused node was not free any more; it gets no allocation",
				zap.Stringer("lease", l.LeaseUuid), zap.Int("replacements", len(old)), zap.Int("allocated", len(ids)))
		}
		return nil
	})
}
