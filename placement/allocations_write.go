package placement

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"sort"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/metalloc/metalloc/web"
)

// writeAllocations replaces the allocations of every consumer in claims in
// one transaction, as Placement's AllocationList.replace_all with the
// consumer handling of ensure_consumer and update_consumers. notFound words
// the 400 for an unknown resource class.
// Claims of new consumers go through the pipelined claim first
// (claimPipelined), which hands anything unusual back to the general path.
func (h *Handler) writeAllocations(ctx context.Context, v web.Version, claims []claim, notFound func(string) string) error {
	if fastClaimable(claims) {
		if err := h.claimPipelined(ctx, claims); !errors.Is(err, errSlowPath) {
			return err
		}
	}
	return h.runTx(ctx, func(q *Queries) error {
		return writeAllocationsTx(ctx, q, v, claims, notFound, claimHooks{})
	})
}

// claimHooks let the reshaper change inventories inside an allocation
// write: extra providers to lock, a step once every provider is locked and
// the consumers' old allocations are gone, and one after the new
// allocations are written.
type claimHooks struct {
	lock        []uuid.UUID
	afterLock   func(locked map[uuid.UUID]LockClaimProvidersRow) error
	afterInsert func() error
	// allocationBumps, when set, is told the ids of the providers whose
	// generation the allocation write itself increments (those the new
	// allocations name and those an emptied consumer leaves), before the
	// lock targets are added.
	allocationBumps func(ids map[int64]bool)
}

