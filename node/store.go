package node

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/metalloc/metalloc/db"
	"github.com/metalloc/metalloc/trait"
	"github.com/metalloc/metalloc/web"
)

// AllocationRemover deletes the allocation a node holds and clears the node's
// allocation_id/instance_uuid, inside tx (implemented by package allocation,
// injected by cmd wiring). The node row is already locked by the caller.
type AllocationRemover interface {
	RemoveNodeAllocation(ctx context.Context, tx pgx.Tx, nodeID, allocationID int64) error
}

// Deallocator is the AllocationRemover used when none is injected, and the
// one deallocation: metalloc_deallocate (db/schema.sql) clears the node's
// allocation_id and instance_uuid and deletes the allocation row (Ironic:
// dbapi.destroy_allocation). The caller holds the node's row lock (lock
// order: node, then allocation; conductor/doc.go).
type Deallocator struct{}

// RemoveNodeAllocation deallocates node nodeID from allocationID inside tx.
func (Deallocator) RemoveNodeAllocation(ctx context.Context, tx pgx.Tx, nodeID, allocationID int64) error {
	if err := New(tx).Deallocate(ctx, allocationID); err != nil {
		return fmt.Errorf("deallocating node %d from allocation %d: %w", nodeID, allocationID, err)
	}
	return nil
}

func removerOrDefault(r AllocationRemover) AllocationRemover {
	if r == nil {
		return Deallocator{}
	}
	return r
}

// Store reads and writes nodes and their traits in PostgreSQL. Every change
// runs in one transaction holding the node's row lock (SELECT ... FOR UPDATE),
// so it never interleaves with another change of the same node, and a
// conductor reserving nodes with FOR UPDATE SKIP LOCKED passes over it.
//
// A change waits at most LockWait for that lock (db.RowLocks: changes of the
// same node in this process take turns, so only one of them holds a pool
// connection while it waits; a node locked for long cannot take the pool
// from requests on other nodes), then fails with Ironic's NodeLocked (409,
// "Node <uuid> is locked by host <holder>, please retry after the current
// operation is completed."). A node named by its uuid and by its name
// waits on two turns.
type Store struct {
	pool  *pgxpool.Pool
	q     *Queries
	now   func() time.Time
	fleet fleetCache // Fleet's shared counts
	locks *db.RowLocks
}

// LockWait is how long a change waits for its node's row lock (and its turn
// to wait for it) before NodeLocked: about what Ironic's conductor waits
// for a node reservation ([conductor]node_locked_retry_attempts 3 ×
// node_locked_retry_interval 1 s).
const LockWait = 3 * time.Second

// NewStore returns a Store on pool.
func NewStore(pool *pgxpool.Pool) *Store {
	return &Store{pool: pool, q: New(pool), now: time.Now, locks: db.NewRowLocks(pool, LockWait)}
}

// lockedTx runs fn in a transaction that starts by locking node ident (fn's
// first statement), as db.RowLocks.InTx does; a lock not granted within
// LockWait is NodeLocked.
func (s *Store) lockedTx(ctx context.Context, ident string, fn func(pgx.Tx) error) error {
	key := "node/" + ident
	if u, ok := web.UUIDLike(ident); ok {
		key = "node/" + u.String()
	}
	err := s.locks.InTx(ctx, key, fn)
	if errors.Is(err, db.ErrLockWait) {
		return s.nodeLocked(ctx, ident)
	}
	return err
}

// nodeLocked is Ironic's NodeLocked for node ident, naming who holds its
// lock: the host of a conductor, else the holding session's application
// name or address ("unknown" when it is gone by now).
func (s *Store) nodeLocked(ctx context.Context, ident string) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
	defer cancel()
	p := NodeLockHolderParams{Name: &ident}
	if u, ok := web.UUIDLike(ident); ok {
		p = NodeLockHolderParams{Uuid: &u}
	}
	node, host := ident, "unknown"
	if r, err := s.q.NodeLockHolder(ctx, p); err == nil {
		node = r.Uuid.String()
		if h := strings.TrimPrefix(r.Holder, "metalloc-conductor "); h != "" {
			host = h
		}
	}
	return conflictf("Node %s is locked by host %s, please retry after the current operation is completed.", node, host)
}

// noRows maps pgx.ErrNoRows to ErrNotFound (naming ident) and wraps any other
// error with what was being done. It is the one place that translation
// happens.
func noRows(err error, what, ident string) error {
	if errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("%w: %s", ErrNotFound, ident)
	}
	return fmt.Errorf("%s %s: %w", what, ident, err)
}

