package backend

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"go.uber.org/zap"

	"github.com/metalloc/metalloc/db"
)

// Groups is the Ironic backend's GroupBackend: allocation groups placed as
// with the database backend (GroupReserver, topology plans, every member
// or none), each member made in Ironic too before the group is active.
func (b *Ironic) Groups() GroupBackend { return ironicGroups{b} }

type ironicGroups struct{ b *Ironic }

// errGroupChanged: the group changed while its members were being
// settled (grown, deleted): the next round looks again.
var errGroupChanged = errors.New("the allocation group changed meanwhile")

// Process places g (GroupBackend). Each round: the members still
// allocating (held by an earlier round, or by a conductor that stopped) are
// adopted; if there are none, the GroupReserver, in Hold mode, holds a
// plan's nodes for the missing members in one transaction (members
// allocating, the group too). Then every held member is created in Ironic
// at once, its node the only candidate (within the in-flight cap). When
// Ironic has all of them active, the members and then the group are
// activated in one transaction. When Ironic refuses some, all the held
// members are let go (the refused nodes marked unavailable and read again
// from Ironic at once), their copies in Ironic deleted, and the group is
// placed again while a placement fits, up to AllocationTimeout from the
// first round; then it fails with Ironic's reason (a grow: back to active
// with its members). Ironic unreachable: an error,
// the group and its held members staying allocating and owned.
func (ig ironicGroups) Process(ctx context.Context, me int64, g ClaimedGroup) (Outcome, error) {
	b := ig.b
	log := b.log.With(zap.Stringer("allocation_group", g.UUID))
	if err := b.waitUp(ctx); err != nil {
		return Lost, fmt.Errorf("processing allocation group %s: %w", g.UUID, err)
	}
	var lastReason string
	began := time.Now()
	for round := 1; ; round++ {
		ids, err := b.q.AdoptGroupMembers(ctx, AdoptGroupMembersParams{GroupID: g.ID, Me: me})
		if err != nil {
			return Lost, fmt.Errorf("processing allocation group %s: %w", g.UUID, err)
		}
		if len(ids) == 0 {
			out, err := b.groups.Process(ctx, me, g)
			if err != nil || out != Reserved {
				return out, err
			}
			if ids, err = b.q.AdoptGroupMembers(ctx, AdoptGroupMembersParams{GroupID: g.ID, Me: me}); err != nil {
				return Lost, fmt.Errorf("processing allocation group %s: %w", g.UUID, err)
			}
		}
		reqs, err := b.q.IronicRequests(ctx, IronicRequestsParams{Ids: ids, Me: me})
		if err != nil {
			return Lost, fmt.Errorf("processing allocation group %s: %w", g.UUID, err)
		}
		verdicts := make([]verdict, len(reqs))
		errs := make([]error, len(reqs))
		var wg sync.WaitGroup
		for i, r := range reqs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				verdicts[i], errs[i] = b.createMember(ctx, me, r)
			}()
		}
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			if errors.Is(err, errLost) {
				return Lost, nil
			}
			return Lost, fmt.Errorf("processing allocation group %s: %w", g.UUID, err)
		}
		var dropIDs []int64
		var marks []string
		var failed string
		refused := false
		for _, v := range verdicts {
			if v.kind == vActive {
				continue
			}
			refused, lastReason = true, v.reason
			if v.kind == vFailed {
				failed = v.reason
			}
		}
		if !refused {
			out, err := ig.activate(ctx, me, g, reqs)
			if errors.Is(err, errGroupChanged) {
				continue
			}
			return out, err
		}
		for i, r := range reqs {
			dropIDs = append(dropIDs, r.AllocationRequest.ID)
			mark := ""
			if verdicts[i].kind == vRefused {
				mark = fmt.Sprintf("metalloc: Ironic refused a member of allocation group %s on this node (%s); not allocatable until Ironic is read again",
					g.UUID, strings.TrimSuffix(verdicts[i].reason, "."))
			}
			marks = append(marks, mark)
		}
		if err := ig.drop(ctx, g, reqs, dropIDs, marks); err != nil {
			return Lost, fmt.Errorf("processing allocation group %s: %w", g.UUID, err)
		}
		log.Info("Ironic refused members of the allocation group; placing it again", zap.Int("round", round),
			zap.String("reason", lastReason))
		switch {
		case failed != "":
			return b.groups.Fail(ctx, me, g, "Ironic refused a member: "+strings.TrimSuffix(failed, "."))
		case time.Since(began) >= b.cfg.AllocationTimeout:
			return b.groups.Fail(ctx, me, g, fmt.Sprintf("Ironic refused members in each of %d placements, the last time: %s; "+
				"other placements may fit, but %s passed (ironic.allocation_timeout %s)", round, strings.TrimSuffix(lastReason, "."),
				time.Since(began).Round(time.Millisecond), b.cfg.AllocationTimeout))
		}
	}
}

