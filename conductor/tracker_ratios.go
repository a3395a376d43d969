package conductor

import (
	"context"
	"fmt"
	"slices"

	"github.com/google/uuid"
	"go.uber.org/zap"

	"github.com/metalloc/metalloc/placement/client"
)

// ZeroRatio is an inventory of a mirrored provider whose allocation_ratio
// is 0.0 or missing (it decodes as 0): what upgrade-check warns about and
// the online data migration repairs.
type ZeroRatio struct {
	Provider      uuid.UUID
	ResourceClass string
}

// FindZeroRatios lists the inventories with a 0.0 or missing
// allocation_ratio of every provider the tracker mirrors (placement_synced
// rows and nodes; providers missing in Placement are skipped), in provider
// then class order: with Placement on this database in one statement,
// otherwise one GET per provider.
func (t *Tracker) FindZeroRatios(ctx context.Context) ([]ZeroRatio, error) {
	if t.local(ctx) {
		// One statement, not a request per provider (1,000,000 of them).
		rows, err := t.q.ZeroRatioInventories(ctx)
		if err != nil {
			return nil, err
		}
		out := make([]ZeroRatio, len(rows))
		for i, r := range rows {
			out[i] = ZeroRatio(r)
		}
		return out, nil
	}
	ids, err := t.q.PlacementProviderUUIDs(ctx)
	if err != nil {
		return nil, err
	}
	var out []ZeroRatio
	for _, id := range ids {
		inv, err := t.pc.GetInventories(ctx, id)
		if client.IsNotFound(err) {
			continue
		}
		if err != nil {
			return out, err
		}
		for _, rc := range zeroClasses(inv) {
			out = append(out, ZeroRatio{Provider: id, ResourceClass: rc})
		}
	}
	return out, nil
}

func zeroClasses(inv *client.Inventories) []string {
	var out []string
	for rc, i := range inv.Inventories {
		if !validRatio(i.AllocationRatio) {
			out = append(out, rc)
		}
	}
	slices.Sort(out)
	return out
}

// RepairZeroRatios is the online data migration of the
// initial-allocation-ratios spec: every inventory FindZeroRatios would list
// gets the configured override if one is set, else the initial ratio
// (Ratios.Repair), through a generation-checked PUT (retried on a
// concurrent update). It returns how many inventories it found and how
// many it repaired; err reports the first failure (the rest is still
// attempted unless Placement is unreachable).
func (t *Tracker) RepairZeroRatios(ctx context.Context) (found, repaired int, err error) {
	var ids []uuid.UUID
	if t.local(ctx) {
		// Only the providers FindZeroRatios finds go through the API.
		zs, err := t.FindZeroRatios(ctx)
		if err != nil {
			return 0, 0, err
		}
		for _, z := range zs {
			if !slices.Contains(ids, z.Provider) {
				ids = append(ids, z.Provider)
			}
		}
	} else if ids, err = t.q.PlacementProviderUUIDs(ctx); err != nil {
		return 0, 0, err
	}
	var firstErr error
	for _, id := range ids {
		f, r, err := t.repairProvider(ctx, id)
		found += f
		repaired += r
		if err != nil {
			if firstErr == nil {
				firstErr = fmt.Errorf("provider %s: %w", id, err)
			}
			if client.IsUnreachable(err) || ctx.Err() != nil {
				break
			}
		}
	}
	return found, repaired, firstErr
}

func (t *Tracker) repairProvider(ctx context.Context, id uuid.UUID) (found, repaired int, err error) {
	for attempt := 1; ; attempt++ {
		inv, err := t.pc.GetInventories(ctx, id)
		if client.IsNotFound(err) {
			return 0, 0, nil
		}
		if err != nil {
			return found, 0, err
		}
		bad := zeroClasses(inv)
		found = len(bad)
		if found == 0 {
			return 0, 0, nil
		}
		for _, rc := range bad {
			i := inv.Inventories[rc]
			i.AllocationRatio = t.cfg.Ratios.Repair(rc)
			inv.Inventories[rc] = i
		}
		_, err = t.pc.PutInventories(ctx, id, *inv)
		if err == nil {
			t.log.Info("repaired allocation ratios", zap.Stringer("provider", id), zap.Strings("classes", bad))
			return found, found, nil
		}
		if !client.IsConcurrentUpdate(err) || attempt >= maxGenerationRetries {
			return found, 0, err
		}
	}
}
