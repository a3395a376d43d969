package placement

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
)

// The pipelined claim writes new consumers' allocations and bumps the
// named providers' generations; anything else it rolls back whole and
// hands to the general path (errSlowPath): an existing consumer, an
// unknown provider, a class without inventory, too little capacity.
func TestClaimPipelined(t *testing.T) {
	t.Parallel()
	srv, pool := invServer(t)
	ctx := context.Background()
	h := NewHandler(pool, Options{})
	rp := mkProvider(t, pool, "rp")
	setInv(t, srv, rp, `{"VCPU": {"total": 4}}`)
	gen := func() (g int32) {
		require.NoError(t, pool.QueryRow(ctx, `SELECT generation FROM placement.resource_providers WHERE uuid = $1`, rp).Scan(&g))
		return g
	}
	count := func(sql string) (n int) {
		require.NoError(t, pool.QueryRow(ctx, sql).Scan(&n))
		return n
	}
	one := func(consumer uuid.UUID, provider uuid.UUID, class string, used int64) []claim {
		return []claim{{consumer: consumer, projectID: "p", userID: "u",
			resources: []claimResource{{provider: provider, class: class, used: used}}}}
	}
	prov := uuid.MustParse(rp)
	c1 := uuid.New()
	g0 := gen()
	require.True(t, fastClaimable(one(c1, prov, "VCPU", 2)))
	require.NoError(t, h.claimPipelined(ctx, one(c1, prov, "VCPU", 2)))
	require.Equal(t, g0+1, gen())
	require.Equal(t, 1, count(`SELECT count(*) FROM placement.allocations`))

	for name, cl := range map[string][]claim{
		"existing consumer": one(c1, prov, "VCPU", 1),
		"unknown provider":  one(uuid.New(), uuid.New(), "VCPU", 1),
		"no inventory":      one(uuid.New(), prov, "DISK_GB", 1),
		"over capacity":     one(uuid.New(), prov, "VCPU", 3),
	} {
		require.ErrorIs(t, h.claimPipelined(ctx, cl), errSlowPath, name)
		require.Equal(t, g0+1, gen(), name)
		require.Equal(t, 1, count(`SELECT count(*) FROM placement.allocations`), name)
		require.Equal(t, 1, count(`SELECT count(*) FROM placement.consumers`), name)
	}
	// Not for it: a consumer generation given, or no allocations.
	withGen := one(uuid.New(), prov, "VCPU", 1)
	g := int64(1)
	withGen[0].generation = &g
	require.False(t, fastClaimable(withGen))
	require.False(t, fastClaimable([]claim{{consumer: uuid.New()}}))
	// The connections it used are clean: the pool still works.
	require.Equal(t, 1, count(`SELECT count(*) FROM placement.allocations`))
}

// The one-statement claim (placement.claim_new_consumer) writes a new
// consumer's allocations in the order given and bumps the named providers'
// generations; for anything else it writes nothing and hands the claim to
// the general path. Concurrent claims never exceed the capacity.
func TestClaimOneTrip(t *testing.T) {
	t.Parallel()
	srv, pool := invServer(t)
	ctx := context.Background()
	h := NewHandler(pool, Options{})
	rp := mkProvider(t, pool, "rp")
	setInv(t, srv, rp, `{"VCPU": {"total": 4}, "MEMORY_MB": {"total": 1024, "step_size": 256, "min_unit": 256}}`)
	rp2 := mkProvider(t, pool, "rp2")
	setInv(t, srv, rp2, `{"DISK_GB": {"total": 100}}`)
	gen := func(u string) (g int32) {
		require.NoError(t, pool.QueryRow(ctx, `SELECT generation FROM placement.resource_providers WHERE uuid = $1`, u).Scan(&g))
		return g
	}
	count := func(sql string) (n int) {
		require.NoError(t, pool.QueryRow(ctx, sql).Scan(&n))
		return n
	}
	prov, prov2 := uuid.MustParse(rp), uuid.MustParse(rp2)
	mk := func(consumer uuid.UUID, rs ...claimResource) claim {
		return claim{consumer: consumer, projectID: "p", userID: "u", resources: rs}
	}
	c1 := uuid.New()
	g0, g20 := gen(rp), gen(rp2)
	require.NoError(t, h.claimOneTrip(ctx, mk(c1, claimResource{prov, "VCPU", 2}, claimResource{prov2, "DISK_GB", 10},
		claimResource{prov, "MEMORY_MB", 512})))
	require.Equal(t, g0+1, gen(rp))
	require.Equal(t, g20+1, gen(rp2))
	var classes []string
	rows, err := pool.Query(ctx, `SELECT rc.name FROM placement.allocations a
		JOIN placement.resource_classes rc ON rc.id = a.resource_class_id ORDER BY a.id`)
	require.NoError(t, err)
	for rows.Next() {
		var c string
		require.NoError(t, rows.Scan(&c))
		classes = append(classes, c)
	}
	require.NoError(t, rows.Err())
	require.Equal(t, []string{"VCPU", "DISK_GB", "MEMORY_MB"}, classes)
	var cgen int
	require.NoError(t, pool.QueryRow(ctx, `SELECT generation FROM placement.consumers WHERE uuid = $1`, c1).Scan(&cgen))
	require.Equal(t, 1, cgen)

	for name, cl := range map[string]claim{
		"existing consumer": mk(c1, claimResource{prov, "VCPU", 1}),
		"unknown provider":  mk(uuid.New(), claimResource{uuid.New(), "VCPU", 1}),
		"unknown class":     mk(uuid.New(), claimResource{prov, "CUSTOM_NOPE", 1}),
		"no inventory":      mk(uuid.New(), claimResource{prov, "DISK_GB", 1}),
		"over capacity":     mk(uuid.New(), claimResource{prov, "VCPU", 3}),
		"step size":         mk(uuid.New(), claimResource{prov, "MEMORY_MB", 300}),
		"min unit":          mk(uuid.New(), claimResource{prov, "MEMORY_MB", 0}),
		"one of two fails":  mk(uuid.New(), claimResource{prov2, "DISK_GB", 1}, claimResource{prov, "VCPU", 3}),
	} {
		require.ErrorIs(t, h.claimOneTrip(ctx, cl), errSlowPath, name)
		require.Equal(t, g0+1, gen(rp), name)
		require.Equal(t, g20+1, gen(rp2), name)
		require.Equal(t, 3, count(`SELECT count(*) FROM placement.allocations`), name)
		require.Equal(t, 1, count(`SELECT count(*) FROM placement.consumers`), name)
	}

	// 2 VCPU left: of 8 concurrent claims of 1, exactly 2 succeed.
	var wg sync.WaitGroup
	var won atomic.Int32
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if h.claimOneTrip(ctx, mk(uuid.New(), claimResource{prov, "VCPU", 1})) == nil {
				won.Add(1)
			}
		}()
	}
	wg.Wait()
	require.Equal(t, int32(2), won.Load())
	require.Equal(t, 4, count(`SELECT sum(used) FROM placement.allocations a JOIN placement.resource_classes rc
		ON rc.id = a.resource_class_id WHERE rc.name = 'VCPU'`))
}
