package backend

import (
	"context"
	"fmt"
	"net/url"
	"slices"
	"strings"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"go.uber.org/zap"

	"github.com/metalloc/metalloc/placement"
	"github.com/metalloc/metalloc/placement/client"
)

// GroupOffer is what Placement can give an allocation group: for each
// provider (= node, same uuid) offering one unit of the group's resource
// class with its traits, the allocation request to claim it with (one of
// GET /allocation_candidates' answers).
type GroupOffer map[uuid.UUID]client.AllocationRequest

// GroupMember is one member of an allocation group to claim in Placement:
// its allocation uuid (the Placement consumer) and its node (the provider).
type GroupMember struct {
	Consumer, Node uuid.UUID
}

// GroupOffers asks Placement once, GET /allocation_candidates with
// resources=CUSTOM_<CLASS>:1 and required=<traits> and no limit (every
// candidate of the fleet), which providers can serve a group of resource
// class rc with traits: in mode local through metalloc-placement's search
// in-process, otherwise over HTTP. Errors: a *client.Error (a 400 for an
// unknown trait or class; client.IsUnreachable for an outage) or the
// database's.
func (p *Placement) GroupOffers(ctx context.Context, rc string, traits []string) (GroupOffer, error) {
	class := client.NormalizeClass(rc)
	ts := slices.Clone(traits)
	slices.Sort(ts)
	ts = slices.Compact(ts)
	q := url.Values{"resources": {class + ":1"}}
	if len(ts) > 0 {
		q.Set("required", strings.Join(ts, ","))
	}
	var cands *client.Candidates
	var err error
	if p.Local(ctx) {
		cands, err = p.localCands.AllocationCandidates(ctx, q) // no limit: not cached
	} else {
		cands, err = p.pc.AllocationCandidates(ctx, q)
	}
	if err != nil {
		return nil, err
	}
	offer := make(GroupOffer, len(cands.AllocationRequests))
	for _, ar := range cands.AllocationRequests {
		for rp, res := range ar.Allocations {
			if res.Resources[class] > 0 {
				if _, seen := offer[rp]; !seen {
					offer[rp] = ar
				}
				break
			}
		}
	}
	return offer, nil
}

// ClaimGroup claims every member at once in Placement, all or none, for
// project owner (PlacementUserID when nil or empty, as single
// allocations), each with its node's allocation request from offer; every
// claim is logged in placement_claims, so that the resource tracker
// removes the Placement allocations once the members are released (as for
// single allocations).
//
// With tx (mode local: Local) the claim log and the allocations are
// written in tx (placement.ClaimManyTx), the transaction that holds the
// members' nodes locked and inserts the members: rolling it back undoes
// them. Without tx (over HTTP) the claim log is written first, then one
// POST /allocations names every member (consumer_generation null: new
// consumers), as a single allocation's claim log and PUT precede its
// reservation; the caller reserves the nodes afterwards and calls
// UnclaimGroup if that fails.
//
// Errors: a *client.Error 409 (client.IsConflict) when some node's capacity
// is taken in Placement (try another plan; nothing was written);
// client.IsUnreachable for an outage; another *client.Error when Placement
// refused the request; the database's otherwise.
func (p *Placement) ClaimGroup(ctx context.Context, tx pgx.Tx, owner *string, offer GroupOffer, members []GroupMember) error {
	project := projectOf(Claimed{Owner: owner})
	consumers := make([]uuid.UUID, len(members))
	nodes := make([]uuid.UUID, len(members))
	for i, m := range members {
		consumers[i], nodes[i] = m.Consumer, m.Node
		if _, ok := offer[m.Node]; !ok {
			return fmt.Errorf("node %s was not offered by Placement", m.Node)
		}
	}
	log := RecordPlacementClaimsParams{ConsumerUuids: consumers, ProviderUuids: nodes}
	if tx != nil {
		if err := p.q.WithTx(tx).RecordPlacementClaims(ctx, log); err != nil {
			return err
		}
		cs := make([]placement.LocalClaim, len(members))
		for i, m := range members {
			cs[i] = placement.LocalClaim{Consumer: m.Consumer, ProjectID: project, UserID: PlacementUserID,
				ConsumerType: client.ConsumerType, Request: offer[m.Node]}
		}
		return placement.ClaimManyTx(ctx, tx, cs)
	}
	if err := p.q.RecordPlacementClaims(ctx, log); err != nil {
		return fmt.Errorf("logging the Placement claims: %w", err)
	}
	body := make(map[uuid.UUID]client.Claim, len(members))
	for _, m := range members {
		body[m.Consumer] = client.Claim{Request: offer[m.Node], ProjectID: project, UserID: PlacementUserID}
	}
	if err := p.pc.PostAllocations(ctx, body); err != nil {
		if !client.IsUnreachable(err) {
			// Nothing was written in Placement: drop the log entries.
			// (Unreachable: the tracker checks later.)
			p.forgetGroup(ctx, consumers)
		}
		return err
	}
	return nil
}

// UnclaimGroup removes the members' Placement allocations that ClaimGroup
// wrote over HTTP when their reservation did not commit
// (DELETE /allocations/{consumer} for each; a 404 is fine), and their claim
// log entries. What cannot be removed now stays in the claim log for the
// resource tracker.
func (p *Placement) UnclaimGroup(ctx context.Context, members []GroupMember) {
	ctx = context.WithoutCancel(ctx)
	var gone []uuid.UUID
	for _, m := range members {
		if err := p.unclaim(ctx, Claimed{UUID: m.Consumer}); err != nil {
			p.log.Warn("could not remove a group member's Placement allocation; the resource tracker will",
				zap.Stringer("allocation", m.Consumer), zap.Error(err))
			continue
		}
		gone = append(gone, m.Consumer)
	}
	p.forgetGroup(ctx, gone)
}

// forgetGroup removes the claim log entries of consumers (Placement holds
// nothing for them).
func (p *Placement) forgetGroup(ctx context.Context, consumers []uuid.UUID) {
	for _, c := range consumers {
		p.forget(ctx, Claimed{UUID: c}, nil)
	}
}