// Get returns the node with the given uuid or name, or ErrNotFound.
func (s *Store) Get(ctx context.Context, ident string) (Node, error) {
	return s.get(ctx, s.q, ident, false)
}

// get looks a node up by uuid (when ident parses as one) or by name,
// optionally taking its row lock.
func (s *Store) get(ctx context.Context, q *Queries, ident string, lock bool) (Node, error) {
	var (
		row            NodeRow
		alloc, chassis *uuid.UUID
		tr             []string
		err            error
	)
	if u, isUUID := web.UUIDLike(ident); isUUID {
		if lock {
			var r LockNodeByUUIDRow
			r, err = q.LockNodeByUUID(ctx, u)
			row, alloc, chassis, tr = r.NodeRow, r.AllocationUuid, r.ChassisUuid, r.Traits
		} else {
			var r GetNodeByUUIDRow
			r, err = q.GetNodeByUUID(ctx, u)
			row, alloc, chassis, tr = r.NodeRow, r.AllocationUuid, r.ChassisUuid, r.Traits
		}
	} else {
		if lock {
			var r LockNodeByNameRow
			r, err = q.LockNodeByName(ctx, &ident)
			row, alloc, chassis, tr = r.NodeRow, r.AllocationUuid, r.ChassisUuid, r.Traits
		} else {
			var r GetNodeByNameRow
			r, err = q.GetNodeByName(ctx, &ident)
			row, alloc, chassis, tr = r.NodeRow, r.AllocationUuid, r.ChassisUuid, r.Traits
		}
	}
	if err != nil {
		return Node{}, noRows(err, "reading node", ident)
	}
	return fromRow(row, alloc, chassis, tr)
}

// Create inserts n (with its traits) and returns it as stored. A zero UUID is
// replaced by a random one, an empty ProvisionState by "enroll", and the
// conductor group is lower-cased. Duplicate uuid, name or instance_uuid are
// *Error conflicts with Ironic's messages; invalid traits are *Error invalid.
// Create does not validate the driver: callers run Driver.Validate first.
func (s *Store) Create(ctx context.Context, n Node) (Node, error) {
	return s.CreateWith(ctx, n, nil)
}

// CreateWith is Create, then runs then (when not nil) on the new node in
// the same transaction: an error from then rolls the node back too (node
// import creates a node's ports this way).
func (s *Store) CreateWith(ctx context.Context, n Node, then func(tx pgx.Tx, n Node) error) (Node, error) {
	if n.UUID == uuid.Nil {
		n.UUID = uuid.New()
	}
	if n.ProvisionState == "" {
		n.ProvisionState = StateEnroll
	}
	n.ConductorGroup = strings.ToLower(n.ConductorGroup)
	traits, err := normaliseTraits(n.UUID, n.Traits)
	if err != nil {
		return Node{}, err
	}
	if n.ProvisionUpdatedAt == nil {
		n.ProvisionUpdatedAt = ptr(s.now().UTC())
	}
	var out Node
	err = db.InTx(ctx, s.pool, func(tx pgx.Tx) error {
		q := s.q.WithTx(tx)
		if err := resolveChassis(ctx, q, &n); err != nil {
			return err
		}
		p, err := insertParams(n)
		if err != nil {
			return err
		}
		ins, err := q.InsertNode(ctx, p)
		if err != nil {
			return uniqueError(err, n)
		}
		if len(traits) > 0 {
			if err := q.InsertNodeTraits(ctx, InsertNodeTraitsParams{NodeID: ins.ID, Traits: traits}); err != nil {
				return fmt.Errorf("adding traits to node %s: %w", n.UUID, err)
			}
		}
		if out, err = s.get(ctx, q, n.UUID.String(), false); err != nil || then == nil {
			return err
		}
		return then(tx, out)
	})
	if err != nil {
		return Node{}, err
	}
	return out, nil
}

// Locked runs fn on node ident inside one transaction holding the node's
// row lock, without writing the node itself; fn's error rolls back what it
// did on tx.
func (s *Store) Locked(ctx context.Context, ident string, fn func(tx pgx.Tx, n Node) error) error {
	return s.lockedTx(ctx, ident, func(tx pgx.Tx) error {
		n, err := s.get(ctx, s.q.WithTx(tx), ident, true)
		if err != nil {
			return err
		}
		return fn(tx, n)
	})
}

