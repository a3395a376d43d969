package lease

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/metalloc/metalloc/db"
	"github.com/metalloc/metalloc/topology"
)

// Why a booked node is replaced (Replacement.Why).
const (
	FailedMaintenance = "in maintenance"
	FailedDeleted     = "deleted"
)

// Replacement is one booked node that Repair swapped for another.
type Replacement struct {
	// Reservation is the reservation's number in the lease, from 1.
	Reservation int
	// Old names the failed node (its name, else its uuid); "" for a
	// deleted node, whose row is gone. OldNodeID is its id (0 then).
	Old       string
	OldNodeID int64
	// Why is FailedMaintenance, FailedDeleted, or a Refused's Why.
	Why string
	// New names the replacement (its name, else its uuid); NewUUID is its uuid.
	New     string
	NewUUID uuid.UUID
}

// String words r for events and logs: "reservation 1: node r01-n2 (in
// maintenance) replaced by r01-n5", "reservation 1: a deleted node
// replaced by r01-n5".
func (r Replacement) String() string {
	old := "a deleted node"
	if r.Old != "" {
		old = fmt.Sprintf("node %s (%s)", r.Old, r.Why)
	}
	return fmt.Sprintf("reservation %d: %s replaced by %s", r.Reservation, old, r.New)
}

// RepairResult is what Repair found and did.
type RepairResult struct {
	// Lease is the lease as Repair read it (locked), DegradedReason as
	// Repair left it.
	Lease Lease
	// ResourceClass is the lease's first reservation's (events name it).
	ResourceClass string
	// Replaced lists the nodes swapped, in reservation order.
	Replaced []Replacement
	// Changed says whether DegradedReason changed (set, reworded or cleared).
	Changed bool
}

// Repair checks the booked nodes of lease id in tx and replaces those that
// failed before the start, as issue 43 asks: a node in maintenance, or one
// deleted (its lease_nodes row gone with it: the reservation has fewer rows
// than its count). Each is replaced by a node that fits the same
// reservation (reservable, its class and traits, not in maintenance, free
// over the lease's window, not booked by the lease already) and, under
// rule required, is in the same topology domain (lease_reservations.domain);
// under preferred that domain first, then the fullest (choose). A node that
// cannot be replaced is kept (a node in maintenance may come back) and the
// lease is flagged: leases.degraded_reason says, per reservation, which
// nodes and why; a check that finds the lease whole again clears it.
//
// It runs on pending leases only (ok false otherwise, or when the lease is
// gone; nothing is changed), under the lease's row lock, and writes in a
// savepoint of tx: the swap is an UPDATE of the lease_nodes row (a missing
// one an INSERT), so the exclusion constraint lease_nodes_no_overlap keeps
// its guarantee; a replacement booked meanwhile by a concurrent admission
// (23P01) is picked again on fresh data, up to MaxAdmitAttempts in all,
// then the error is returned (the caller's transaction rolls back and the
// next check retries). The caller commits tx.
func Repair(ctx context.Context, tx pgx.Tx, id int64) (res RepairResult, ok bool, err error) {
	return repair(ctx, tx, id, nil)
}

// Refused is a booked node of an active lease whose allocation the
// conductors' backend failed at the start (ReplaceRefused).
type Refused struct {
	NodeID int64
	// Why says who refused it (Replacement.Why, degraded_reason):
	// "refused by Ironic".
	Why string
}

// ReplaceRefused replaces, in tx, the nodes of active lease id whose
// allocation through the conductors' backend failed at the start (in
// front of Ironic: Ironic refused the node), as Repair replaces a node
// that failed before the start: by a node that fits the same reservation
// and domain, is free over the lease's window, and is free now
// (metalloc_node_free: available, not in maintenance, no allocation or
// instance); when none is, the node is kept and the lease flagged
// (degraded_reason names the refused nodes left; cleared by a check that
// leaves none). Only the refused nodes the lease still books are looked
// at: its other nodes are its project's. ok is false (nothing changed)
// when the lease is gone or not active. Locks, savepoint and retries as
// Repair's; the caller makes the replacements' allocations and commits
// tx.
func ReplaceRefused(ctx context.Context, tx pgx.Tx, id int64, refused []Refused) (RepairResult, bool, error) {
	why := make(map[int64]string, len(refused))
	for _, r := range refused {
		why[r.NodeID] = r.Why
	}
	return repair(ctx, tx, id, why)
}

