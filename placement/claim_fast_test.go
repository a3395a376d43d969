package placement

import (
	"context"
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
