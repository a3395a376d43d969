package client_test

import (
	"net/url"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/metalloc/metalloc/placement"
	"github.com/metalloc/metalloc/placement/client"
	"github.com/metalloc/metalloc/placement/placementtest"
)

func TestNormalizeClass(t *testing.T) {
	for in, want := range map[string]string{
		"baremetal":       "CUSTOM_BAREMETAL",
		"baremetal.gold":  "CUSTOM_BAREMETAL_GOLD",
		"a--b..c":         "CUSTOM_A_B_C",
		"Large-CPU_2":     "CUSTOM_LARGE_CPU_2",
		"gpu-über-node-1": "CUSTOM_GPU_BER_NODE_1",
	} {
		require.Equal(t, want, client.NormalizeClass(in), in)
	}
}

// TestClientAgainstMetallocPlacement drives every call the conductor makes,
// against the real metalloc-placement handler.
func TestClientAgainstMetallocPlacement(t *testing.T) {
	t.Parallel()
	srv, _ := placementtest.NewServer(t, placement.Options{})
	c := client.New(srv.URL, "admin", 10*time.Second)
	ctx := t.Context()

	rp := uuid.New()
	_, err := c.GetProvider(ctx, rp)
	require.True(t, client.IsNotFound(err), "%v", err)
	p, err := c.CreateProvider(ctx, rp, "node-1")
	require.NoError(t, err)
	require.Equal(t, rp, p.UUID)
	require.Equal(t, rp, p.RootProviderUUID)
	_, err = c.CreateProvider(ctx, uuid.New(), "node-1")
	require.True(t, client.IsConflict(err), "duplicate name: %v", err)

	require.NoError(t, c.EnsureResourceClass(ctx, "CUSTOM_BAREMETAL_GOLD"))
	require.NoError(t, c.EnsureResourceClass(ctx, "CUSTOM_BAREMETAL_GOLD"), "idempotent")
	require.NoError(t, c.EnsureTrait(ctx, "CUSTOM_RAID"))

	inv, err := c.GetInventories(ctx, rp)
	require.NoError(t, err)
	require.Empty(t, inv.Inventories)
	gen, err := c.PutInventories(ctx, rp, client.Inventories{Generation: inv.Generation, Inventories: map[string]client.Inventory{
		"CUSTOM_BAREMETAL_GOLD": {Total: 1, MinUnit: 1, MaxUnit: 1, StepSize: 1, AllocationRatio: 1},
	}})
	require.NoError(t, err)
	require.Greater(t, gen, inv.Generation)
	_, err = c.PutInventories(ctx, rp, client.Inventories{Generation: inv.Generation})
	require.True(t, client.IsConflict(err), "stale generation: %v", err)
	var ce *client.Error
	require.ErrorAs(t, err, &ce)
	require.Equal(t, "placement.concurrent_update", ce.Code)

	tr, err := c.GetTraits(ctx, rp)
	require.NoError(t, err)
	gen, err = c.PutTraits(ctx, rp, tr.Generation, []string{"CUSTOM_RAID", "HW_CPU_X86_AVX2"})
	require.NoError(t, err)
	require.Greater(t, gen, tr.Generation)
	_, err = c.PutTraits(ctx, rp, gen, []string{"NOT_A_TRAIT"})
	require.Equal(t, 400, client.StatusOf(err), "%v", err)

	q := url.Values{"resources": {"CUSTOM_BAREMETAL_GOLD:1"}, "required": {"CUSTOM_RAID"}}
	cands, err := c.AllocationCandidates(ctx, q)
	require.NoError(t, err)
	require.Len(t, cands.AllocationRequests, 1)
	areq := cands.AllocationRequests[0]
	require.Equal(t, int64(1), areq.Allocations[rp].Resources["CUSTOM_BAREMETAL_GOLD"])
	require.Contains(t, cands.ProviderSummaries[rp].Traits, "CUSTOM_RAID")
	require.Equal(t, int64(1), cands.ProviderSummaries[rp].Resources["CUSTOM_BAREMETAL_GOLD"].Capacity)

	consumer := uuid.New()
	claim := client.Claim{Request: areq, ProjectID: "p1", UserID: "u1"}
	require.NoError(t, c.PutAllocations(ctx, consumer, claim))
	err = c.PutAllocations(ctx, uuid.New(), claim)
	require.True(t, client.IsConflict(err), "over capacity: %v", err)
	require.False(t, client.IsConcurrentUpdate(err), "a capacity conflict is no generation conflict: %v", err)
	err = c.PutAllocations(ctx, consumer, claim)
	require.True(t, client.IsConcurrentUpdate(err), "consumer exists, null generation: %v", err)

	got, err := c.GetAllocations(ctx, consumer)
	require.NoError(t, err)
	require.Equal(t, "p1", got.ProjectID)
	require.NotNil(t, got.ConsumerGeneration)
	require.Equal(t, client.ConsumerType, got.ConsumerType)
	claim.ConsumerGeneration = got.ConsumerGeneration
	require.NoError(t, c.PutAllocations(ctx, consumer, claim), "replace at the current generation")

	us, err := c.ProviderUsages(ctx, rp)
	require.NoError(t, err)
	require.Equal(t, int64(1), us.Usages["CUSTOM_BAREMETAL_GOLD"])
	pa, err := c.GetProviderAllocations(ctx, rp)
	require.NoError(t, err)
	require.Contains(t, pa.Allocations, consumer)

	cands, err = c.AllocationCandidates(ctx, q)
	require.NoError(t, err)
	require.Empty(t, cands.AllocationRequests, "the only node is used")

	require.True(t, client.IsConflict(c.DeleteProvider(ctx, rp)), "provider with allocations")
	require.NoError(t, c.DeleteAllocations(ctx, consumer))
	require.True(t, client.IsNotFound(c.DeleteAllocations(ctx, consumer)))
	_, err = c.RenameProvider(ctx, rp, "node-1b")
	require.NoError(t, err)
	list, err := c.ListProviders(ctx, url.Values{"name": {"node-1b"}})
	require.NoError(t, err)
	require.Len(t, list, 1)
	require.NoError(t, c.DeleteProvider(ctx, rp))

	_, err = client.New("http://127.0.0.1:1", "admin", time.Second).GetProvider(ctx, rp)
	require.True(t, client.IsUnreachable(err), "%v", err)
}