// uniqueError turns a unique violation on insert/update of n into Ironic's
// conflict errors; other errors are wrapped.
func uniqueError(err error, n Node) error {
	switch {
	case db.IsForeignKeyViolation(err, "nodes_chassis_id_fkey") && n.ChassisUUID != nil:
		// The chassis went between resolveChassis and the write.
		return invalidf("Chassis %s could not be found.", *n.ChassisUUID)
	case db.IsUniqueViolation(err, "nodes_uuid_key"):
		return conflictf("A node with UUID %s already exists.", n.UUID)
	case db.IsUniqueViolation(err, "nodes_name_key"):
		return conflictf("A node with name %s already exists.", deref(n.Name))
	case db.IsUniqueViolation(err, "nodes_instance_uuid_key"):
		return conflictf("Instance %s is already associated with a node, it cannot be associated with this other node %s",
			deref(n.InstanceUUID), n.UUID)
	}
	return fmt.Errorf("writing node %s: %w", n.UUID, err)
}

// change runs fn on the locked node ident inside one transaction, then
// writes the node fn left behind and returns it re-read. fn may run more SQL
// on tx (allocation removal, traits); returning an error rolls back.
func (s *Store) change(ctx context.Context, ident string, fn func(tx pgx.Tx, q *Queries, n *Node) error) (Node, error) {
	var out Node
	err := s.lockedTx(ctx, ident, func(tx pgx.Tx) error {
		q := s.q.WithTx(tx)
		n, err := s.get(ctx, q, ident, true)
		if err != nil {
			return err
		}
		if err := fn(tx, q, &n); err != nil {
			return err
		}
		if err := s.save(ctx, q, n); err != nil {
			return err
		}
		out, err = s.get(ctx, q, n.UUID.String(), false)
		return err
	})
	return out, err
}

// save writes every updatable column of n (not allocation_id) and the
// history events n recorded.
func (s *Store) save(ctx context.Context, q *Queries, n Node) error {
	p, err := updateParams(n)
	if err != nil {
		return err
	}
	if _, err := q.UpdateNode(ctx, p); err != nil {
		if errors.Is(err, pgx.ErrNoRows) {
			return noRows(err, "updating node", n.UUID.String())
		}
		return uniqueError(err, n)
	}
	return writeHistory(ctx, q, n)
}

// Update changes the node ident under its row lock: mutate edits a copy of
// the current node, then Ironic's update rules (conductor update_node) are
// applied to the difference, and the result is written in the same
// transaction:
//
//   - leaving maintenance clears maintenance_reason and fault;
//   - protected only in active/rescue (409), protected_reason only when
//     protected (400), likewise retired (not in available) and retired_reason;
//   - hardware interfaces change only in enroll/inspecting/inspect wait/
//     manageable/available or in maintenance (409), and driver, conductor
//     group or interface changes are validated by drv (which fills
//     defaults, and may check that a live conductor serves the driver);
//   - resource_class, once set, changes only in those states (409);
//   - instance_uuid cannot be overwritten (409, NodeAssociated); removing it
//     from a node holding an allocation deletes the allocation through
//     remover (409 unless in those states or in maintenance);
//   - the owner of a node whose allocation has an owner cannot change (409).
//
// mutate and the rules return *Error for client mistakes.
func (s *Store) Update(ctx context.Context, ident string, drv Driver, remover AllocationRemover,
	mutate func(n *Node) error) (Node, error) {
	if drv == nil {
		drv = FakeDriver{}
	}
	remover = removerOrDefault(remover)
	return s.change(ctx, ident, func(tx pgx.Tx, q *Queries, n *Node) error {
		old := n.Clone()
		if err := mutate(n); err != nil {
			return err
		}
		return s.applyUpdateRules(ctx, tx, q, old, n, drv, remover)
	})
}

// updateAllowedStates are the states in which interfaces, resource class and
// an allocation's instance_uuid may change (conductor update_node).
var updateAllowedStates = []string{StateEnroll, StateInspecting, StateInspectWait, StateManageable, StateAvailable}