// claimBumpIDs is the set of provider ids whose generation a write of
// claims increments (see writeAllocationsTx); call it before the consumers'
// old allocations are deleted.
func claimBumpIDs(ctx context.Context, q *Queries, claims []claim, consumers []PlacementConsumer,
	fresh []bool, byUUID map[uuid.UUID]int64, named []uuid.UUID) ([]int64, error) {
	seen := map[int64]bool{}
	var ids []int64
	add := func(id int64) {
		if !seen[id] {
			seen[id] = true
			ids = append(ids, id)
		}
	}
	for _, u := range named {
		if id, ok := byUUID[u]; ok {
			add(id)
		}
	}
	for i, cl := range claims {
		if len(cl.resources) > 0 || fresh[i] {
			continue
		}
		old, err := q.ConsumerAllocationProviders(ctx, consumers[i].ID)
		if err != nil {
			return nil, err
		}
		for _, id := range old {
			add(id)
		}
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	return ids, nil
}

// writeAllocationsTx is writeAllocations inside the caller's transaction.
func writeAllocationsTx(ctx context.Context, q *Queries, v web.Version, claims []claim, notFound func(string) string, hooks claimHooks) error {
	sort.Slice(claims, func(i, j int) bool {
		return bytes.Compare(claims[i].consumer[:], claims[j].consumer[:]) < 0
	})
	// Consumers: lock or create (in uuid order), check generations.
	consumers := make([]PlacementConsumer, len(claims))
	fresh := make([]bool, len(claims))
	var existing []int64
	for i, cl := range claims {
		cons, created, err := lockOrCreateConsumer(ctx, q, v, cl)
		if err != nil {
			return err
		}
		consumers[i], fresh[i] = cons, created
		if !created {
			existing = append(existing, cons.ID)
		}
	}

	// Lock, in id order, the providers named in the request and those
	// the consumers allocate from now; named ones must exist (400).
	var wantUUIDs []uuid.UUID
	seen := map[uuid.UUID]bool{}
	for _, cl := range claims {
		for _, r := range cl.resources {
			if !seen[r.provider] {
				seen[r.provider] = true
				wantUUIDs = append(wantUUIDs, r.provider)
			}
		}
	}
	locked, err := q.LockClaimProviders(ctx, LockClaimProvidersParams{
		Uuids: append(append([]uuid.UUID(nil), wantUUIDs...), hooks.lock...), ConsumerIds: existing})
	if err != nil {
		return err
	}
	byUUID := make(map[uuid.UUID]int64, len(locked))
	for _, r := range locked {
		byUUID[r.Uuid] = r.ID
	}
	for _, id := range wantUUIDs {
		if _, ok := byUUID[id]; !ok {
			return web.PlacementErr(http.StatusBadRequest, "",
				"Allocation for resource provider '%s' that does not exist.", id)
		}
	}
	// The generations bumped are, as in Placement's replace_all, those of
	// the providers the new allocations name, of the providers a consumer
	// given no allocations leaves, and (reshaper) of the locked targets;
	// a provider a consumer moves away from keeps its generation.
	bumpIDs, err := claimBumpIDs(ctx, q, claims, consumers, fresh, byUUID, wantUUIDs)
	if err != nil {
		return err
	}
	if hooks.allocationBumps != nil {
		set := make(map[int64]bool, len(bumpIDs))
		for _, id := range bumpIDs {
			set[id] = true
		}
		hooks.allocationBumps(set)
	}
	for _, u := range hooks.lock {
		if id, ok := byUUID[u]; ok && !slices.Contains(bumpIDs, id) {
			bumpIDs = append(bumpIDs, id)
		}
	}
	slices.Sort(bumpIDs)
	if len(existing) > 0 {
		if err := q.DeleteConsumerAllocations(ctx, existing); err != nil {
			return err
		}
	}
	if hooks.afterLock != nil {
		rows := make(map[uuid.UUID]LockClaimProvidersRow, len(locked))
		for _, r := range locked {
			rows[r.Uuid] = r
		}
		if err := hooks.afterLock(rows); err != nil {
			return err
		}
	}

	// Check and write the new allocations, bump the generations.
	if len(wantUUIDs) > 0 {
		ins, err := checkClaims(ctx, q, claims, consumers, byUUID, notFound)
		if err != nil {
			return err
		}
		ins.BumpIds = bumpIDs
		if err := q.InsertAllocationsBump(ctx, ins); err != nil {
			return err
		}
	} else if len(bumpIDs) > 0 {
		if err := q.BumpProviderGenerations(ctx, bumpIDs); err != nil {
			return err
		}
	}
	if hooks.afterInsert != nil {
		if err := hooks.afterInsert(); err != nil {
			return err
		}
	}

	// Consumers: record project, user and type and bump the generation
	// (a new one was inserted that way); a consumer left without
	// allocations goes away.
	for i, cl := range claims {
		cons := consumers[i]
		if len(cl.resources) == 0 {
			if err := q.DeleteConsumer(ctx, cons.ID); err != nil {
				return err
			}
			continue
		}
		if fresh[i] {
			continue
		}
		ct := cons.ConsumerType
		if cl.consumerType != nil {
			ct = cl.consumerType
		}
		if err := q.UpdateConsumer(ctx, UpdateConsumerParams{ID: cons.ID, ProjectID: cl.projectID,
			UserID: cl.userID, ConsumerType: ct}); err != nil {
			return err
		}
	}
	return nil
}

// lockOrCreateConsumer is Placement's ensure_consumer under a row lock: an
// existing consumer is locked and, from 1.28, must have the claimed
// generation; a missing one is created (at generation 1, the generation
// the write leaves it at), which from 1.28 requires a null
// consumer_generation. Both conflicts are 409 placement.concurrent_update.
// A consumer that a racing DELETE /allocations/{consumer} removes between
// the insert (which saw it) and the lock is created after all, up to 3
// tries, then 409 placement.concurrent_update (it answered 500 before:
// TestProviderDeleteRacesAllocationWrites). It reports whether the
// consumer was created.
func lockOrCreateConsumer(ctx context.Context, q *Queries, v web.Version, cl claim) (PlacementConsumer, bool, error) {
	check := func(cons PlacementConsumer) error {
		if v.AtLeast(1, 28) && (cl.generation == nil || *cl.generation != int64(cons.Generation)) {
			got := "None"
			if cl.generation != nil {
				got = fmt.Sprint(*cl.generation)
			}
			return web.PlacementErr(http.StatusConflict, web.PlacementCodeConcurrentUpdate,
				"consumer generation conflict - expected %d but got %s", cons.Generation, got)
		}
		return nil
	}
	lock := func() (PlacementConsumer, bool, error) {
		cons, err := q.LockConsumer(ctx, cl.consumer)
		if err != nil {
			return cons, false, err
		}
		return cons, false, check(cons)
	}
	if v.AtLeast(1, 28) && cl.generation != nil {
		// The client expects an existing consumer.
		cons, created, err := lock()
		if errors.Is(err, pgx.ErrNoRows) {
			return cons, false, web.PlacementErr(http.StatusConflict, web.PlacementCodeConcurrentUpdate,
				"consumer generation conflict - expected null but got %d", *cl.generation)
		}
		return cons, created, err
	}
	for attempt := 1; ; attempt++ {
		cons, err := q.InsertConsumer(ctx, InsertConsumerParams{Uuid: cl.consumer, ProjectID: cl.projectID,
			UserID: cl.userID, ConsumerType: cl.consumerType})
		if err == nil {
			return cons, true, nil
		}
		if !errors.Is(err, pgx.ErrNoRows) {
			return cons, false, err
		}
		// It exists (perhaps created by a racing request, now committed).
		cons, created, err := lock()
		if !errors.Is(err, pgx.ErrNoRows) {
			return cons, created, err
		}
		// A racing DELETE /allocations/{consumer} removed it after the
		// insert saw it: create it, as the request asks, a few times.
		if attempt == 3 {
			return cons, false, web.PlacementErr(http.StatusConflict, web.PlacementCodeConcurrentUpdate,
				"consumer %s changed while it was being written; retry the request", cl.consumer)
		}
	}
}

// invKey identifies one inventory.
type invKey struct {
	provider int64
	class    string
}

// checkClaims checks the claims against the locked providers' inventories
// and current usage, as Placement's _check_capacity_exceeded, and returns
// the allocation rows to insert.
func checkClaims(ctx context.Context, q *Queries, claims []claim, consumers []PlacementConsumer,
	byUUID map[uuid.UUID]int64, notFound func(string) string) (InsertAllocationsBumpParams, error) {
	provs := make([]uuid.UUID, 0, len(byUUID))
	for u := range byUUID {
		provs = append(provs, u)
	}
	rows, err := q.ClaimInventories(ctx, ClaimInventoriesParams{ProviderUuids: provs, ClassNames: claimClasses(claims)})
	if err != nil {
		return InsertAllocationsBumpParams{}, err
	}
	ins, missing, err := evalClaims(claims, consumers, byUUID, rows)
	if missing != nil {
		return ins, missingInventory(ctx, q, claimClasses(claims), *missing, notFound)
	}
	return ins, err
}

// claimClasses lists the classes the claims name, each once.
func claimClasses(claims []claim) []string {
	seen := map[string]bool{}
	var classes []string
	for _, cl := range claims {
		for _, r := range cl.resources {
			if !seen[r.class] {
				seen[r.class] = true
				classes = append(classes, r.class)
			}
		}
	}
	return classes
}

// evalClaims checks the claims against the inventories rows (with their
// current usage) and returns the allocation rows to insert; missing is the
// first claimed amount with no inventory row (left to missingInventory),
// err a constraint or capacity violation (409).
func evalClaims(claims []claim, consumers []PlacementConsumer, byUUID map[uuid.UUID]int64,
	rows []ClaimInventoriesRow) (ins InsertAllocationsBumpParams, missing *claimResource, err error) {
	want := map[invKey]int64{}
	for _, cl := range claims {
		for _, r := range cl.resources {
			want[invKey{byUUID[r.provider], r.class}] += r.used
		}
	}
	invs := make(map[invKey]ClaimInventoriesRow, len(rows))
	for _, r := range rows {
		invs[invKey{r.ResourceProviderID, r.ResourceClass}] = r
	}
	for i, cl := range claims {
		for _, r := range cl.resources {
			key := invKey{byUUID[r.provider], r.class}
			inv, ok := invs[key]
			if !ok {
				return ins, &r, nil
			}
			if r.used < int64(inv.MinUnit) || r.used > int64(inv.MaxUnit) || r.used%int64(inv.StepSize) != 0 {
				return ins, nil, web.PlacementErr(http.StatusConflict, "",
					"Unable to allocate inventory: Unable to create allocation for '%s' on resource provider '%s'. "+
						"The requested amount would violate inventory constraints.", r.class, r.provider)
			}
			capacity := float64(int64(inv.Total)-int64(inv.Reserved)) * inv.AllocationRatio
			if capacity < float64(inv.Used+want[key]) {
				return ins, nil, web.PlacementErr(http.StatusConflict, "",
					"Unable to allocate inventory: Unable to create allocation for '%s' on resource provider '%s'. "+
						"The requested amount would exceed the capacity.", r.class, r.provider)
			}
			ins.ProviderIds = append(ins.ProviderIds, key.provider)
			ins.ConsumerIds = append(ins.ConsumerIds, consumers[i].ID)
			ins.ClassIds = append(ins.ClassIds, inv.ResourceClassID)
			ins.Used = append(ins.Used, r.used)
		}
	}
	return ins, nil, nil
}

// missingInventory explains a claim on an inventory that does not exist:
// an unknown class is 400 ("No such resource class X."), a class the
// provider has no inventory of is 409 (Placement's InvalidInventory).
func missingInventory(ctx context.Context, q *Queries, classes []string, r claimResource, notFound func(string) string) error {
	known, err := q.InvResourceClassesByName(ctx, classes)
	if err != nil {
		return err
	}
	have := map[string]bool{}
	for _, k := range known {
		have[k.Name] = true
	}
	sort.Strings(classes)
	for _, cl := range classes {
		if !have[cl] {
			return web.PlacementErr(http.StatusBadRequest, "", "%s", notFound(fmt.Sprintf("No such resource class %s.", cl)))
		}
	}
	return web.PlacementErr(http.StatusConflict, "",
		"Unable to allocate inventory: Inventory for '%s' on resource provider '%s' invalid.", r.class, r.provider)
}
