package topology

import (
	"testing"

	"github.com/metalloc/metalloc/db/dbtest"
)

// BenchmarkFreeCandidates10k: FreeCandidates at 10,000 nodes under two
// levels (extra.row, extra.rack: 10 rows of 25 racks of 40), a quarter of
// them in use: a class with 5,000 free nodes, and one with 1,250 free
// nodes that have a trait.
func BenchmarkFreeCandidates10k(b *testing.B) {
	pool := dbtest.New(b)
	ctx := b.Context()
	for _, q := range []string{
		`INSERT INTO nodes (uuid, name, driver, resource_class, provision_state, power_state, extra)
		 SELECT gen_random_uuid(), 'n-' || i, 'fake-hardware',
		        CASE WHEN i % 4 = 0 THEN 'baremetal-gpu' ELSE 'baremetal' END, 'available', 'power off',
		        jsonb_build_object('row', i / 1000, 'rack', lpad((i / 40 % 25)::text, 2, '0'))
		   FROM generate_series(1, 10000) i`,
		`INSERT INTO node_traits (node_id, trait) SELECT id, 'CUSTOM_A100' FROM nodes WHERE id % 8 = 0`,
		`UPDATE nodes SET provision_state = 'active', instance_uuid = gen_random_uuid() WHERE id % 4 = 1`,
		`VACUUM ANALYZE nodes`, `VACUUM ANALYZE node_traits`,
	} {
		if _, err := pool.Exec(ctx, q); err != nil {
			b.Fatal(err)
		}
	}
	if err := Save(ctx, pool, rowRack); err != nil {
		b.Fatal(err)
	}
	for _, bc := range []struct {
		name string
		f    Filter
	}{
		{"5000-free", Filter{ResourceClass: "baremetal"}},
		{"1250-free-trait", Filter{ResourceClass: "baremetal-gpu", Traits: []string{"CUSTOM_A100"}}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			n := 0
			for b.Loop() {
				cands, err := FreeCandidates(ctx, pool, bc.f)
				if err != nil {
					b.Fatal(err)
				}
				n = len(cands)
			}
			b.ReportMetric(float64(n), "candidates")
		})
	}
}
