package node

import (
	"context"
	"errors"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestFleetCacheShares: concurrent requests for the same counts share one
// computation; other filters get their own; a failed computation is not
// reused.
func TestFleetCacheShares(t *testing.T) {
	t.Parallel()
	var fc fleetCache
	var calls atomic.Int32
	release := make(chan struct{})
	compute := func(ctx context.Context, q FleetQuery) (*fleetTally, error) {
		calls.Add(1)
		<-release
		if q.Trait != nil {
			return nil, errors.New("boom")
		}
		return &fleetTally{total: 7}, nil
	}
	var wg sync.WaitGroup
	var entered atomic.Int32
	results := make(chan *fleetTally, 8)
	for range 8 {
		wg.Go(func() {
			entered.Add(1)
			c, err := fc.get(context.Background(), FleetQuery{}, compute)
			require.NoError(t, err)
			results <- c
		})
	}
	// Release the computation once every caller has come (one arriving
	// just after it finished reuses it: it is fresh for four times what
	// it took).
	for calls.Load() == 0 || entered.Load() < 8 {
		runtime.Gosched()
	}
	close(release)
	wg.Wait()
	close(results)
	var first *fleetTally
	for c := range results {
		if first == nil {
			first = c
		}
		require.Same(t, first, c)
	}
	trait := "CUSTOM_A"
	for range 2 {
		_, err := fc.get(context.Background(), FleetQuery{Trait: &trait}, compute)
		require.EqualError(t, err, "boom")
	}
	require.GreaterOrEqual(t, calls.Load(), int32(3), "an error is computed again")
}
