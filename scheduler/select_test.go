package scheduler

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/metalloc/metalloc/db/dbtest"
	"github.com/metalloc/metalloc/placement"
	"github.com/metalloc/metalloc/placement/client"
	"github.com/metalloc/metalloc/placement/placementtest"
)

// placementClient starts an in-process metalloc-placement on a fresh
// database and returns a client of it.
func placementClient(t *testing.T) *client.Client {
	t.Helper()
	pool := dbtest.New(t)
	srv := placementtest.NewServerOn(t, pool, placement.Options{})
	return client.New(srv.URL, "admin", 10*time.Second)
}

// provider creates a node's provider as the resource tracker would: uuid =
// node uuid, one unit of CUSTOM_<RC>, the node's traits.
func provider(t *testing.T, pc *client.Client, name, rc string, traits ...string) uuid.UUID {
	t.Helper()
	ctx := context.Background()
	id := uuid.New()
	p, err := pc.CreateProvider(ctx, id, name)
	require.NoError(t, err)
	class := client.NormalizeClass(rc)
	require.NoError(t, pc.EnsureResourceClass(ctx, class))
	gen, err := pc.PutInventories(ctx, id, client.Inventories{Generation: p.Generation, Inventories: map[string]client.Inventory{
		class: {Total: 1, MinUnit: 1, MaxUnit: 1, StepSize: 1, AllocationRatio: 1},
	}})
	require.NoError(t, err)
	if len(traits) > 0 {
		for _, tr := range traits {
			require.NoError(t, pc.EnsureTrait(ctx, tr))
		}
		_, err = pc.PutTraits(ctx, id, gen, traits)
		require.NoError(t, err)
	}
	return id
}

// dropFilter rules out the nodes in drop.
type dropFilter map[uuid.UUID]bool

func (d dropFilter) FitNodes(_ context.Context, _ RequestSpec, nodes []uuid.UUID) ([]uuid.UUID, error) {
	return slices.DeleteFunc(slices.Clone(nodes), func(n uuid.UUID) bool { return d[n] }), nil
}

// checkSelection checks that s claims its node with one unit of class.
func checkSelection(t *testing.T, s Selection, class string) {
	t.Helper()
	require.Equal(t, SelectionVersion, s.Version)
	require.Equal(t, "conductor-a", s.ServiceHost)
	require.Equal(t, s.ComputeNodeUUID.String(), s.NodeName)
	require.Equal(t, client.Microversion, s.AllocationRequestVersion)
	require.Nil(t, s.CellUUID)
	require.Nil(t, s.Limits)
	req, err := s.Request()
	require.NoError(t, err)
	require.Equal(t, map[uuid.UUID]client.ProviderResources{
		s.ComputeNodeUUID: {Resources: client.Resources{class: 1}},
	}, req.Allocations)
}

func nodesOf(list []Selection) []uuid.UUID {
	out := make([]uuid.UUID, len(list))
	for i, s := range list {
		out[i] = s.ComputeNodeUUID
	}
	return out
}

