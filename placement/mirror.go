package placement

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/metalloc/metalloc/placement/client"
)

// The in-process face of the provider writes, for the placement backend's
// resource tracker on a conductor that shares metalloc-placement's database
// (placement_backend.mode local): the flat providers of many nodes are read
// and written in a few statements of one transaction, with the outcome of
// the API's requests for each (POST /resource_providers at generation 0,
// PUT .../inventories and PUT .../traits each bumping the generation once:
// here a provider that changes is bumped once per mirror), where the
// tracker over HTTP sends up to five requests per node.

// MirrorProvider is the current state of one provider as MirrorRead found
// it.
type MirrorProvider struct {
	UUID uuid.UUID
	// ID is the provider's id; 0 when it does not exist.
	ID int64
	// Busy: the provider exists but another transaction holds its row
	// lock; MirrorApply leaves it alone (try again later).
	Busy bool
	Name string
	// Inventories by resource class, and Usage: the units allocated of each.
	Inventories map[string]client.Inventory
	Usage       map[string]int64
	// Traits, sorted.
	Traits []string
}

// MirrorRead reads, in tx, the providers with these uuids, locking those
// that exist in id order and skipping (Busy) those another transaction
// holds: it never waits for a lock. Every uuid gets an entry.
func MirrorRead(ctx context.Context, tx pgx.Tx, uuids []uuid.UUID) (map[uuid.UUID]*MirrorProvider, error) {
	q := New(tx)
	out := make(map[uuid.UUID]*MirrorProvider, len(uuids))
	for _, u := range uuids {
		out[u] = &MirrorProvider{UUID: u, Inventories: map[string]client.Inventory{}, Usage: map[string]int64{}}
	}
	existing, err := q.MirrorExisting(ctx, uuids)
	if err != nil {
		return nil, fmt.Errorf("reading providers: %w", err)
	}
	if len(existing) == 0 {
		return out, nil
	}
	ids := make([]int64, len(existing))
	for i, r := range existing {
		ids[i] = r.ID
		out[r.Uuid].ID, out[r.Uuid].Busy = r.ID, true
	}
	locked, err := q.MirrorLock(ctx, ids)
	if err != nil {
		return nil, fmt.Errorf("locking providers: %w", err)
	}
	byID := make(map[int64]*MirrorProvider, len(locked))
	lockedIDs := make([]int64, len(locked))
	for i, r := range locked {
		p := out[r.Uuid]
		p.Busy, p.Name = false, r.Name
		byID[r.ID] = p
		lockedIDs[i] = r.ID
	}
	invs, err := q.MirrorInventories(ctx, lockedIDs)
	if err != nil {
		return nil, fmt.Errorf("reading inventories: %w", err)
	}
	for _, r := range invs {
		p := byID[r.ResourceProviderID]
		p.Inventories[r.ResourceClass] = client.Inventory{Total: int64(r.Total), Reserved: int64(r.Reserved),
			MinUnit: int64(r.MinUnit), MaxUnit: int64(r.MaxUnit), StepSize: int64(r.StepSize), AllocationRatio: r.AllocationRatio}
		if r.Used > 0 {
			p.Usage[r.ResourceClass] = r.Used
		}
	}
	traits, err := q.MirrorTraits(ctx, lockedIDs)
	if err != nil {
		return nil, fmt.Errorf("reading traits: %w", err)
	}
	for _, r := range traits {
		p := byID[r.ResourceProviderID]
		p.Traits = append(p.Traits, r.Name)
	}
	for _, p := range byID {
		slices.Sort(p.Traits)
	}
	return out, nil
}

// MirrorWrite is the wanted state of one flat root provider.
type MirrorWrite struct {
	UUID uuid.UUID
	Name string
	// Inventories by resource class; a class not known yet must be a
	// custom one (CUSTOM_*), which is created.
	Inventories map[string]client.Inventory
	// Traits: CUSTOM_ ones are created when missing; others that
	// Placement does not know are left out (MirrorResult.UnknownTraits).
	Traits []string
}

