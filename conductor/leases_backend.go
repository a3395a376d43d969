package conductor

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"go.uber.org/zap"

	"github.com/metalloc/metalloc/db"
	"github.com/metalloc/metalloc/ironic"
)

// Leases in front of Ironic and with the placement backend (issue 43;
// docs/leases.md, docs/ironic.md "Leases"). With the database backend a
// lease's moves are one transaction each (leases.go). Otherwise:
//
//   - Start: every booked node's lessee becomes the project (in Ironic
//     first: Ironic gives an allocation owned by a project only nodes that
//     project owns or leases), and on_start allocate inserts one
//     allocating allocation per free node, that node its only candidate,
//     which the conductors claim as any other: the Ironic backend makes it
//     in Ironic through the journal, the placement backend claims it in
//     Placement. The lease is active at once; its allocations become
//     active as the backend settles them.
//   - End, in front of Ironic: before the end's transaction, every booked
//     node the project deployed (provision_state active or deploy failed
//     in Ironic, lent to the project) is undeployed through Ironic and
//     waited for until it is available again (cleaning included), for up
//     to leaseUndeployTimeout; the nodes' lessee is removed in Ironic;
//     then the end's transaction deletes the allocations (the journal
//     deletes Ironic's copies), clears the lessee and releases the nodes.
//     A node Ironic refuses to undeploy, that fails to clean, or is not
//     available in time puts the lease in error (FailLease) with the
//     reason; nothing else changes.
//
// The part in Ironic runs outside any transaction, on the lease this
// conductor owns (ClaimDueLeases), in a goroutine of its own (one per
// lease, at most leaseIronicMoves at a time) so that one lease's undeploy
// does not delay the others' moves. Each of its steps is idempotent (a
// lessee set again, an undeploy of a node already moving is waited for,
// not asked again): a conductor that dies mid-way leaves the lease active
// and owned by a dead conductor, ClaimDueLeases hands it to a live one,
// which makes the same steps from what Ironic shows; the transactions
// stay the compare-and-sets of leases.go.
const (
	// leaseIronicPoll is how often an end reads the nodes it waits for.
	leaseIronicPoll = 2 * time.Second
	// leaseUndeployTimeout bounds how long an end waits for the nodes it
	// undeploys to be available again (cleaning included).
	leaseUndeployTimeout = 30 * time.Minute
	// leaseIronicMoves caps the lease moves a conductor makes in Ironic at
	// a time (most of them wait for Ironic, reading a few nodes every
	// leaseIronicPoll); the others wait for a later poll. At least
	// leaseBatch, so that the leases one claim takes can all be moved.
	leaseIronicMoves = 64
	// leaseLendRounds bounds the rounds of replacements and lessees before
	// a start in front of Ironic (startLeaseInIronic).
	leaseLendRounds = 3
	// leaseLockedRetries is how many times a request Ironic answers 409
	// (a node locked by one of its conductors) is sent again, a
	// leaseIronicPoll apart, before the move is left for the next poll.
	leaseLockedRetries = 5
)

// leaseMoves tracks a conductor's lease moves in Ironic.
type leaseMoves struct {
	// running holds the ids of the leases being moved (a lease due is
	// claimed again at every poll while its move runs).
	running sync.Map
	n       atomic.Int32
	wg      sync.WaitGroup
}

// leaseViaBackend says whether a lease's allocations are made through the
// conductors' backend (in front of Ironic, the placement backend) rather
// than written active by the start's transaction (the database backend).
func (c *Service) leaseViaBackend() bool {
	return c.cfg.Ironic != nil || c.cfg.Backend != BackendDatabase
}

// startLeaseViaBackend is the start's transaction with the backend: every
// booked node's lessee becomes the project, and under on_start allocate
// the free ones (ids of nodes, their classes) get an allocating
// allocation, that node its only candidate, for the backend to claim.
func (c *Service) startLeaseViaBackend(ctx context.Context, q *Queries, l StartLeaseRow,
	nodes []LeaseNodesForUpdateRow, ids []int64, classes []string) error {
	all := make([]int64, len(nodes))
	for i, n := range nodes {
		all[i] = n.ID
	}
	if err := q.SetLeaseLessee(ctx, SetLeaseLesseeParams{Project: l.ProjectID, NodeIds: all}); err != nil {
		return err
	}
	if l.OnStart == "lessee" || len(ids) == 0 {
		return nil
	}
	byID := make(map[int64]uuid.UUID, len(nodes))
	for _, n := range nodes {
		byID[n.ID] = n.Uuid
	}
	uuids := make([]uuid.UUID, len(ids))
	for i, id := range ids {
		uuids[i] = byID[id]
	}
	_, err := q.InsertLeaseAllocationRequests(ctx, InsertLeaseAllocationRequestsParams{
		ResourceClasses: classes, LeaseUuid: l.Uuid, Owner: l.ProjectID, NodeUuids: uuids,
	})
	return err
}