func TestSelectDestinations(t *testing.T) {
	t.Parallel()
	pc := placementClient(t)
	ctx := context.Background()
	var gold, fast []uuid.UUID
	for i := range 6 {
		var traits []string
		if i < 3 {
			traits = []string{"CUSTOM_FAST"}
		}
		id := provider(t, pc, fmt.Sprintf("gold-%d", i), "baremetal.gold", traits...)
		gold = append(gold, id)
		if i < 3 {
			fast = append(fast, id)
		}
	}
	silver := []uuid.UUID{provider(t, pc, "silver-0", "silver"), provider(t, pc, "silver-1", "silver")}
	s := &Scheduler{Client: pc, Hostname: "conductor-a", MaxAlternates: 2}
	const goldClass = "CUSTOM_BAREMETAL_GOLD"

	t.Run("chosen and alternates", func(t *testing.T) {
		out, err := s.SelectDestinations(ctx, RequestSpec{InstanceUUID: uuid.New(), ResourceClass: "baremetal.gold"}, 2)
		require.NoError(t, err)
		require.Len(t, out, 2)
		seen := map[uuid.UUID]bool{}
		for _, list := range out {
			require.Len(t, list, 3)
			for _, sel := range list {
				checkSelection(t, sel, goldClass)
				require.Contains(t, gold, sel.ComputeNodeUUID)
			}
			require.False(t, seen[list[0].ComputeNodeUUID], "chosen twice")
			seen[list[0].ComputeNodeUUID] = true
		}
		// Alternates are never a chosen node, and with 4 left they do not
		// overlap.
		alts := map[uuid.UUID]bool{}
		for _, list := range out {
			for _, sel := range list[1:] {
				require.False(t, seen[sel.ComputeNodeUUID], "alternate is a chosen node")
				require.False(t, alts[sel.ComputeNodeUUID], "alternate shared")
				alts[sel.ComputeNodeUUID] = true
			}
		}
	})

	t.Run("allocation request claims", func(t *testing.T) {
		out, err := s.SelectDestinations(ctx, RequestSpec{ResourceClass: "silver"}, 1)
		require.NoError(t, err)
		require.Len(t, out[0], 2) // one alternate left
		consumer := uuid.New()
		req, err := out[0][0].Request()
		require.NoError(t, err)
		require.NoError(t, pc.PutAllocations(ctx, consumer, client.Claim{Request: req, ProjectID: "p", UserID: "u"}))
		// The other silver node is all that is left now.
		out, err = s.SelectDestinations(ctx, RequestSpec{ResourceClass: "silver"}, 1)
		require.NoError(t, err)
		require.Len(t, out[0], 1)
		_, taken := req.Allocations[out[0][0].ComputeNodeUUID]
		require.False(t, taken, "the claimed node is offered again")
		_, err = s.SelectDestinations(ctx, RequestSpec{ResourceClass: "silver"}, 2)
		var nvh *NoValidHostError
		require.ErrorAs(t, err, &nvh)
		require.True(t, errors.Is(err, ErrNoValidHost))
		require.Equal(t, 1, nvh.Returned)
		require.NoError(t, pc.DeleteAllocations(ctx, consumer))
		require.Len(t, silver, 2)
	})

	t.Run("traits", func(t *testing.T) {
		for range 5 {
			out, err := s.SelectDestinations(ctx, RequestSpec{ResourceClass: "baremetal.gold", Traits: []string{"CUSTOM_FAST"}}, 1)
			require.NoError(t, err)
			require.Len(t, out[0], 3)
			require.ElementsMatch(t, fast, nodesOf(out[0]))
		}
	})

	t.Run("one candidate node", func(t *testing.T) {
		out, err := s.SelectDestinations(ctx, RequestSpec{ResourceClass: "baremetal.gold", CandidateNodes: gold[4:5]}, 1)
		require.NoError(t, err)
		require.Equal(t, gold[4:5], nodesOf(out[0]))
		checkSelection(t, out[0][0], goldClass)
		// A candidate of another class is no valid host.
		_, err = s.SelectDestinations(ctx, RequestSpec{ResourceClass: "baremetal.gold", CandidateNodes: silver[:1]}, 1)
		require.ErrorIs(t, err, ErrNoValidHost)
	})

	t.Run("candidate nodes", func(t *testing.T) {
		want := []uuid.UUID{gold[0], gold[3], gold[5], silver[0]}
		out, err := s.SelectDestinations(ctx, RequestSpec{ResourceClass: "baremetal.gold", CandidateNodes: want}, 1)
		require.NoError(t, err)
		require.ElementsMatch(t, want[:3], nodesOf(out[0]))
		out, err = s.SelectDestinations(ctx, RequestSpec{ResourceClass: "baremetal.gold", CandidateNodes: want,
			Traits: []string{"CUSTOM_FAST"}}, 1)
		require.NoError(t, err)
		require.Equal(t, []uuid.UUID{gold[0]}, nodesOf(out[0]))
	})

	t.Run("database filter", func(t *testing.T) {
		f := &Scheduler{Client: pc, Hostname: "conductor-a", MaxAlternates: 5,
			Filter: dropFilter{gold[0]: true, gold[1]: true}}
		out, err := f.SelectDestinations(ctx, RequestSpec{ResourceClass: "baremetal.gold"}, 1)
		require.NoError(t, err)
		require.ElementsMatch(t, gold[2:], nodesOf(out[0]))
	})

	t.Run("no alternates", func(t *testing.T) {
		n := &Scheduler{Client: pc, Hostname: "conductor-a"}
		out, err := n.SelectDestinations(ctx, RequestSpec{ResourceClass: "baremetal.gold"}, 3)
		require.NoError(t, err)
		for _, list := range out {
			require.Len(t, list, 1)
		}
	})

	t.Run("unknown trait or class", func(t *testing.T) {
		_, err := s.SelectDestinations(ctx, RequestSpec{ResourceClass: "baremetal.gold", Traits: []string{"CUSTOM_NOPE"}}, 1)
		require.ErrorIs(t, err, ErrInvalidRequest)
		require.ErrorContains(t, err, "CUSTOM_NOPE")
		_, err = s.SelectDestinations(ctx, RequestSpec{ResourceClass: "bronze"}, 1)
		require.ErrorIs(t, err, ErrInvalidRequest)
		require.ErrorContains(t, err, "CUSTOM_BRONZE")
	})

	t.Run("unreachable", func(t *testing.T) {
		u := &Scheduler{Client: client.New("http://127.0.0.1:1", "admin", time.Second), Hostname: "conductor-a"}
		_, err := u.SelectDestinations(ctx, RequestSpec{ResourceClass: "baremetal.gold"}, 1)
		require.True(t, client.IsUnreachable(err), "%v", err)
	})

	t.Run("limit", func(t *testing.T) {
		require.Equal(t, 50, s.Limit(1))
		require.Equal(t, 60, s.Limit(2))
	})
}

