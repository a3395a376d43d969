package allocation

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"

	"github.com/metalloc/metalloc/placement/client"
)

// TestPlacementModeAuto: mode auto claims in-process against a
// metalloc-placement on the same database, over HTTP against a Placement
// whose version document names no database (OpenStack Placement) or
// another one.
func TestPlacementModeAuto(t *testing.T) {
	t.Parallel()
	f := psetup(t)
	ctx := context.Background()
	require.True(t, f.allocatorMode("c1", PlacementModeAuto).Local(ctx))
	require.True(t, f.allocatorMode("c1", "").Local(ctx))
	require.True(t, f.allocatorMode("c1", PlacementModeLocal).Local(ctx))
	require.False(t, f.allocatorMode("c1", PlacementModeHTTP).Local(ctx))
	for _, header := range []string{"", "0123456789abcdef0123456789abcdef"} {
		other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			if header != "" {
				w.Header().Set("X-Metalloc-Database-Identity", header)
			}
			_, _ = w.Write([]byte(`{"versions": []}`))
		}))
		a := NewPlacementAllocator(f.pool, client.New(other.URL, "admin", time.Second), PlacementConfig{}, zaptest.NewLogger(t))
		require.False(t, a.Local(ctx))
		other.Close()
	}
	// Unreachable: HTTP for now, asked again later.
	a := NewPlacementAllocator(f.pool, client.New("http://127.0.0.1:1", "admin", time.Second), PlacementConfig{}, zaptest.NewLogger(t))
	require.False(t, a.Local(ctx))
	require.EqualValues(t, 0, a.mode.local.Load())
}

// TestPlacementLocalReserves: in-process claims, one by one (Process) and
// by batch (ClaimBatch), leave the allocation active on a node of its
// class and traits, the consumer in Placement with its project, the
// provider's generation bumped, and exactly the claim log entries of the
// active allocations.
func TestPlacementLocalReserves(t *testing.T) {
	t.Parallel()
	f := psetup(t)
	ctx := context.Background()
	var fast []uuid.UUID
	for i := range 6 {
		if i%2 == 0 {
			fast = append(fast, f.pnode(fmt.Sprintf("gold-%d", i), "baremetal.gold", "CUSTOM_FAST"))
		} else {
			f.pnode(fmt.Sprintf("gold-%d", i), "baremetal.gold")
		}
	}
	me := f.conductor("c1")
	a := f.allocatorMode("c1", PlacementModeLocal)
	row := f.allocation(nil, "baremetal.gold", "CUSTOM_FAST")
	out, err := a.Process(ctx, me, f.claim(row.ID, me))
	require.NoError(t, err)
	require.Equal(t, Reserved, out)
	v := f.get(row.ID)
	require.Equal(t, StateActive, v.State)
	require.Contains(t, fast, *v.NodeUUID)
	p, err := f.pc.GetProvider(ctx, *v.NodeUUID)
	require.NoError(t, err)
	require.EqualValues(t, 3, p.Generation, "inventories, traits, then the claim")
	cur, err := f.pc.GetAllocations(ctx, v.Uuid)
	require.NoError(t, err)
	require.Equal(t, "metalloc", cur.ProjectID)
	require.EqualValues(t, 1, *cur.ConsumerGeneration)
	ids := []int64{row.ID}
	f.checkNoLeak(ids)

	// A batch: two more fast ones (the last two fast nodes), two of any
	// node, one that cannot fit (goes back for Process).
	var batch []Claimed
	for _, traits := range [][]string{{"CUSTOM_FAST"}, {"CUSTOM_FAST"}, nil, nil, {"CUSTOM_FAST"}} {
		r := f.allocation(nil, "baremetal.gold", traits...)
		ids = append(ids, r.ID)
		batch = append(batch, f.claim(r.ID, me))
	}
	reserved, rest := a.ClaimBatch(ctx, me, batch)
	require.Len(t, append(reserved, rest...), 5)
	require.GreaterOrEqual(t, len(reserved), 2)
	failed := 0
	for _, c := range rest {
		out, err = a.Process(ctx, me, c)
		require.NoError(t, err)
		if out == Failed {
			failed++
			require.Contains(t, *f.get(c.ID).LastError, "no node fits")
		}
	}
	require.GreaterOrEqual(t, failed, 1, "3 fast allocations for 2 fast nodes")
	f.checkNoLeak(ids)
	for i, id := range ids[1:] {
		if v := f.get(id); v.State == StateActive && i != 2 && i != 3 {
			require.Contains(t, fast, *v.NodeUUID)
		}
	}
}

// TestPlacementLocalRace has 4 conductors claim 60 allocations for 25
// nodes in-process, batches and Process racing, while another client
// writes allocations through the HTTP API on the same providers: no node
// is booked twice, every allocation ends active or in error, and
// Placement's usages are exactly the reserved nodes (plus the HTTP
// client's own consumers).
func TestPlacementLocalRace(t *testing.T) {
	t.Parallel()
	f := psetup(t)
	nodes := f.goldNodes(25)
	var ids []int64
	for range 60 {
		ids = append(ids, f.allocation(nil, "gold").ID)
	}
	ctx := context.Background()
	var wg sync.WaitGroup
	var batched atomic.Int64
	for i := range 4 {
		name := fmt.Sprintf("c%d", i)
		me := f.conductor(name)
		a := f.allocatorMode(name, PlacementModeLocal)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				claimed := claim(t, NewAllocator(f.pool, zaptest.NewLogger(t)), me, 4)
				if len(claimed) == 0 {
					return
				}
				reserved, rest := a.ClaimBatch(ctx, me, claimed)
				batched.Add(int64(len(reserved)))
				for _, c := range rest {
					_, err := a.Process(ctx, me, c)
					require.NoError(t, err)
				}
			}
		}()
	}
	// An outside Placement client claims and frees the last node meanwhile.
	outsider := uuid.New()
	wg.Add(1)
	go func() {
		defer wg.Done()
		for range 20 {
			err := f.pc.PutAllocations(ctx, outsider, client.Claim{
				Request: client.AllocationRequest{Allocations: map[uuid.UUID]client.ProviderResources{
					nodes[24]: {Resources: client.Resources{"CUSTOM_GOLD": 1}}}},
				ProjectID: "p", UserID: "u"})
			if err == nil {
				require.NoError(t, f.pc.DeleteAllocations(ctx, outsider))
			} else {
				require.True(t, client.IsConflict(err), "%v", err)
			}
		}
	}()
	wg.Wait()
	booked := map[uuid.UUID]bool{}
	for _, id := range ids {
		v := f.get(id)
		switch v.State {
		case StateActive:
			require.False(t, booked[*v.NodeUUID], "node %s booked twice", *v.NodeUUID)
			booked[*v.NodeUUID] = true
		case StateError:
			require.Regexp(t, `no node fits|alternates consumed by concurrent claims`, *v.LastError)
		default:
			t.Fatalf("allocation %d is %s", id, v.State)
		}
	}
	require.GreaterOrEqual(t, len(booked), 24)
	require.Positive(t, batched.Load(), "no allocation was reserved by a batch")
	f.checkNoLeak(ids)
}