// endLeaseViaBackend deletes, in the end's transaction, the lease's own
// allocations that hold no node (LeaseAllocationsWithoutNode: one the
// backend failed, or not settled yet) and returns how many; with the
// database backend there are none.
func (c *Service) endLeaseViaBackend(ctx context.Context, q *Queries, lease uuid.UUID, project string) (int, error) {
	if !c.leaseViaBackend() {
		return 0, nil
	}
	ids, err := q.LeaseAllocationsWithoutNode(ctx, LeaseAllocationsWithoutNodeParams{LeaseUuid: lease.String(), Project: project})
	if err != nil {
		return 0, err
	}
	for _, id := range ids {
		if err := q.DeallocateLease(ctx, id); err != nil {
			return 0, err
		}
	}
	return len(ids), nil
}

// leaseInIronic hands the move of lease id (claimed in state) to a
// goroutine of its own when this conductor is in front of Ironic: handled
// is false without Ironic (leaseRound moves it itself); started is false
// when its move runs already or the cap is reached (a later poll claims it
// again), so that leaseRound does not count it as moved.
func (c *Service) leaseInIronic(ctx context.Context, id int64, state string) (handled, started bool) {
	if c.cfg.Ironic == nil {
		return false, false
	}
	m := &c.leaseMoves
	if m.n.Load() >= leaseIronicMoves {
		return true, false
	}
	if _, running := m.running.LoadOrStore(id, struct{}{}); running {
		return true, false
	}
	m.n.Add(1)
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		defer m.n.Add(-1)
		defer m.running.Delete(id)
		var err error
		if state == "pending" {
			err = c.startLeaseInIronic(ctx, id)
		} else {
			err = c.endLeaseInIronic(ctx, id)
		}
		if err != nil && ctx.Err() == nil {
			c.log.Warn("could not move lease in Ironic; the next poll retries", zap.Int64("lease_id", id),
				zap.String("state", state), zap.Error(err))
		}
	}()
	return true, true
}

// startLeaseInIronic sets the booked nodes' lessee to the project in
// Ironic, then makes the start's transaction (moveLease). The failed
// nodes are replaced first (repairLease) and the nodes lent after: a node
// whose read after its lessee (Mirror.Refresh) shows it failed (put in
// maintenance directly in Ironic) is replaced again and its replacement
// lent, up to leaseLendRounds times, so that the start's own check
// finds nothing to replace (its replacement would not be lent in Ironic,
// which would refuse it: replaced again, leases_refused.go). A node lent
// and then replaced loses its lessee again, as do all of them when the
// start did not happen after all (the lease cancelled meanwhile).
func (c *Service) startLeaseInIronic(ctx context.Context, id int64) error {
	l, err := c.q.OwnedLease(ctx, OwnedLeaseParams{LeaseID: id, Me: c.id})
	if errors.Is(err, pgx.ErrNoRows) || (err == nil && l.State != "pending") {
		return nil
	}
	if err != nil {
		return err
	}
	lent := map[uuid.UUID]bool{}
	var nodes []LeaseNodeUUIDsRow
	for range leaseLendRounds {
		if err := c.checkLease(ctx, id); err != nil {
			return err
		}
		if nodes, err = c.q.LeaseNodeUUIDs(ctx, id); err != nil {
			return err
		}
		fresh := false
		for _, n := range nodes {
			if lent[n.Uuid] {
				continue
			}
			if err := c.setIronicLessee(ctx, n.Uuid, l.ProjectID, ""); err != nil {
				return fmt.Errorf("starting lease %s: node %s: %w", l.Uuid, cmp.Or(n.Name, n.Uuid.String()), err)
			}
			lent[n.Uuid], fresh = true, true
		}
		if !fresh {
			break
		}
	}
	if err := c.moveLease(ctx, id, "pending"); err != nil {
		return err
	}
	now, err := c.q.OwnedLease(ctx, OwnedLeaseParams{LeaseID: id, Me: c.id})
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return err
	}
	// Started; or not due after all (the next poll retries); or no longer
	// this conductor's (its new owner goes on): the nodes lent and no
	// longer booked (replaced by the start's check) lose their lessee.
	if nodes, err = c.q.LeaseNodeUUIDs(ctx, id); err != nil {
		return err
	}
	if now.State != "" && now.State != "pending" && now.State != "active" {
		c.log.Info("lease not started after all; removing the lessee set in Ironic", zap.Stringer("lease", l.Uuid))
		nodes = nil
	}
	for _, n := range nodes {
		delete(lent, n.Uuid)
	}
	for u := range lent {
		if err := c.setIronicLessee(ctx, u, "", l.ProjectID); err != nil {
			return err
		}
	}
	return nil
}