func (s *Store) applyUpdateRules(ctx context.Context, tx pgx.Tx, q *Queries, old Node, n *Node,
	drv Driver, remover AllocationRemover) error {
	n.ConductorGroup = strings.ToLower(n.ConductorGroup)
	if old.Maintenance && !n.Maintenance {
		n.MaintenanceReason = nil
		n.Fault = nil
	}
	allowed := strings.Join(updateAllowedStates, ", ")
	if old.Protected != n.Protected {
		if !n.Protected {
			n.ProtectedReason = nil
		} else if n.ProvisionState != StateActive && n.ProvisionState != StateRescue {
			return conflictf("Node %s can only be made protected in provision states 'active' or 'rescue', the current state is '%s'",
				n.UUID, n.ProvisionState)
		}
	}
	if !eqPtr(old.ProtectedReason, n.ProtectedReason) && n.ProtectedReason != nil && !n.Protected {
		return invalidf("The protected_reason field can only be set when protected is True")
	}
	if old.Retired != n.Retired {
		if !n.Retired {
			n.RetiredReason = nil
		} else if n.ProvisionState == StateAvailable {
			return conflictf("Node %s can not have 'retired' set in provision state 'available', the current state is '%s'",
				n.UUID, n.ProvisionState)
		}
	}
	if !eqPtr(old.RetiredReason, n.RetiredReason) && n.RetiredReason != nil && !n.Retired {
		return invalidf("The retired_reason field can only be set when retired is True")
	}
	inAllowed := slices.Contains(updateAllowedStates, n.ProvisionState)
	checkIfaces := old.Driver != n.Driver || old.ConductorGroup != n.ConductorGroup
	for _, f := range InterfaceFields {
		if old.Interfaces[f] == n.Interfaces[f] {
			continue
		}
		if !(inAllowed || n.Maintenance) {
			return conflictf("Node %s can not have %s updated unless it is in one of allowed (%s) states or in maintenance mode.",
				n.UUID, f, allowed)
		}
		checkIfaces = true
	}
	if checkIfaces {
		if err := drv.Validate(ctx, n); err != nil {
			return err
		}
	}
	if !eqPtr(old.ChassisUUID, n.ChassisUUID) {
		if err := resolveChassis(ctx, q, n); err != nil {
			return err
		}
	}
	if !eqPtr(old.InstanceUUID, n.InstanceUUID) && n.InstanceUUID != nil && old.InstanceUUID != nil {
		return errNodeAssociated(n.UUID, *old.InstanceUUID)
	}
	if !eqPtr(old.ResourceClass, n.ResourceClass) && old.ResourceClass != nil && !slices.Contains(updateAllowedStates, old.ProvisionState) {
		return conflictf("Node %s can not have resource_class updated unless it is in one of allowed (%s) states.",
			n.UUID, allowed)
	}
	if !eqPtr(old.Owner, n.Owner) && old.AllocationID != nil {
		owner, err := q.GetAllocationOwner(ctx, *old.AllocationID)
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("reading allocation of node %s: %w", n.UUID, err)
		}
		if err == nil && owner != nil {
			return conflictf("Cannot update owner of node \"%s\" while it is allocated to an allocation with an  owner.", n.UUID)
		}
	}
	if !eqPtr(old.InstanceUUID, n.InstanceUUID) && old.AllocationID != nil && n.InstanceUUID == nil {
		if !old.Maintenance && !slices.Contains(updateAllowedStates, old.ProvisionState) {
			return conflictf("Node %s with an allocation can not have instance_uuid removed unless it is in one of allowed (%s) states or in maintenance mode.",
				n.UUID, allowed)
		}
		if err := remover.RemoveNodeAllocation(ctx, tx, n.ID, *old.AllocationID); err != nil {
			return fmt.Errorf("removing allocation of node %s: %w", n.UUID, err)
		}
		n.AllocationID, n.AllocationUUID = nil, nil
	}
	return nil
}

// deleteAllowedStates are the states a node not in maintenance may be
// deleted in (states.DELETE_ALLOWED_STATES plus available, Ironic's default
// allow_deleting_available_nodes=True), in Ironic's order.
var deleteAllowedStates = []string{StateManageable, StateEnroll, StateAdoptFail, StateAvailable}

