package conductor

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"maps"
	"math"
	"slices"
	"strings"

	"go.uber.org/zap"

	"github.com/metalloc/metalloc/placement/client"
)

// How the tracker writes one node's resource provider: fingerprint,
// inventories (with the allocation-ratio rules), traits.

// fingerprint is a digest of everything the provider of n is written from:
// the endpoint, the node's name, class, traits, availability, generic
// resources and the configured ratios. Usage is not in it: whoever changes
// a provider's usage marks it stale (MarkPlacementStale).
func (t *Tracker) fingerprint(n TrackerNode) string {
	d := struct {
		V         int                `json:"v"`
		Endpoint  string             `json:"endpoint"`
		Name      string             `json:"name"`
		Class     string             `json:"class"`
		Available bool               `json:"available"`
		Traits    []string           `json:"traits"`
		Generic   []int64            `json:"generic,omitempty"`
		Override  map[string]float64 `json:"override"`
		Initial   map[string]float64 `json:"initial"`
	}{1, t.pc.Endpoint(), n.Name, n.ResourceClass, n.Available, n.Traits, nil, t.cfg.Ratios.Override, t.cfg.Ratios.Initial}
	if t.cfg.ReportGenericResources {
		d.Generic = []int64{n.Cpus, n.MemoryMb, n.LocalGb}
	}
	b, _ := json.Marshal(d) // maps marshal with sorted keys
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:16])
}

// syncNode creates or updates n's provider: name, inventories, traits.
func (t *Tracker) syncNode(ctx context.Context, n TrackerNode) (created bool, err error) {
	p, err := t.pc.GetProvider(ctx, n.Uuid)
	switch {
	case client.IsNotFound(err):
		if _, err := t.pc.CreateProvider(ctx, n.Uuid, n.Name); err != nil {
			return false, err
		}
		created = true
	case err != nil:
		return false, err
	case p.Name != n.Name:
		if _, err := t.pc.RenameProvider(ctx, n.Uuid, n.Name); err != nil {
			return false, err
		}
	}
	rc := ""
	if strings.TrimSpace(n.ResourceClass) != "" {
		rc = client.NormalizeClass(n.ResourceClass)
		if _, ok := t.classes.Load(rc); !ok {
			if err := t.pc.EnsureResourceClass(ctx, rc); err != nil {
				return created, err
			}
			t.classes.Store(rc, true)
		}
	}
	if err := t.putInventories(ctx, n, rc); err != nil {
		if client.StatusOf(err) == 400 {
			t.classes.Clear() // a class may have been deleted behind our back
		}
		return created, err
	}
	return created, t.putTraits(ctx, n)
}

// putInventories writes n's inventories if they differ from the provider's,
// with the generation just read, re-reading on a concurrent update.
func (t *Tracker) putInventories(ctx context.Context, n TrackerNode, rc string) error {
	for attempt := 1; ; attempt++ {
		cur, err := t.pc.GetInventories(ctx, n.Uuid)
		if err != nil {
			return err
		}
		var usage map[string]int64
		if !n.Available {
			u, err := t.pc.ProviderUsages(ctx, n.Uuid)
			if err != nil {
				return err
			}
			usage = u.Usages
		}
		want := t.desiredInventories(n, rc, cur.Inventories, usage)
		if maps.Equal(want, cur.Inventories) {
			return nil
		}
		_, err = t.pc.PutInventories(ctx, n.Uuid, client.Inventories{Generation: cur.Generation, Inventories: want})
		if err == nil || !client.IsConcurrentUpdate(err) || attempt >= maxGenerationRetries {
			return err
		}
	}
}