// setIronicLessee sets node u's lessee to project in Ironic ("": removes
// it, only while it is was's), then reads the node into the mirror. A node
// Ironic no longer has is skipped; 409 (locked) is retried; another
// refusal is logged and the node skipped (at the start, Ironic then
// refuses the node's allocation with its reason).
func (c *Service) setIronicLessee(ctx context.Context, u uuid.UUID, project, was string) error {
	cl := c.cfg.Ironic.Client()
	err := ironicLocked(ctx, func() error {
		n, err := cl.NodeState(ctx, u.String())
		if err != nil {
			return err
		}
		if project != "" && n.LesseeIs(project) || project == "" && !n.LesseeIs(was) {
			return nil
		}
		return cl.SetNodeLessee(ctx, u.String(), project)
	})
	if ironic.IsNotFound(err) {
		return nil
	}
	if st := ironic.StatusOf(err); st >= 400 && st < 500 && st != 409 {
		c.log.Warn("Ironic refused to change a leased node's lessee; node skipped", zap.Stringer("node", u),
			zap.String("lessee", project), zap.Error(err))
		return nil
	}
	if err != nil {
		return err
	}
	_, err = c.cfg.Ironic.Mirror().Refresh(ctx, u.String())
	return err
}

// ironicLocked runs fn again while Ironic answers 409 (a node locked by
// one of its conductors), up to leaseLockedRetries times.
func ironicLocked(ctx context.Context, fn func() error) error {
	for i := 0; ; i++ {
		err := fn()
		if !ironic.IsConflict(err) || i == leaseLockedRetries {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(leaseIronicPoll):
		}
	}
}

// endLeaseInIronic ends lease id in front of Ironic: the nodes the
// project deployed are undeployed and waited for, the lessee is removed
// in Ironic, then the end's transaction (moveLease). Before its end is
// due it only sends lease.ending (moveLease). A node Ironic refuses, that
// fails, or is not available within the bound puts the lease in error.
func (c *Service) endLeaseInIronic(ctx context.Context, id int64) error {
	l, err := c.q.OwnedLease(ctx, OwnedLeaseParams{LeaseID: id, Me: c.id})
	if errors.Is(err, pgx.ErrNoRows) || (err == nil && l.State != "active") {
		return nil
	}
	if err != nil {
		return err
	}
	if !l.EndDue {
		return c.moveLease(ctx, id, "active")
	}
	nodes, err := c.q.LeaseNodeUUIDs(ctx, id)
	if err != nil {
		return err
	}
	failed, err := c.undeployLeaseNodes(ctx, id, l, nodes)
	if err != nil || ctx.Err() != nil {
		return err
	}
	if len(failed) > 0 {
		return c.failLease(ctx, id, l, failed)
	}
	for _, n := range nodes {
		if err := c.setIronicLessee(ctx, n.Uuid, "", l.ProjectID); err != nil {
			return fmt.Errorf("ending lease %s: node %s: %w", l.Uuid, cmp.Or(n.Name, n.Uuid.String()), err)
		}
	}
	return c.moveLease(ctx, id, "active")
}