// Delete removes the node ident, as Ironic's destroy_node: a node with an
// instance is refused unless in maintenance (409), a protected node is
// refused (403), a node booked by a pending or active lease is refused
// (409, refuseBooked), and outside maintenance only enroll, manageable,
// adopt failed and available nodes may go (409). An allocation the node
// holds is deleted through remover in the same transaction.
func (s *Store) Delete(ctx context.Context, ident string, remover AllocationRemover) error {
	remover = removerOrDefault(remover)
	return s.lockedTx(ctx, ident, func(tx pgx.Tx) error {
		q := s.q.WithTx(tx)
		n, err := s.get(ctx, q, ident, true)
		if err != nil {
			return err
		}
		if !n.Maintenance && n.InstanceUUID != nil {
			return errNodeAssociated(n.UUID, *n.InstanceUUID)
		}
		if n.Protected {
			return errNodeProtected(n.UUID)
		}
		if err := refuseBooked(ctx, q, n); err != nil {
			return err
		}
		if !n.Maintenance && !slices.Contains(deleteAllowedStates, n.ProvisionState) {
			return conflictf("Can not delete node \"%s\" while it is in provision state \"%s\". Valid provision states to perform deletion are: \"%s\", or set the node into maintenance mode",
				n.UUID, n.ProvisionState, pyTuple(deleteAllowedStates))
		}
		if n.AllocationID != nil {
			if err := remover.RemoveNodeAllocation(ctx, tx, n.ID, *n.AllocationID); err != nil {
				return fmt.Errorf("removing allocation of node %s: %w", n.UUID, err)
			}
		}
		if _, err := q.DeleteNode(ctx, n.ID); err != nil {
			return fmt.Errorf("deleting node %s: %w", n.UUID, err)
		}
		return nil
	})
}

// refuseBooked is Delete's 409 for node n (locked) while a pending or
// active lease books it, naming the earliest such lease, as Ironic refuses
// to delete a node with an allocation and Blazar a host with reservations:
// deleting it would shrink the lease unseen. A node in maintenance is
// replaced in its pending leases by the conductors (docs/leases.md), after
// which it may go; an active lease is ended or shortened first.
func refuseBooked(ctx context.Context, q *Queries, n Node) error {
	bs, err := q.NodeBookings(ctx, n.ID)
	if err != nil || len(bs) == 0 {
		return err
	}
	b := bs[0]
	lease := b.Uuid.String()
	if b.Name != nil {
		lease = fmt.Sprintf("%s (%s)", *b.Name, lease)
	}
	remedy := "put the node in maintenance so that the conductors replace it in the lease before its start, or cancel the lease"
	if b.State == "active" {
		remedy = "end the lease first (move its end_time)"
	}
	more := ""
	if len(bs) > 1 {
		more = fmt.Sprintf(" and %d more", len(bs)-1)
	}
	return conflictf("Node %s is booked by %s lease %s%s of project %s from %s to %s; %s.",
		n.UUID, b.State, lease, more, b.ProjectID, b.StartTime.UTC().Format(time.RFC3339),
		b.EndTime.UTC().Format(time.RFC3339), remedy)
}

// SetMaintenance puts the node into maintenance with reason (on) or takes it
// out (clearing the reason and fault), as Ironic's maintenance endpoint.
func (s *Store) SetMaintenance(ctx context.Context, ident string, on bool, reason *string) (Node, error) {
	return s.change(ctx, ident, func(_ pgx.Tx, _ *Queries, n *Node) error {
		n.Maintenance = on
		n.MaintenanceReason = reason
		if !on {
			n.MaintenanceReason = nil
			n.Fault = nil
		}
		return nil
	})
}

// SetTargetRAIDConfig stores cfg as the node's target_raid_config (nil:
// {}), as Ironic's set_target_raid_config does once the RAID interface
// accepted it (an empty configuration needs no RAID interface).
func (s *Store) SetTargetRAIDConfig(ctx context.Context, ident string, cfg map[string]any) (Node, error) {
	if cfg == nil {
		cfg = map[string]any{}
	}
	return s.change(ctx, ident, func(_ pgx.Tx, _ *Queries, n *Node) error {
		n.TargetRaidConfig = cfg
		return nil
	})
}

// SetPowerState changes the node's power state through drv, which completes
// at once: "power on", "rebooting" and "soft rebooting" end powered on,
// "power off" and "soft power off" powered off. As in Ironic, nodes being
// cleaned refuse (400), and a driver failure does not fail the request: it
// is recorded in last_error and the power state is left unchanged. An
// unknown target is Ironic's InvalidStateRequested (400).
func (s *Store) SetPowerState(ctx context.Context, ident, target string, drv Driver) (Node, error) {
	if drv == nil {
		drv = FakeDriver{}
	}
	return s.change(ctx, ident, func(_ pgx.Tx, _ *Queries, n *Node) error {
		return applyPower(ctx, n, ident, target, drv)
	})
}

