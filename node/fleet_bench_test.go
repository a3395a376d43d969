package node

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/metalloc/metalloc/db/dbtest"
)

// BenchmarkFleet100k reads the fleet summary of 100,000 nodes with two
// traits each (Store.Fleet: the query and the columns) and encodes it as
// GET /v1/ui/fleet does; json-MB is the body before compression.
func BenchmarkFleet100k(b *testing.B) {
	ctx := context.Background()
	pool := dbtest.New(b)
	_, err := pool.Exec(ctx, `
		INSERT INTO nodes (uuid, name, driver, resource_class, provision_state, power_state, extra)
		SELECT gen_random_uuid(), 'n' || i, 'fake-hardware', 'c' || i % 4, 'available', 'power off',
		       jsonb_build_object('row', 1 + i / 2000, 'rack', 1 + (i / 40) % 50)
		  FROM generate_series(0, 99999) i;
		INSERT INTO node_traits (node_id, trait)
		SELECT id, t FROM nodes, LATERAL (VALUES ('CUSTOM_T' || id % 7), ('HW_CPU_X86_AVX' || id % 2)) v (t);
		ANALYZE nodes, node_traits;`)
	require.NoError(b, err)
	s := NewStore(pool)
	var size int
	for b.Loop() {
		f, err := s.Fleet(ctx, nil)
		require.NoError(b, err)
		raw, err := json.Marshal(f)
		require.NoError(b, err)
		size = len(raw)
	}
	b.ReportMetric(float64(size)/1e6, "json-MB")
}