// createMember journals held member r on its node and creates it in
// Ironic (create); errLost when it is no longer this conductor's.
func (b *Ironic) createMember(ctx context.Context, me int64, r IronicRequestsRow) (verdict, error) {
	c := claimedOf(r.AllocationRequest)
	if c.Traits == nil {
		c.Traits = []string{}
	}
	if r.NodeID == nil || r.NodeUuid == nil {
		return verdict{}, errLost
	}
	if r.JournalState == nil || *r.JournalState != journalCreating || r.JournalNode == nil || *r.JournalNode != *r.NodeUuid {
		n, err := b.q.IronicIntent(ctx, IronicIntentParams{ID: c.ID, Me: me, NodeID: *r.NodeID})
		switch {
		case err != nil:
			return verdict{}, err
		case n == 0:
			return verdict{}, errLost
		case n < 0:
			return verdict{}, fmt.Errorf("%w: an earlier allocation with uuid %s is still being deleted in Ironic", ErrIronicUnavailable, c.UUID)
		}
	}
	return b.create(ctx, c, r.Extra, *r.NodeUuid)
}

// activate makes the members in reqs active (Ironic has them active) and,
// once the group has count members, none still allocating, the group too:
// one transaction, members then group. errGroupChanged: the group has more
// to place (grown meanwhile).
func (ig ironicGroups) activate(ctx context.Context, me int64, g ClaimedGroup, reqs []IronicRequestsRow) (Outcome, error) {
	b := ig.b
	ids := make([]int64, len(reqs))
	for i, r := range reqs {
		ids[i] = r.AllocationRequest.ID
	}
	lost, grown := false, false
	err := db.InTx(ctx, b.pool, func(tx pgx.Tx) error {
		q := New(tx)
		lost, grown = false, false
		if _, err := q.ActivateGroupMembers(ctx, ActivateGroupMembersParams{Ids: ids, GroupID: g.ID, Me: me}); err != nil {
			return err
		}
		row, err := q.LockOwnedGroup(ctx, LockOwnedGroupParams{ID: g.ID, Me: me})
		if errors.Is(err, pgx.ErrNoRows) {
			lost = true
			return errGroupLost
		} else if err != nil {
			return err
		}
		pending, err := q.PendingGroupMembers(ctx, g.ID)
		if err != nil {
			return err
		}
		if pending > 0 || row.Members < row.Count {
			grown = true
			return nil // the members stay active; the group has more to place
		}
		return q.ActivateGroup(ctx, ActivateGroupParams{ID: g.ID, First: false})
	})
	switch {
	case lost:
		return Lost, nil
	case err != nil:
		return Lost, fmt.Errorf("processing allocation group %s: %w", g.UUID, err)
	case grown:
		return Lost, errGroupChanged
	}
	b.log.Debug("allocation group active in Ironic and in metalloc", zap.Stringer("allocation_group", g.UUID))
	return Reserved, nil
}

// drop lets go of the held members ids (marks: the node's mark, "" none),
// deletes their copies in Ironic now (the journal's deleter would do it
// too, a little later): the next placement may pick the same nodes; and
// reads the marked nodes again from Ironic (reread).
func (ig ironicGroups) drop(ctx context.Context, g ClaimedGroup, reqs []IronicRequestsRow, ids []int64, marks []string) error {
	b := ig.b
	if _, err := b.q.DropGroupMembers(ctx, DropGroupMembersParams{GroupID: g.ID, Ids: ids, Marks: marks}); err != nil {
		return err
	}
	b.groups.cache.forget(g) // the next placement reads the marks
	var wg sync.WaitGroup
	for i, r := range reqs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			u := r.AllocationRequest.Uuid
			if err := b.deleteCopy(ctx, u); err == nil {
				_, _ = b.q.IronicDeleted(ctx, u)
			}
			if marks[i] != "" && r.NodeUuid != nil {
				b.reread(ctx, *r.NodeUuid)
			}
		}()
	}
	wg.Wait()
	return nil
}