// applyPower is SetPowerState's change of n (named ident in errors).
func applyPower(ctx context.Context, n *Node, ident, target string, drv Driver) error {
	if !slices.Contains(powerTargets, target) {
		return errInvalidStateRequested(target, ident, strOrNone(n.PowerState))
	}
	if n.ProvisionState == StateCleanWait || n.ProvisionState == StateCleaning {
		return errInvalidStateRequested(target, ident, n.ProvisionState)
	}
	n.LastError = nil
	if err := drv.SetPower(ctx, n, target); err != nil {
		n.fail(eventUnknown, fmt.Sprintf("Failed to change power state to '%s' by '%s': %v", target, target, err))
	}
	n.TargetPowerState = nil
	return nil
}

// powerTargets are the power state targets the API accepts.
var powerTargets = []string{PowerOn, PowerOff, Rebooting, SoftRebooting, SoftPowerOff}

// Traits returns the node's traits, sorted.
func (s *Store) Traits(ctx context.Context, ident string) ([]string, error) {
	n, err := s.Get(ctx, ident)
	if err != nil {
		return nil, err
	}
	return n.Traits, nil
}

// SetTraits replaces the node's traits with traits (deduplicated). Each must
// be a valid trait and there may be at most MaxTraitsPerNode (*Error invalid).
func (s *Store) SetTraits(ctx context.Context, ident string, traits []string) (Node, error) {
	return s.change(ctx, ident, func(_ pgx.Tx, q *Queries, n *Node) error {
		tr, err := normaliseTraits(n.UUID, traits)
		if err != nil {
			return err
		}
		if err := q.DeleteNodeTraits(ctx, n.ID); err != nil {
			return fmt.Errorf("removing traits of node %s: %w", n.UUID, err)
		}
		if len(tr) > 0 {
			if err := q.InsertNodeTraits(ctx, InsertNodeTraitsParams{NodeID: n.ID, Traits: tr}); err != nil {
				return fmt.Errorf("setting traits of node %s: %w", n.UUID, err)
			}
		}
		n.Traits = tr
		return nil
	})
}

// AddTrait adds one trait to the node (a no-op if it has it already).
func (s *Store) AddTrait(ctx context.Context, ident, name string) (Node, error) {
	return s.change(ctx, ident, func(_ pgx.Tx, q *Queries, n *Node) error {
		if slices.Contains(n.Traits, name) {
			return nil
		}
		tr, err := normaliseTraits(n.UUID, append(slices.Clone(n.Traits), name))
		if err != nil {
			return err
		}
		if err := q.InsertNodeTraits(ctx, InsertNodeTraitsParams{NodeID: n.ID, Traits: []string{name}}); err != nil {
			return fmt.Errorf("adding trait to node %s: %w", n.UUID, err)
		}
		n.Traits = tr
		return nil
	})
}

// RemoveTrait removes one trait from the node; a trait the node does not
// have is an *Error not found with Ironic's message.
func (s *Store) RemoveTrait(ctx context.Context, ident, name string) (Node, error) {
	return s.change(ctx, ident, func(_ pgx.Tx, q *Queries, n *Node) error {
		rows, err := q.DeleteNodeTrait(ctx, DeleteNodeTraitParams{NodeID: n.ID, Trait: name})
		if err != nil {
			return fmt.Errorf("removing trait from node %s: %w", n.UUID, err)
		}
		if rows == 0 {
			return notFoundf("Node %s doesn't have a trait '%s'", n.UUID, name)
		}
		n.Traits = slices.DeleteFunc(n.Traits, func(t string) bool { return t == name })
		return nil
	})
}

// RemoveAllTraits removes every trait of the node.
func (s *Store) RemoveAllTraits(ctx context.Context, ident string) (Node, error) {
	return s.SetTraits(ctx, ident, nil)
}

// normaliseTraits validates, deduplicates and sorts traits for node u.
func normaliseTraits(u uuid.UUID, traits []string) ([]string, error) {
	out := make([]string, 0, len(traits))
	for _, t := range traits {
		if err := checkTrait(t); err != nil {
			return nil, err
		}
		if !slices.Contains(out, t) {
			out = append(out, t)
		}
	}
	if len(out) > MaxTraitsPerNode {
		return nil, invalidf("Could not modify traits for node %s as it would exceed the maximum number of traits per node (%d vs. %d)",
			u, len(out), MaxTraitsPerNode)
	}
	slices.Sort(out)
	return out, nil
}