// repair is Repair (refused nil: a pending lease) or ReplaceRefused
// (refused: an active lease's refused nodes, each with why).
func repair(ctx context.Context, tx pgx.Tx, id int64, refused map[int64]string) (res RepairResult, ok bool, err error) {
	q := New(tx)
	l, err := q.LockLease(ctx, id)
	if errors.Is(err, pgx.ErrNoRows) {
		return res, false, nil
	} else if err != nil {
		return res, false, err
	}
	if refused == nil && l.State != StatePending || refused != nil && l.State != StateActive {
		return res, false, nil
	}
	rs, err := q.ReservationsOf(ctx, []int64{id})
	if err != nil {
		return res, false, err
	}
	rnd := rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64()))
	for attempt := 1; ; attempt++ {
		res, err = repairOnce(ctx, tx, l, rs, refused, rnd)
		if err == nil {
			return res, true, nil
		}
		if !db.IsExclusionViolation(err, "lease_nodes_no_overlap") || attempt >= MaxAdmitAttempts {
			return res, false, fmt.Errorf("replacing failed nodes of lease %s: %w", l.Uuid, err)
		}
	}
}

// repairOnce is one attempt of repair in a savepoint of tx, rolled back
// when it fails: for a pending lease (refused nil) its nodes in
// maintenance and its missing rows, for an active one its refused nodes.
func repairOnce(ctx context.Context, tx pgx.Tx, l Lease, rs []LeaseReservation, refused map[int64]string,
	rnd *rand.Rand) (RepairResult, error) {
	res := RepairResult{Lease: l}
	if len(rs) > 0 {
		res.ResourceClass = rs[0].ResourceClass
	}
	sp, err := tx.Begin(ctx)
	if err != nil {
		return res, err
	}
	defer func() { _ = sp.Rollback(ctx) }()
	q := New(sp)
	booked, err := q.BookedNodes(ctx, l.ID)
	if err != nil {
		return res, err
	}
	taken := map[int64]bool{}
	byRes := map[int64][]BookedNodesRow{}
	for _, b := range booked {
		taken[b.NodeID] = true
		byRes[b.ReservationID] = append(byRes[b.ReservationID], b)
	}
	var levels []topology.Level
	var reasons []string
	for i, r := range rs {
		var failed []BookedNodesRow
		for _, b := range byRes[r.ID] {
			if _, hit := refused[b.NodeID]; hit || refused == nil && b.Maintenance {
				failed = append(failed, b)
			}
		}
		missing := max(0, int(r.Count)-len(byRes[r.ID]))
		if refused != nil {
			missing = 0 // an active lease's rows are its project's
		}
		if len(failed)+missing == 0 {
			continue
		}
		if levels == nil && r.RuleLevel != nil {
			if levels, err = topology.Load(ctx, sp); err != nil {
				return res, err
			}
		}
		lvl := levelOf(r, levels)
		rows, err := q.MatchingNodes(ctx, MatchingNodesParams{ResourceClass: &r.ResourceClass,
			Traits: nonNil(r.Traits), Forbidden: nonNil(r.ForbiddenTraits), ExcludeLease: l.ID,
			FromTime: l.StartTime, UntilTime: l.EndTime, Sources: levelSources(levels, lvl)})
		if err != nil {
			return res, fmt.Errorf("reading reservable nodes: %w", err)
		}
		nodes := toNodes(rows)
		if refused != nil {
			// The lease runs: a replacement must be free now too.
			if err := onlyFreeNow(ctx, q, nodes); err != nil {
				return res, err
			}
		}
		pk := newPicker(nodes, r, lvl, unix(l.StartTime), unix(l.EndTime), taken, rnd)
		var left []string
		for _, f := range failed {
			why := cmp.Or(refused[f.NodeID], FailedMaintenance)
			n, found := pk.next()
			if !found {
				left = append(left, "node "+cmp.Or(deref(f.Name), f.Uuid.String())+" "+why)
				continue
			}
			if err := lockForBooking(ctx, q, []int64{n.ID}); err != nil {
				return res, err
			}
			if _, err := q.ReplaceLeaseNode(ctx, ReplaceLeaseNodeParams{NewNodeID: n.ID, LeaseID: l.ID, OldNodeID: f.NodeID}); err != nil {
				return res, err
			}
			res.Replaced = append(res.Replaced, replacement(i, f.NodeID, cmp.Or(deref(f.Name), f.Uuid.String()), why, n))
		}
		var resIDs, nodeIDs []int64
		lost := 0
		for range missing {
			n, found := pk.next()
			if !found {
				lost++
				continue
			}
			resIDs, nodeIDs = append(resIDs, r.ID), append(nodeIDs, n.ID)
			res.Replaced = append(res.Replaced, replacement(i, 0, "", FailedDeleted, n))
		}
		if len(nodeIDs) > 0 {
			if err := lockForBooking(ctx, q, nodeIDs); err != nil {
				return res, err
			}
			if err := q.InsertLeaseNodes(ctx, InsertLeaseNodesParams{LeaseID: l.ID, ReservationIds: resIDs,
				NodeIds: nodeIDs, StartTime: l.StartTime, EndTime: l.EndTime}); err != nil {
				return res, err
			}
		}
		if lost == 1 {
			left = append(left, "1 node deleted")
		} else if lost > 1 {
			left = append(left, fmt.Sprintf("%d nodes deleted", lost))
		}
		if len(left) > 0 {
			reasons = append(reasons, pk.unreplaced(i, left))
		}
	}
	var degraded *string
	if len(reasons) > 0 {
		s := strings.Join(reasons, "; ")
		degraded = &s
	}
	res.Changed = deref(degraded) != deref(l.DegradedReason) || (degraded == nil) != (l.DegradedReason == nil)
	if res.Changed || len(res.Replaced) > 0 {
		if err := q.SetLeaseDegraded(ctx, SetLeaseDegradedParams{Reason: degraded, ID: l.ID}); err != nil {
			return res, err
		}
	}
	res.Lease.DegradedReason = degraded
	return res, sp.Commit(ctx)
}