// TestSelectDestinationsSpreads checks the shuffle: repeated selections do
// not always choose the same node.
func TestSelectDestinationsSpreads(t *testing.T) {
	t.Parallel()
	pc := placementClient(t)
	for i := range 8 {
		provider(t, pc, fmt.Sprintf("n-%d", i), "gold")
	}
	s := &Scheduler{Client: pc, Hostname: "conductor-a", MaxAlternates: 2}
	chosen := map[uuid.UUID]int{}
	for range 40 {
		out, err := s.SelectDestinations(context.Background(), RequestSpec{ResourceClass: "gold"}, 1)
		require.NoError(t, err)
		chosen[out[0][0].ComputeNodeUUID]++
	}
	require.Greater(t, len(chosen), 3, "%v", chosen)
}

// TestSelectDestinationsBeyondLimit checks that a filter keeping only
// nodes the limit cut off still finds them (the second, unlimited ask).
func TestSelectDestinationsBeyondLimit(t *testing.T) {
	t.Parallel()
	pc := placementClient(t)
	var all []uuid.UUID
	for i := range 60 {
		all = append(all, provider(t, pc, fmt.Sprintf("n-%d", i), "gold"))
	}
	keep := map[uuid.UUID]bool{all[59]: true, all[58]: true}
	drop := dropFilter{}
	for _, n := range all {
		if !keep[n] {
			drop[n] = true
		}
	}
	s := &Scheduler{Client: pc, Hostname: "conductor-a", MaxAlternates: 2, Filter: drop}
	out, err := s.SelectDestinations(context.Background(), RequestSpec{ResourceClass: "gold"}, 1)
	require.NoError(t, err)
	require.ElementsMatch(t, []uuid.UUID{all[59], all[58]}, nodesOf(out[0]))
}