// checkTrait validates one trait name as Ironic's TRAITS_SCHEMA does, with
// the message its schema validation gives.
func checkTrait(t string) error {
	return checkTraitAs("trait", t)
}

func checkTraitAs(what, t string) error {
	switch {
	case len(t) > trait.MaxLength:
		return invalidf("Schema error for %s: %s is too long", what, web.PyRepr(t))
	case t == "":
		return invalidf("Schema error for %s: %s is too short", what, web.PyRepr(t))
	case !trait.Valid(t):
		return invalidf("Schema error for %s: %s is not valid under any of the given schemas. Possible root cause: %s does not match %s",
			what, web.PyRepr(t), web.PyRepr(t), web.PyRepr("^"+trait.CustomPrefix+"[A-Z0-9_]+$"))
	}
	return nil
}

func eqPtr[T comparable](a, b *T) bool {
	if a == nil || b == nil {
		return a == nil && b == nil
	}
	return *a == *b
}

// fromRow converts a nodes row plus its allocation's and chassis' uuids and
// its traits.
func fromRow(r NodeRow, alloc, chassis *uuid.UUID, traits []string) (Node, error) {
	n := Node{
		ID: r.ID, UUID: r.Uuid, Name: r.Name, Driver: r.Driver, ResourceClass: r.ResourceClass,
		ProvisionState: r.ProvisionState, TargetProvisionState: r.TargetProvisionState,
		ProvisionUpdatedAt: r.ProvisionUpdatedAt, PowerState: r.PowerState,
		TargetPowerState: r.TargetPowerState, Maintenance: r.Maintenance,
		MaintenanceReason: r.MaintenanceReason, Fault: r.Fault, LastError: r.LastError,
		InstanceUUID: r.InstanceUuid, AllocationID: r.AllocationID, AllocationUUID: alloc,
		Owner: r.Owner, Lessee: r.Lessee, Description: r.Description,
		ConductorGroup: r.ConductorGroup, Reservation: r.Reservation, Protected: r.Protected,
		ProtectedReason: r.ProtectedReason, Retired: r.Retired, RetiredReason: r.RetiredReason,
		AutomatedClean: r.AutomatedClean, ConsoleEnabled: r.ConsoleEnabled, Shard: r.Shard, Reservable: r.Reservable,
		Traits: traits, CreatedAt: r.CreatedAt, UpdatedAt: r.UpdatedAt,
		ChassisID: r.ChassisID, ChassisUUID: chassis,
	}
	if n.Traits == nil {
		n.Traits = []string{}
	}
	objs := []struct {
		raw json.RawMessage
		dst *map[string]any
	}{
		{r.Properties, &n.Properties}, {r.Extra, &n.Extra}, {r.InstanceInfo, &n.InstanceInfo},
		{r.DriverInfo, &n.DriverInfo}, {r.DriverInternalInfo, &n.DriverInternalInfo},
		{r.NetworkData, &n.NetworkData}, {r.RaidConfig, &n.RaidConfig},
		{r.TargetRaidConfig, &n.TargetRaidConfig},
	}
	for _, o := range objs {
		m := map[string]any{}
		if len(o.raw) > 0 {
			if err := json.Unmarshal(o.raw, &m); err != nil || m == nil {
				m = map[string]any{}
			}
		}
		*o.dst = m
	}
	n.Interfaces = map[string]string{}
	if len(r.Interfaces) > 0 {
		var ifaces map[string]any
		if err := json.Unmarshal(r.Interfaces, &ifaces); err == nil {
			for k, v := range ifaces {
				if s, ok := v.(string); ok {
					n.Interfaces[k] = s
				}
			}
		}
	}
	return n, nil
}

func marshalObject(m map[string]any) (json.RawMessage, error) {
	if len(m) == 0 {
		return json.RawMessage(`{}`), nil
	}
	b, err := json.Marshal(m)
	if err != nil {
		return nil, invalidf("Cannot store JSON value: %v", err)
	}
	return b, nil
}