// desiredInventories is the inventory of n's provider given its current
// one (for the ratios to keep) and, for an unavailable node, its usage by
// class (to reserve all that is not used).
func (t *Tracker) desiredInventories(n TrackerNode, rc string, cur map[string]client.Inventory, usage map[string]int64) map[string]client.Inventory {
	want := map[string]client.Inventory{}
	add := func(class string, total, maxUnit int64) {
		var existing *float64
		if e, ok := cur[class]; ok {
			r := e.AllocationRatio
			existing = &r
		}
		ratio := t.cfg.Ratios.For(class, existing)
		var reserved int64
		if !n.Available {
			reserved = FullyReserved(total, usage[class], ratio)
		}
		want[class] = client.Inventory{Total: total, Reserved: reserved, MinUnit: 1, MaxUnit: maxUnit,
			StepSize: 1, AllocationRatio: ratio}
	}
	if rc != "" {
		add(rc, 1, 1)
	}
	if t.cfg.ReportGenericResources {
		for _, g := range []struct {
			class string
			total int64
		}{{ClassVCPU, n.Cpus}, {ClassMemoryMB, n.MemoryMb}, {ClassDiskGB, n.LocalGb}} {
			if g.total > 0 {
				add(g.class, g.total, g.total)
			}
		}
	}
	return want
}

// FullyReserved is the reserved amount that leaves an inventory of total
// units at allocation ratio ratio no free capacity while its allocations
// use used units: Nova's ironic driver reserves the whole total of an
// unavailable node, which Placement (OpenStack's and metalloc's) accepts
// with a warning even when the capacity, int((total − reserved) × ratio),
// falls below the usage; metalloc-placement then counts the inventory as
// over capacity (metric, upgrade check). So it keeps the fewest units whose
// capacity still covers used (used itself at ratio 1.0) and reserves the
// rest; never below 0, total when nothing is used.
func FullyReserved(total, used int64, ratio float64) int64 {
	if used <= 0 {
		return total
	}
	if !validRatio(ratio) {
		ratio = 1
	}
	capOf := func(k int64) int64 { return int64(float64(k) * ratio) }
	k := int64(math.Ceil(float64(used) / ratio))
	for k > 0 && capOf(k-1) >= used {
		k--
	}
	for capOf(k) < used {
		k++
	}
	return max(total-k, 0)
}

// putTraits writes n's traits if they differ from the provider's, with the
// generation just read, re-reading on a concurrent update.
func (t *Tracker) putTraits(ctx context.Context, n TrackerNode) error {
	want, err := t.usableTraits(ctx, n)
	if err != nil {
		return err
	}
	for attempt := 1; ; attempt++ {
		cur, err := t.pc.GetTraits(ctx, n.Uuid)
		if err != nil {
			return err
		}
		have := slices.Clone(cur.Traits)
		slices.Sort(have)
		if slices.Equal(have, want) {
			return nil
		}
		_, err = t.pc.PutTraits(ctx, n.Uuid, cur.Generation, want)
		if client.StatusOf(err) == 400 {
			t.traits.Clear() // a custom trait may have been deleted behind our back
		}
		if err == nil || !client.IsConcurrentUpdate(err) || attempt >= maxGenerationRetries {
			return err
		}
	}
}

// usableTraits is n's traits (sorted) that Placement has: CUSTOM_ ones are
// created with EnsureTrait; others must exist (standard traits). Others are
// skipped with a warning, once per name.
func (t *Tracker) usableTraits(ctx context.Context, n TrackerNode) ([]string, error) {
	out := make([]string, 0, len(n.Traits))
	for _, name := range n.Traits {
		if v, ok := t.traits.Load(name); ok {
			if v.(bool) {
				out = append(out, name)
			}
			continue
		}
		var ok bool
		var err error
		if strings.HasPrefix(name, "CUSTOM_") {
			err = t.pc.EnsureTrait(ctx, name)
			ok = err == nil
			if client.StatusOf(err) == 400 {
				err = nil
			}
		} else {
			ok, err = t.pc.TraitExists(ctx, name)
		}
		if err != nil {
			return nil, err
		}
		if _, loaded := t.traits.LoadOrStore(name, ok); !loaded && !ok {
			t.log.Warn("node trait not accepted by Placement; not mirrored (neither CUSTOM_* nor a standard trait)",
				zap.String("trait", name), zap.Stringer("node", n.Uuid))
		}
		if ok {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out, nil
}