// onlyFreeNow makes the nodes that are not free now (NodesFreeNow)
// ineligible.
func onlyFreeNow(ctx context.Context, q *Queries, nodes []node) error {
	ids := make([]int64, 0, len(nodes))
	for _, n := range nodes {
		if n.Eligible {
			ids = append(ids, n.ID)
		}
	}
	free, err := q.NodesFreeNow(ctx, ids)
	if err != nil {
		return err
	}
	ok := make(map[int64]bool, len(free))
	for _, id := range free {
		ok[id] = true
	}
	for i := range nodes {
		nodes[i].Eligible = nodes[i].Eligible && ok[nodes[i].ID]
	}
	return nil
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

func replacement(i int, oldID int64, old, why string, n node) Replacement {
	u, _ := uuid.Parse(n.UUID)
	return Replacement{Reservation: i + 1, Old: old, OldNodeID: oldID, Why: why, New: cmp.Or(n.Name, n.UUID), NewUUID: u}
}

// picker draws replacements for one reservation, one at a time (so that
// as many as are free are replaced), each then taken.
type picker struct {
	nodes    []node // the reservation's candidates (MatchingNodes)
	inDomain []node // those in its domain (nil: no domain to keep)
	r        LeaseReservation
	res      Reservation // r with its level index (-1: none, or no longer in the topology)
	domain   string      // r's domain, "1/r03" ("" without one)
	from, to int64
	taken    map[int64]bool
	rnd      *rand.Rand
}

// levelOf is the index of r's level in levels (-1: none, or no longer in
// the topology).
func levelOf(r LeaseReservation, levels []topology.Level) int {
	if r.RuleLevel != nil {
		if idx, err := topology.LevelIndex(levels, *r.RuleLevel); err == nil {
			return idx
		}
	}
	return -1
}

// newPicker is the picker of reservation r among nodes (their paths down
// to level index lvl, levelOf).
func newPicker(nodes []node, r LeaseReservation, lvl int, from, to int64,
	taken map[int64]bool, rnd *rand.Rand) *picker {
	p := &picker{nodes: nodes, r: r, from: from, to: to, taken: taken, rnd: rnd,
		res: Reservation{ResourceClass: r.ResourceClass, Traits: r.Traits, Forbidden: r.ForbiddenTraits,
			Count: 1, Rule: r.Rule, LevelIndex: lvl}}
	if r.RuleLevel != nil {
		p.res.Level = *r.RuleLevel
	}
	if p.res.LevelIndex >= 0 && len(r.Domain) > 0 {
		p.domain = strings.Join(r.Domain, "/")
		p.inDomain = []node{}
		for _, n := range nodes {
			if k, in := n.domain(p.res.LevelIndex); in && k == p.domain {
				p.inDomain = append(p.inDomain, n)
			}
		}
	}
	return p
}

// next is a replacement: in the reservation's domain when it has one
// (only there under rule required), else where choose would take one
// node for the reservation; found false when none is free.
func (p *picker) next() (node, bool) {
	one := Reservation{ResourceClass: p.res.ResourceClass, Count: 1, Rule: RuleNone, LevelIndex: -1}
	if p.inDomain != nil {
		if n, ok := p.take(p.inDomain, one); ok {
			return n, true
		}
		if p.res.Rule == RuleRequired {
			return node{}, false
		}
	}
	if p.res.Rule == RulePreferred && p.res.LevelIndex >= 0 {
		return p.take(p.nodes, p.res)
	}
	return p.take(p.nodes, one)
}

func (p *picker) take(nodes []node, r Reservation) (node, bool) {
	pk, ok := choose(nodes, r, p.from, p.to, p.taken, p.rnd)
	if !ok || len(pk.IDs) == 0 {
		return node{}, false
	}
	p.taken[pk.IDs[0]] = true
	for _, n := range nodes {
		if n.ID == pk.IDs[0] {
			return n, true
		}
	}
	return node{}, false
}

// unreplaced words why reservation i keeps the nodes left (its
// degraded_reason): "reservation 1 (2 of gpu, in one rack): node r01-n2 in
// maintenance not replaced: no other reservable node of gpu that fits is
// free in rack 1/r01 from 2030-01-06T09:00:00Z to 2030-01-06T21:00:00Z".
func (p *picker) unreplaced(i int, left []string) string {
	r := p.r
	want := fmt.Sprintf("%d %s", r.Count, topology.Describe(r.ResourceClass, r.Traits))
	if len(r.ForbiddenTraits) > 0 {
		want += " without " + strings.Join(r.ForbiddenTraits, ", ")
	}
	if r.Rule == RuleRequired && r.RuleLevel != nil {
		want += ", in one " + *r.RuleLevel
	}
	where := ""
	if p.domain != "" && r.Rule == RuleRequired {
		where = fmt.Sprintf(" in %s %s", p.res.Level, p.domain)
	}
	return fmt.Sprintf("reservation %d (%s): %s not replaced: no other reservable node of %s that fits is free%s from %s to %s",
		i+1, want, strings.Join(left, ", "), r.ResourceClass, where,
		fromUnix(p.from).Format(time.RFC3339), fromUnix(p.to).Format(time.RFC3339))
}