// jsonColumns marshals the JSON-valued fields in column order.
func jsonColumns(n Node) ([9]json.RawMessage, error) {
	var out [9]json.RawMessage
	for i, m := range []map[string]any{n.Properties, n.Extra, n.InstanceInfo, n.DriverInfo,
		n.DriverInternalInfo, nil, n.NetworkData, n.RaidConfig, n.TargetRaidConfig} {
		b, err := marshalObject(m)
		if err != nil {
			return out, err
		}
		out[i] = b
	}
	out[5] = marshalInterfaces(n.Interfaces)
	return out, nil
}

// lastInterfaces is the interfaces object marshalInterfaces made last:
// most nodes of a fleet (all of an import's) have the same, and its
// encoding was a sixth of a node import's CPU.
var lastInterfaces atomic.Pointer[interfacesJSON]

type interfacesJSON struct {
	m    map[string]string
	json json.RawMessage
}

// marshalInterfaces is m as a JSON object (keys sorted).
func marshalInterfaces(m map[string]string) json.RawMessage {
	if last := lastInterfaces.Load(); last != nil && maps.Equal(last.m, m) {
		return last.json
	}
	b, err := json.Marshal(m) // a map of strings always marshals
	if err != nil || len(m) == 0 {
		b = []byte(`{}`)
	}
	lastInterfaces.Store(&interfacesJSON{maps.Clone(m), b})
	return b
}

func insertParams(n Node) (InsertNodeParams, error) {
	j, err := jsonColumns(n)
	if err != nil {
		return InsertNodeParams{}, err
	}
	return InsertNodeParams{
		Uuid: n.UUID, Name: n.Name, Driver: n.Driver, ResourceClass: n.ResourceClass,
		ProvisionState: n.ProvisionState, TargetProvisionState: n.TargetProvisionState,
		ProvisionUpdatedAt: n.ProvisionUpdatedAt, PowerState: n.PowerState,
		TargetPowerState: n.TargetPowerState, Maintenance: n.Maintenance,
		MaintenanceReason: n.MaintenanceReason, Fault: n.Fault, LastError: n.LastError,
		InstanceUuid: n.InstanceUUID, Owner: n.Owner, Lessee: n.Lessee, Description: n.Description,
		ConductorGroup: n.ConductorGroup, Protected: n.Protected, ProtectedReason: n.ProtectedReason,
		Retired: n.Retired, RetiredReason: n.RetiredReason, AutomatedClean: n.AutomatedClean,
		ConsoleEnabled: n.ConsoleEnabled, Shard: n.Shard,
		Properties: j[0], Extra: j[1], InstanceInfo: j[2], DriverInfo: j[3], DriverInternalInfo: j[4],
		Interfaces: j[5], NetworkData: j[6], RaidConfig: j[7], TargetRaidConfig: j[8],
		ChassisID: n.ChassisID, Reservable: n.Reservable,
	}, nil
}

func updateParams(n Node) (UpdateNodeParams, error) {
	j, err := jsonColumns(n)
	if err != nil {
		return UpdateNodeParams{}, err
	}
	return UpdateNodeParams{
		ID: n.ID, Name: n.Name, Driver: n.Driver, ResourceClass: n.ResourceClass,
		ProvisionState: n.ProvisionState, TargetProvisionState: n.TargetProvisionState,
		ProvisionUpdatedAt: n.ProvisionUpdatedAt, PowerState: n.PowerState,
		TargetPowerState: n.TargetPowerState, Maintenance: n.Maintenance,
		MaintenanceReason: n.MaintenanceReason, Fault: n.Fault, LastError: n.LastError,
		InstanceUuid: n.InstanceUUID, Owner: n.Owner, Lessee: n.Lessee, Description: n.Description,
		ConductorGroup: n.ConductorGroup, Protected: n.Protected, ProtectedReason: n.ProtectedReason,
		Retired: n.Retired, RetiredReason: n.RetiredReason, AutomatedClean: n.AutomatedClean,
		ConsoleEnabled: n.ConsoleEnabled, Shard: n.Shard,
		Properties: j[0], Extra: j[1], InstanceInfo: j[2], DriverInfo: j[3], DriverInternalInfo: j[4],
		Interfaces: j[5], NetworkData: j[6], RaidConfig: j[7], TargetRaidConfig: j[8],
		ChassisID: n.ChassisID, Reservable: n.Reservable,
	}, nil
}

// pyTuple renders strings as a Python tuple, as Ironic's messages do.
func pyTuple(items []string) string {
	parts := make([]string, len(items))
	for i, s := range items {
		parts[i] = web.PyRepr(s)
	}
	return "(" + strings.Join(parts, ", ") + ")"
}
