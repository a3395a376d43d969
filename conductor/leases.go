package conductor

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"go.uber.org/zap"

	"github.com/metalloc/metalloc/db"
)

// Leases (package lease, docs/leases.md) are started and ended by the
// conductors: every leasePoll each conductor claims the leases whose next
// move is due by the database clock (ClaimDueLeases: conductor_affinity,
// FOR UPDATE SKIP LOCKED, taking over those of dead conductors) and makes
// each move in one transaction that begins with a compare-and-set on its
// state and affinity (StartLease, EndLease, NoticeLeaseEnding): however
// many conductors race, a move happens once, and a conductor that dies
// mid-move rolls it back for the next one.
const (
	// leasePoll bounds how late a lease starts or ends after its time (the
	// issue asks for 1 s): a poll finds it, the move takes milliseconds.
	leasePoll = 200 * time.Millisecond
	// leaseBatch is how many leases one claim takes; a full batch is
	// followed by another claim at once (100 leases starting together).
	// Small, so that the moves due together spread over the conductors
	// (each conductor makes its claimed moves one after the other: with
	// batches of 32, one conductor took a second's dozen moves alone and
	// ended the last of them 1.2 s late on a busy machine).
	leaseBatch = 4
)

// Lease event kinds on the allocation event log (migration 00050): the
// event's uuid is the lease's, its owner the lease's project.
const (
	EventLeaseStart  = "lease.start"
	EventLeaseEnd    = "lease.end"
	EventLeaseEnding = "lease.ending"
)

// runLeases moves due leases until ctx ends (and the moves it handed to
// goroutines, in front of Ironic, have returned).
func (c *Service) runLeases(ctx context.Context) {
	defer c.leaseMoves.wg.Wait()
	pollBatches(ctx, leasePoll, c.leaseRound)
}

// leaseRound claims the due leases and moves each; it returns how many
// were claimed, less those whose move in Ironic runs already.
func (c *Service) leaseRound(ctx context.Context) int {
	rows, err := c.q.ClaimDueLeases(ctx, ClaimDueLeasesParams{
		Me: c.id, NoticeSeconds: c.cfg.LeaseEndingNotice.Seconds(), Batch: leaseBatch,
	})
	if err != nil {
		if ctx.Err() == nil {
			c.log.Warn("could not claim due leases", zap.Error(err))
		}
		return 0
	}
	n := len(rows)
	// Ends first: they free the nodes of the starts due at the same second
	// (back-to-back leases, leases_handover.go).
	slices.SortStableFunc(rows, func(a, b ClaimDueLeasesRow) int {
		return cmp.Compare(a.State, b.State) // "active" < "pending"
	})
	for _, r := range rows {
		if r.TakenOver {
			c.log.Info("lease taken over from a dead conductor", zap.Stringer("lease", r.Uuid))
		}
		if handled, started := c.leaseInIronic(ctx, r.ID, r.State); handled {
			if !started {
				n--
			}
			continue // leases_backend.go
		}
		if err := c.moveLease(ctx, r.ID, r.State); err != nil && ctx.Err() == nil {
			c.log.Warn("could not move lease; the next poll retries", zap.Stringer("lease", r.Uuid),
				zap.String("state", r.State), zap.Error(err))
		}
	}
	return n
}

// moveLease makes the due move of lease id, claimed in state: start a
// pending lease, end an active one whose end_time has come, else send
// lease.ending. Each is one transaction; losing the compare-and-set (the
// lease was cancelled, deleted, moved by another conductor, its end_time
// changed) changes nothing and is no error.
func (c *Service) moveLease(ctx context.Context, id int64, state string) error {
	// What the transaction did, recorded in the metrics once it commits.
	var move string
	var late float64
	var replaced int
	err := db.InTx(ctx, c.pool, func(tx pgx.Tx) error {
		move, late, replaced = "", 0, 0
		q := c.q.WithTx(tx)
		var err error
		switch state {
		case "pending":
			// Failed nodes are replaced first (leases_replace.go).
			if replaced, err = c.repairLease(ctx, tx, id); err == nil {
				move = MoveStart
				late, err = c.startLease(ctx, q, id)
			}
		case "active":
			move = MoveEnd
			late, err = c.endLease(ctx, q, id)
			if errors.Is(err, pgx.ErrNoRows) {
				move = MoveEnding
				err = c.noticeLeaseEnding(ctx, q, id)
			}
		}
		if errors.Is(err, pgx.ErrNoRows) {
			move = ""
			return nil
		}
		return err
	})
	if errors.Is(err, errAwaitEnd) {
		// Rolled back: the next poll starts it (leases_handover.go).
		c.log.Debug("lease start waits for the end of a lease on its nodes", zap.Int64("lease_id", id))
		return nil
	}
	if err == nil {
		c.Metrics.leaseMoved(MoveReplace, replaced)
		switch move {
		case MoveEnding:
			c.Metrics.leaseMoved(MoveEnding, 1)
		case MoveStart, MoveEnd:
			c.Metrics.leaseLateness(move, late)
		}
	}
	return err
}