// MirrorResult is what MirrorApply did.
type MirrorResult struct {
	// Created and Changed list the providers created and those written;
	// Unchanged those that already were as wanted; Busy those skipped
	// because another transaction held them.
	Created, Changed, Unchanged, Busy []uuid.UUID
	// Failed are the providers not written and why: their name belongs to
	// another provider (Placement's 409 on create or rename), or an
	// inventory to remove is in use (409 placement.inventory.inuse).
	Failed map[uuid.UUID]error
	// UnknownTraits are non-custom trait names Placement does not know,
	// left out of every provider.
	UnknownTraits []string
}

// MirrorApply writes, in tx, each of ws over its current state read by
// MirrorRead in the same transaction (every ws entry must have one): it
// creates missing providers, renames, replaces inventories and traits
// that differ, and bumps the generation of every provider it changed.
// What one provider cannot take is reported in Failed and does not
// affect the others; an error is a database error (tx must be rolled
// back).
func MirrorApply(ctx context.Context, tx pgx.Tx, cur map[uuid.UUID]*MirrorProvider, ws []MirrorWrite) (MirrorResult, error) {
	q := New(tx)
	res := MirrorResult{Failed: map[uuid.UUID]error{}}
	names := make(map[uuid.UUID]string, len(ws))
	for _, w := range ws {
		names[w.UUID] = w.Name
	}

	// Classes and traits first: the writes below join them by name.
	var classes, traitNames []string
	for _, w := range ws {
		for c := range w.Inventories {
			if strings.HasPrefix(c, "CUSTOM_") && !slices.Contains(classes, c) {
				classes = append(classes, c)
			}
		}
		for _, t := range w.Traits {
			if !slices.Contains(traitNames, t) {
				traitNames = append(traitNames, t)
			}
		}
	}
	if len(classes) > 0 {
		if err := q.MirrorEnsureClasses(ctx, classes); err != nil {
			return res, fmt.Errorf("creating resource classes: %w", err)
		}
	}
	known := map[string]bool{}
	if len(traitNames) > 0 {
		var custom []string
		for _, t := range traitNames {
			if strings.HasPrefix(t, "CUSTOM_") {
				custom = append(custom, t)
			}
		}
		if len(custom) > 0 {
			if err := q.MirrorEnsureTraits(ctx, custom); err != nil {
				return res, fmt.Errorf("creating traits: %w", err)
			}
		}
		names, err := q.MirrorKnownTraits(ctx, traitNames)
		if err != nil {
			return res, fmt.Errorf("reading traits: %w", err)
		}
		for _, n := range names {
			known[n] = true
		}
		for _, t := range traitNames {
			if !known[t] {
				res.UnknownTraits = append(res.UnknownTraits, t)
			}
		}
	}

	// Create the missing providers.
	var create MirrorCreateParams
	for _, w := range ws {
		if p := cur[w.UUID]; p.ID == 0 {
			gen := int32(0)
			if len(w.Inventories) > 0 || len(w.Traits) > 0 {
				gen = 1 // written below, not bumped
			}
			create.Uuids, create.Names = append(create.Uuids, w.UUID), append(create.Names, w.Name)
			create.Generations = append(create.Generations, gen)
		}
	}
	created := map[uuid.UUID]bool{}
	if len(create.Uuids) > 0 {
		rows, err := q.MirrorCreate(ctx, create)
		if err != nil {
			return res, fmt.Errorf("creating providers: %w", err)
		}
		for _, r := range rows {
			cur[r.Uuid].ID, cur[r.Uuid].Name = r.ID, names[r.Uuid]
			created[r.Uuid] = true
		}
	}

	// Renames whose name another provider has fail, as the API's 409.
	var renIDs []int64
	var renNames []string
	for _, w := range ws {
		if p := cur[w.UUID]; p.ID != 0 && !p.Busy && !created[w.UUID] && p.Name != w.Name {
			renIDs, renNames = append(renIDs, p.ID), append(renNames, w.Name)
		}
	}
	taken := map[int64]bool{}
	if len(renIDs) > 0 {
		rows, err := q.MirrorNamesTaken(ctx, MirrorNamesTakenParams{Ids: renIDs, Names: renNames})
		if err != nil {
			return res, fmt.Errorf("checking provider names: %w", err)
		}
		for _, r := range rows {
			taken[r.ID] = true
		}
	}

	var rename MirrorRenameParams
	var delInv MirrorDeleteInventoriesParams
	var setInv MirrorSetInventoriesParams
	var delTraits MirrorDeleteTraitsParams
	var addTraits MirrorAddTraitsParams
	var bump []int64
	for _, w := range ws {
		p := cur[w.UUID]
		switch {
		case p.Busy:
			res.Busy = append(res.Busy, w.UUID)
			continue
		case p.ID == 0:
			res.Failed[w.UUID] = fmt.Errorf("conflicting resource provider uuid: %s, name: %s already exists", w.UUID, w.Name)
			continue
		case taken[p.ID]:
			res.Failed[w.UUID] = fmt.Errorf("resource provider name %q is taken by another provider", w.Name)
			continue
		}
		var removed []string
		for c := range p.Inventories {
			if _, ok := w.Inventories[c]; !ok {
				removed = append(removed, c)
			}
		}
		slices.Sort(removed)
		var inUse []string
		for _, c := range removed {
			if p.Usage[c] > 0 {
				inUse = append(inUse, c)
			}
		}
		if len(inUse) > 0 {
			res.Failed[w.UUID] = fmt.Errorf("inventory for '%s' on resource provider '%s' in use", strings.Join(inUse, ", "), w.UUID)
			continue
		}
		changed := false
		if !created[w.UUID] && p.Name != w.Name {
			rename.Ids, rename.Names = append(rename.Ids, p.ID), append(rename.Names, w.Name)
			changed = true
		}
		for _, c := range removed {
			delInv.Ids, delInv.Classes = append(delInv.Ids, p.ID), append(delInv.Classes, c)
			changed = true
		}
		for _, c := range slices.Sorted(maps.Keys(w.Inventories)) {
			inv := w.Inventories[c]
			if old, ok := p.Inventories[c]; ok && old == inv {
				continue
			}
			setInv.Ids, setInv.Classes = append(setInv.Ids, p.ID), append(setInv.Classes, c)
			setInv.Totals, setInv.Reserveds = append(setInv.Totals, int32(inv.Total)), append(setInv.Reserveds, int32(inv.Reserved))
			setInv.MinUnits, setInv.MaxUnits = append(setInv.MinUnits, int32(inv.MinUnit)), append(setInv.MaxUnits, int32(inv.MaxUnit))
			setInv.StepSizes, setInv.Ratios = append(setInv.StepSizes, int32(inv.StepSize)), append(setInv.Ratios, inv.AllocationRatio)
			changed = true
		}
		want := make([]string, 0, len(w.Traits))
		for _, t := range w.Traits {
			if known[t] {
				want = append(want, t)
			}
		}
		for _, t := range p.Traits {
			if !slices.Contains(want, t) {
				delTraits.Ids, delTraits.Names = append(delTraits.Ids, p.ID), append(delTraits.Names, t)
				changed = true
			}
		}
		for _, t := range want {
			if !slices.Contains(p.Traits, t) {
				addTraits.Ids, addTraits.Names = append(addTraits.Ids, p.ID), append(addTraits.Names, t)
				changed = true
			}
		}
		switch {
		case created[w.UUID]:
			res.Created = append(res.Created, w.UUID)
		case changed:
			res.Changed = append(res.Changed, w.UUID)
		default:
			res.Unchanged = append(res.Unchanged, w.UUID)
		}
		if changed && !created[w.UUID] {
			bump = append(bump, p.ID)
		}
	}
	steps := []struct {
		what string
		n    int
		run  func() error
	}{
		{"renaming providers", len(rename.Ids), func() error { return q.MirrorRename(ctx, rename) }},
		{"deleting inventories", len(delInv.Ids), func() error { return q.MirrorDeleteInventories(ctx, delInv) }},
		{"writing inventories", len(setInv.Ids), func() error { return q.MirrorSetInventories(ctx, setInv) }},
		{"deleting traits", len(delTraits.Ids), func() error { return q.MirrorDeleteTraits(ctx, delTraits) }},
		{"adding traits", len(addTraits.Ids), func() error { return q.MirrorAddTraits(ctx, addTraits) }},
		{"bumping generations", len(bump), func() error { return q.MirrorBump(ctx, bump) }},
	}
	for _, s := range steps {
		if s.n == 0 {
			continue
		}
		if err := s.run(); err != nil {
			return res, fmt.Errorf("%s: %w", s.what, err)
		}
	}
	return res, nil
}