// undeployLeaseNodes undeploys, through Ironic, the lease's nodes the
// project deployed (lent to it in Ironic, active or deploy failed; one
// still deploying is undeployed once it is done) and waits until every one
// is available again, logging progress. It returns the nodes that failed,
// each with why (Ironic refused the undeploy; the node ended in another
// state, e.g. clean failed; not available within the bound); an error when
// Ironic or the database could not be reached, or the lease is no longer
// this conductor's (nothing failed: whoever owns it goes on).
func (c *Service) undeployLeaseNodes(ctx context.Context, id int64, l OwnedLeaseRow, nodes []LeaseNodeUUIDsRow) ([]string, error) {
	cl := c.cfg.Ironic.Client()
	bound := leaseUndeployTimeout
	deadline := time.Now().Add(bound)
	waiting := map[uuid.UUID]string{}
	asked := map[uuid.UUID]bool{}
	var failed []string
	// step looks at node u once: false when it is done with (available,
	// gone, not the project's, failed).
	step := func(u uuid.UUID, name string, first bool) (bool, error) {
		var st ironic.NodeState
		err := ironicLocked(ctx, func() error {
			var err error
			if st, err = cl.NodeState(ctx, u.String()); err != nil {
				return err
			}
			if first && !st.LesseeIs(l.ProjectID) ||
				st.ProvisionState != "active" && st.ProvisionState != "deploy failed" || st.TargetProvisionState != nil {
				return nil
			}
			if asked[u] {
				return nil
			}
			c.log.Info("lease ending: undeploying node through Ironic", zap.Stringer("lease", l.Uuid),
				zap.String("node", name), zap.String("provision_state", st.ProvisionState))
			if err := cl.Undeploy(ctx, u.String()); err != nil {
				return err
			}
			asked[u] = true
			st.TargetProvisionState = &st.ProvisionState // moving now
			return nil
		})
		switch {
		case ironic.IsNotFound(err):
			return false, nil
		case err != nil && (ironic.IsUnavailable(err) || ironic.StatusOf(err) == 0 || ironic.IsConflict(err)):
			// Not Ironic's refusal: unreachable, the database, still
			// locked. The next poll retries.
			return false, fmt.Errorf("ending lease %s: node %s: %w", l.Uuid, name, err)
		case err != nil:
			failed = append(failed, fmt.Sprintf("%s: Ironic refused to undeploy it: %s", name, ironicMessage(err)))
			return false, nil
		case first && !st.LesseeIs(l.ProjectID):
			return false, nil
		case st.ProvisionState == "available" && st.TargetProvisionState == nil:
			if !first {
				_, _ = c.cfg.Ironic.Mirror().Refresh(ctx, u.String())
			}
			return false, nil
		case undeployMoving(st):
			if time.Now().After(deadline) {
				failed = append(failed, fmt.Sprintf("%s: still %s %s after the undeploy was asked", name, st.ProvisionState, bound))
				return false, nil
			}
			return true, nil
		case first:
			return false, nil // manageable, enroll, ...: not deployed
		default:
			failed = append(failed, fmt.Sprintf("%s: %s after the undeploy (Ironic: %s)", name, st.ProvisionState,
				cmp.Or(deref(st.LastError), "no last_error")))
			return false, nil
		}
	}
	for _, n := range nodes {
		name := cmp.Or(n.Name, n.Uuid.String())
		more, err := step(n.Uuid, name, true)
		if err != nil {
			return nil, err
		}
		if more {
			waiting[n.Uuid] = name
		}
	}
	for len(waiting) > 0 {
		c.log.Info("lease ending: waiting for nodes to be undeployed and available in Ironic", zap.Stringer("lease", l.Uuid),
			zap.Int("waiting", len(waiting)), zap.Int("nodes", len(nodes)), zap.Time("deadline", deadline))
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(leaseIronicPoll):
		}
		if now, err := c.q.OwnedLease(ctx, OwnedLeaseParams{LeaseID: id, Me: c.id}); err != nil || now.State != "active" {
			return nil, cmp.Or(err, fmt.Errorf("lease %s is %s now", l.Uuid, now.State))
		}
		for u, name := range waiting {
			more, err := step(u, name, false)
			if err != nil {
				return nil, err
			}
			if !more {
				delete(waiting, u)
			}
		}
	}
	return failed, nil
}

// undeployMoving reports whether Ironic is still taking node st through
// an undeploy towards available (tearing down, cleaning) or a deploy.
func undeployMoving(st ironic.NodeState) bool {
	if st.TargetProvisionState != nil {
		return true
	}
	switch st.ProvisionState {
	case "deleting", "cleaning", "clean wait", "deploying", "wait call-back":
		return true
	}
	return false
}

// failLease puts lease l in error with the nodes that failed (one
// transaction; a lost compare-and-set changes nothing).
func (c *Service) failLease(ctx context.Context, id int64, l OwnedLeaseRow, failed []string) error {
	reason := fmt.Sprintf("ending: %d of the lease's nodes could not be undeployed through Ironic: %s",
		len(failed), strings.Join(failed, "; "))
	var late float64
	err := db.InTx(ctx, c.pool, func(tx pgx.Tx) error {
		q := c.q.WithTx(tx)
		r, err := q.FailLease(ctx, FailLeaseParams{Reason: reason, LeaseID: id, Me: c.id})
		if err != nil {
			return err
		}
		late = r.Lateness
		return c.leaseEvent(ctx, q, EventLeaseEnd, r.Uuid, r.Name, "error", r.ResourceClass, r.ProjectID, &reason)
	})
	if errors.Is(err, pgx.ErrNoRows) {
		return nil
	}
	if err == nil {
		c.Metrics.leaseLateness(MoveError, late)
		c.log.Error("lease in error: nodes could not be undeployed through Ironic", zap.Stringer("lease", l.Uuid),
			zap.String("project", l.ProjectID), zap.String("reason", reason))
	}
	return err
}

// ironicMessage is Ironic's own words in err.
func ironicMessage(err error) string {
	var e *ironic.Error
	if errors.As(err, &e) && e.Message != "" {
		return fmt.Sprintf("%d %s", e.Status, e.Message)
	}
	return err.Error()
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}
