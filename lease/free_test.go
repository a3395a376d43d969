package lease

import (
	"context"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/metalloc/metalloc/db/dbtest"
)

// TestFreeNodesReadsThePick: FreeNodes with want reads the nodes the pick
// needs, the domain chosen in the statement, and choose on them picks as
// it does on every free node. The fleet (class gpu, row/rack): rack 1/a
// with 6 free nodes (and one in maintenance, one of class cpu), 1/b with
// 5, 2/c with 4, and 3 nodes in row 2 in no rack.
func TestFreeNodesReadsThePick(t *testing.T) {
	pool := dbtest.New(t)
	ctx := context.Background()
	_, err := pool.Exec(ctx, `
		INSERT INTO nodes (uuid, name, driver, resource_class, provision_state, power_state, reservable, maintenance, extra)
		SELECT gen_random_uuid(), 'n' || i, 'fake-hardware', CASE WHEN i = 20 THEN 'cpu' ELSE 'gpu' END,
		       'available', 'power off', true, i = 19,
		       CASE WHEN i <= 6 OR i >= 19 THEN '{"row": 1, "rack": "a"}'
		            WHEN i <= 11 THEN '{"row": 1, "rack": "b"}'
		            WHEN i <= 15 THEN '{"row": 2, "rack": "c"}'
		            ELSE '{"row": 2}' END::jsonb
		  FROM generate_series(1, 20) i`)
	require.NoError(t, err)
	racks, rows := []string{"extra.row", "extra.rack"}, []string{"extra.row"}
	from := time.Date(2030, 1, 10, 0, 0, 0, 0, time.UTC)
	read := func(sources []string, rule string, want *int32, only []int64) []FreeNodesRow {
		var out []FreeNodesRow
		err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			q := New(tx)
			if err := q.ReadPlans(ctx); err != nil {
				return err
			}
			var err error
			out, err = q.FreeNodes(ctx, FreeNodesParams{ResourceClass: "gpu", Traits: []string{}, Forbidden: []string{},
				Sources: sources, Rule: rule, Want: want, Among: only, FromTime: from, UntilTime: from.Add(time.Hour)})
			return err
		})
		require.NoError(t, err)
		return out
	}
	n := func(v int32) *int32 { return &v }
	// domains counts the rows per domain ("1/a"; "-" for no domain).
	domains := func(rs []FreeNodesRow, lvl int) map[string]int {
		out := map[string]int{}
		for _, r := range rs {
			k, in := domainKey(r.Path, lvl)
			if !in {
				k = "-"
			}
			out[k]++
		}
		return out
	}

	all := read(racks, RulePreferred, nil, nil)
	require.Len(t, all, 18, "want NULL: every free node")
	require.Len(t, read(racks, RuleRequired, nil, nil), 15, "want NULL, required: every free node in a rack")
	require.Equal(t, map[string]int{"1/a": 6, "1/b": 5, "2/c": 4, "-": 3}, domains(all, 1))

	require.Len(t, read([]string{}, RuleNone, n(4), nil), 4, "no level: 4 of the pool")
	require.Equal(t, map[string]int{"1/a": 4}, domains(read(racks, RuleRequired, n(4), nil), 1),
		"required: 4 of the fullest rack")
	require.Equal(t, map[string]int{"1/a": 6}, domains(read(racks, RuleRequired, n(8), nil), 1),
		"required: all the fullest rack has")
	require.Equal(t, map[string]int{"1/a": 6, "1/b": 5}, domains(read(racks, RulePreferred, n(8), nil), 1),
		"preferred: the fullest racks until 8")
	require.Equal(t, map[string]int{"1/a": 6, "1/b": 5, "2/c": 4, "-": 2}, domains(read(racks, RulePreferred, n(17), nil), 1),
		"preferred: every rack, then 2 in none")
	require.Equal(t, map[string]int{"1": 11}, domains(read(rows, RuleRequired, n(12), nil), 0),
		"required row: the fullest row")
	var inC []int64
	for _, r := range all {
		if k, _ := domainKey(r.Path, 1); k == "2/c" || len(inC) == 4 && k == "" {
			inC = append(inC, r.ID)
		}
	}
	require.Equal(t, map[string]int{"2/c": 2}, domains(read(racks, RuleRequired, n(2), inC), 1),
		"only: among the nodes named")
	require.Empty(t, read(racks, RuleNone, n(2), []int64{}), "only none")

	// choose on what FreeNodes reads with want fits exactly when it fits
	// on every free node, in a domain as full.
	rnd := rand.New(rand.NewPCG(1, 2))
	asNodes := func(rs []FreeNodesRow) []node {
		out := make([]node, len(rs))
		for i, r := range rs {
			out[i] = node{ID: r.ID, Class: "gpu", Path: r.Path, Eligible: true, Fits: true}
		}
		return out
	}
	for _, rule := range []string{RuleNone, RuleRequired, RulePreferred} {
		for _, lvl := range []int{0, 1} {
			sources := racks[:lvl+1]
			r := Reservation{ResourceClass: "gpu", Rule: rule, Level: "rack", LevelIndex: lvl, Sources: sources}
			if rule == RuleNone {
				r.LevelIndex, r.Sources = -1, []string{}
			}
			for count := 1; count <= 19; count++ {
				r.Count = count
				full, fullOK := choose(asNodes(read(r.Sources, rule, nil, nil)), r, 0, 1, nil, rnd)
				got, ok := choose(asNodes(read(r.Sources, rule, n(int32(count)), nil)), r, 0, 1, nil, rnd)
				require.Equal(t, fullOK, ok, "%s at %d, %d nodes", rule, lvl, count)
				require.Len(t, got.IDs, len(full.IDs), "%s at %d, %d nodes", rule, lvl, count)
				if rule == RuleRequired && ok {
					require.Equal(t, domains(all, lvl)[strings.Join(full.Domain, "/")],
						domains(all, lvl)[strings.Join(got.Domain, "/")], "%s at %d, %d nodes", rule, lvl, count)
				}
			}
		}
	}
}