// startLease: pending -> active, then on_start: allocate makes one active
// allocation owned by the project on each booked node that is free (a node
// that is not, in maintenance or held, is named in status_reason: one
// repairLease could not replace just before); lessee sets the nodes'
// lessee to the project. With another backend than the database's
// (in front of Ironic, placement) the allocations are made through it
// (startLeaseViaBackend). It returns how late the start is (seconds, by
// the database clock). pgx.ErrNoRows: the compare-and-set was lost.
func (c *Service) startLease(ctx context.Context, q *Queries, id int64) (float64, error) {
	l, err := q.StartLease(ctx, StartLeaseParams{LeaseID: id, Me: c.id})
	if err != nil {
		return 0, err
	}
	if c.leaseStarting != nil {
		c.leaseStarting(ctx)
	}
	nodes, err := q.LeaseNodesForUpdate(ctx, id)
	if err != nil {
		return 0, err
	}
	var ids []int64
	var classes, skipped []string
	for _, n := range nodes {
		if l.OnStart == "lessee" || n.Free {
			ids = append(ids, n.ID)
			classes = append(classes, n.ResourceClass)
		} else {
			skipped = append(skipped, cmp.Or(n.Name, n.Uuid.String()))
		}
	}
	if len(skipped) > 0 {
		// Held by a lease whose end is due: wait for it (leases_handover.go).
		if err := c.awaitEnds(ctx, q, id); err != nil {
			return 0, err
		}
	}
	if c.leaseViaBackend() {
		err = c.startLeaseViaBackend(ctx, q, l, nodes, ids, classes)
	} else if l.OnStart == "lessee" {
		err = q.SetLeaseLessee(ctx, SetLeaseLesseeParams{Project: l.ProjectID, NodeIds: ids})
	} else if len(ids) > 0 {
		_, err = q.InsertLeaseAllocations(ctx, InsertLeaseAllocationsParams{
			ResourceClasses: classes, LeaseUuid: l.Uuid, Owner: l.ProjectID, Me: c.id, NodeIds: ids,
		})
	}
	if err != nil {
		return 0, fmt.Errorf("starting lease %s: %w", l.Uuid, err)
	}
	var reason *string
	if len(skipped) > 0 {
		s := fmt.Sprintf("%d of %d nodes were not free at the start and got no allocation: %s",
			len(skipped), len(nodes), strings.Join(skipped, ", "))
		reason = &s
		if err := q.SetLeaseStatus(ctx, SetLeaseStatusParams{LeaseID: id, Reason: reason}); err != nil {
			return 0, err
		}
	}
	if err := c.leaseEvent(ctx, q, EventLeaseStart, l.Uuid, l.Name, "active", l.ResourceClass, l.ProjectID, reason); err != nil {
		return 0, err
	}
	c.log.Info("lease started", zap.Stringer("lease", l.Uuid), zap.String("project", l.ProjectID),
		zap.String("on_start", l.OnStart), zap.Int("nodes", len(ids)), zap.Int("not_free", len(skipped)),
		zap.Time("start_time", l.StartTime), zap.Float64("late_seconds", l.Lateness))
	return l.Lateness, nil
}

// endLease: active -> ended once end_time has come; the project's
// allocations on the lease's nodes are deleted (metalloc_deallocate: the
// lease's own, and under on_start lessee those the project made), the
// lessee cleared, the lease_nodes released. The nodes are not undeployed
// here: with the database backend a deployed node simply stays so; in
// front of Ironic they were undeployed through Ironic before this
// transaction (endLeaseInIronic). It returns how late the end is (seconds,
// by the database clock). pgx.ErrNoRows: not due or the compare-and-set
// was lost.
func (c *Service) endLease(ctx context.Context, q *Queries, id int64) (float64, error) {
	l, err := q.EndLease(ctx, EndLeaseParams{LeaseID: id, Me: c.id})
	if err != nil {
		return 0, err
	}
	nodes, err := q.LeaseNodesForUpdate(ctx, id)
	if err != nil {
		return 0, err
	}
	ids := make([]int64, len(nodes))
	for i, n := range nodes {
		ids[i] = n.ID
	}
	allocs, err := q.LeaseProjectAllocations(ctx, LeaseProjectAllocationsParams{NodeIds: ids, Project: l.ProjectID})
	if err != nil {
		return 0, err
	}
	for _, a := range allocs {
		if err := q.DeallocateLease(ctx, a); err != nil {
			return 0, fmt.Errorf("ending lease %s: %w", l.Uuid, err)
		}
	}
	nodeless, err := c.endLeaseViaBackend(ctx, q, l.Uuid, l.ProjectID)
	if err != nil {
		return 0, fmt.Errorf("ending lease %s: %w", l.Uuid, err)
	}
	if err := q.ClearLeaseLessee(ctx, ClearLeaseLesseeParams{NodeIds: ids, Project: l.ProjectID}); err != nil {
		return 0, err
	}
	if err := c.leaseEvent(ctx, q, EventLeaseEnd, l.Uuid, l.Name, "ended", l.ResourceClass, l.ProjectID, nil); err != nil {
		return 0, err
	}
	c.log.Info("lease ended", zap.Stringer("lease", l.Uuid), zap.String("project", l.ProjectID),
		zap.Int("allocations_deleted", len(allocs)+nodeless), zap.Time("end_time", l.EndTime),
		zap.Float64("late_seconds", l.Lateness))
	return l.Lateness, nil
}

// noticeLeaseEnding sends lease.ending once. pgx.ErrNoRows: already sent
// or the compare-and-set was lost.
func (c *Service) noticeLeaseEnding(ctx context.Context, q *Queries, id int64) error {
	l, err := q.NoticeLeaseEnding(ctx, NoticeLeaseEndingParams{LeaseID: id, Me: c.id})
	if err != nil {
		return err
	}
	return c.leaseEvent(ctx, q, EventLeaseEnding, l.Uuid, l.Name, l.State, l.ResourceClass, l.ProjectID, nil)
}

// leaseEvent writes one lease event in the move's transaction.
func (c *Service) leaseEvent(ctx context.Context, q *Queries, kind string, u uuid.UUID, name *string,
	state, rc, project string, reason *string) error {
	return q.InsertLeaseEvent(ctx, InsertLeaseEventParams{
		Payload: u.String() + " " + state, Kind: kind, LeaseUuid: u, Name: name, State: state,
		ResourceClass: rc, Project: project, Reason: reason,
	})
}
