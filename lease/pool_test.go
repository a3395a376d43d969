package lease

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"

	"github.com/metalloc/metalloc/db/dbtest"
	"github.com/metalloc/metalloc/topology"
)

// TestAdmissionPoolCopyMissesChanges: admission picks on the Store's copy
// of the pool (pool.go), and a copy that missed a change never books a
// node the lease may not take: nodes put in maintenance, a rack whose
// nodes moved to another, a new node. Every admission's outcome is
// checked against the database, whichever way it was picked (the copy,
// or the database's read after the copy's pick was found wrong).
func TestAdmissionPoolCopyMissesChanges(t *testing.T) {
	pool := dbtest.New(t)
	ctx := context.Background()
	dbtest.RackedNodes(t, pool, 2, 4, "gpu") // gpu-1..4 in 1/r01, gpu-5..8 in 2/r02
	exec := func(sql string) {
		t.Helper()
		_, err := pool.Exec(ctx, sql)
		require.NoError(t, err)
	}
	exec(`UPDATE nodes SET reservable = true`)
	require.NoError(t, topology.Save(ctx, pool,
		[]topology.Level{{Name: "row", Source: "extra.row"}, {Name: "rack", Source: "extra.rack"}}))
	s := NewStore(pool)
	log := zaptest.NewLogger(t)
	t0 := time.Date(2030, 1, 6, 9, 0, 0, 0, time.UTC)
	hour := 0
	admit := func(count int, rule string) View {
		t.Helper()
		hour += 2
		r := Reservation{ResourceClass: "gpu", Count: count, Rule: rule, LevelIndex: -1}
		if rule != RuleNone {
			r.Level, r.LevelIndex = "rack", 1
		}
		v, err := s.Admit(ctx, Request{UUID: uuid.New(), ProjectID: "p", OnStart: OnStartAllocate,
			Start: t0.Add(time.Duration(hour) * time.Hour), End: t0.Add(time.Duration(hour+1) * time.Hour),
			Reservations: []Reservation{r}}, log)
		require.NoError(t, err)
		return v
	}
	names := func(v View) string {
		var out []string
		for _, n := range v.Reservations[0].Nodes {
			out = append(out, *n.Name)
		}
		return strings.Join(out, ",")
	}

	admit(1, RuleNone)
	require.NotNil(t, s.cache.byClass, "the first admission read the pool")
	require.Len(t, s.cache.byClass["gpu"], 8)

	// Seven nodes in maintenance: the copy still has them.
	exec(`UPDATE nodes SET maintenance = true WHERE name <> 'gpu-8'`)
	for range 4 {
		require.Equal(t, "gpu-8", names(admit(1, RuleNone)))
	}
	exec(`UPDATE nodes SET maintenance = false`)

	// Rack r02's nodes moved to r09: no pick in one rack is in 2/r02.
	s.cache.invalidate()
	admit(1, RuleNone) // reads the pool again (or, read too recently, the database)
	exec(`UPDATE nodes SET extra = extra || '{"rack": "r09"}' WHERE extra ->> 'rack' = 'r02'`)
	for range 6 {
		v := admit(4, RuleRequired)
		require.NotEqual(t, []string{"2", "r02"}, v.Reservations[0].Domain)
		var racks []string
		require.NoError(t, pool.QueryRow(ctx, `SELECT array_agg(DISTINCT n.extra ->> 'rack') FROM lease_nodes ln
			JOIN nodes n ON n.id = ln.node_id JOIN leases l ON l.id = ln.lease_id WHERE l.uuid = $1`, v.Uuid).Scan(&racks))
		require.Len(t, racks, 1, "one rack")
		require.Equal(t, fmt.Sprint([]string{v.Reservations[0].Domain[1]}), fmt.Sprint(racks))
	}

	// A new node, the others in maintenance: the copy does not have it.
	time.Sleep(poolMaxAgeLoads * s.cache.took) // old enough to be read again once found wrong
	admit(1, RuleNone)
	exec(`INSERT INTO nodes (uuid, name, driver, resource_class, provision_state, power_state, reservable, extra)
		VALUES (gen_random_uuid(), 'gpu-new', 'fake-hardware', 'gpu', 'available', 'power off', true, '{"row": "1", "rack": "r01"}')`)
	exec(`UPDATE nodes SET maintenance = true WHERE name <> 'gpu-new'`)
	require.Equal(t, "gpu-new", names(admit(1, RuleNone)))
}

// TestCachedMatchingIsMatchingNodes: the availability search's read on
// the pool copy (cachedMatching) gives what MatchingNodes gives (ids,
// classes, maintenance, fit, busy intervals, paths down to the level),
// for a class and for every class, with and without traits, on a fleet
// of two classes with traits, a node in maintenance, a node not
// reservable, a node in no rack and leases, some released.
func TestCachedMatchingIsMatchingNodes(t *testing.T) {
	pool := dbtest.New(t)
	ctx := context.Background()
	dbtest.RackedNodes(t, pool, 3, 4, "gpu")
	dbtest.RackedNodes(t, pool, 1, 4, "cpu")
	for _, sql := range []string{
		`UPDATE nodes SET reservable = name <> 'gpu-2', maintenance = name = 'gpu-3'`,
		`UPDATE nodes SET extra = extra - 'rack' WHERE name = 'gpu-4'`,
		`INSERT INTO node_traits (node_id, trait) SELECT id, 'CUSTOM_A' FROM nodes WHERE id % 2 = 0`,
		`INSERT INTO node_traits (node_id, trait) SELECT id, 'CUSTOM_B' FROM nodes WHERE id % 3 = 0`,
		`INSERT INTO leases (uuid, project_id, start_time, end_time)
		 SELECT gen_random_uuid(), 'p', '2030-01-01'::timestamptz + i * interval '5 h', '2030-01-01'::timestamptz + i * interval '5 h' + interval '9 h'
		   FROM generate_series(0, 9) i`,
		`INSERT INTO lease_reservations (lease_id, resource_class, count) SELECT id, 'gpu', 1 FROM leases`,
		`INSERT INTO lease_nodes (lease_id, reservation_id, node_id, during, released)
		 SELECT l.id, r.id, n.id, tstzrange(l.start_time, l.end_time), l.id % 4 = 0
		   FROM leases l JOIN lease_reservations r ON r.lease_id = l.id
		   JOIN nodes n ON n.id % 10 = l.id % 10`,
	} {
		_, err := pool.Exec(ctx, sql)
		require.NoError(t, err)
	}
	require.NoError(t, topology.Save(ctx, pool,
		[]topology.Level{{Name: "row", Source: "extra.row"}, {Name: "rack", Source: "extra.rack"}}))
	s := NewStore(pool)
	gpu := "gpu"
	from := time.Date(2030, 1, 1, 3, 0, 0, 0, time.UTC)
	until := from.Add(30 * time.Hour)
	for _, c := range []struct {
		rc                *string
		traits, forbidden []string
		sources           []string
	}{
		{&gpu, nil, nil, []string{"extra.row", "extra.rack"}},
		{&gpu, []string{"CUSTOM_A"}, []string{"CUSTOM_B"}, []string{"extra.row"}},
		{nil, []string{"CUSTOM_B"}, nil, []string{}},
		{nil, nil, nil, []string{"extra.row", "extra.rack"}},
	} {
		err := s.inReadTx(ctx, func(q *Queries, tx pgx.Tx) error {
			got, ok, err := s.cachedMatching(ctx, tx, c.rc, c.traits, c.forbidden, c.sources, from, until)
			require.NoError(t, err)
			require.True(t, ok)
			rows, err := q.MatchingNodes(ctx, MatchingNodesParams{ResourceClass: c.rc, Traits: nonNil(c.traits),
				Forbidden: nonNil(c.forbidden), FromTime: from, UntilTime: until, Sources: nonNil(c.sources)})
			require.NoError(t, err)
			want := toNodes(rows)
			require.Len(t, got, len(want))
			busy := 0
			for _, n := range want {
				busy += len(n.Busy)
			}
			require.NotZero(t, busy, "busy intervals compared")
			for i := range want {
				w, g := want[i], got[i]
				require.Equal(t, w.Path, g.Path[:len(c.sources)], "node %d", w.ID)
				for l := range c.sources {
					k, in := domainKey(w.Path, l)
					gk, gin := g.domain(l)
					require.Equal(t, [2]any{k, in}, [2]any{gk, gin}, "node %d, level %d", w.ID, l)
				}
				w.UUID, w.Name, w.Path, g.Path, g.Keys = "", "", nil, nil, nil
				if len(w.Busy) == 0 {
					w.Busy = nil
				}
				require.Equal(t, w, g)
			}
			return nil
		})
		require.NoError(t, err)
	}
}

// TestPoolCopyReadAgainInBackground: a copy older than it should be kept
// serves the admission that finds it so, and is read again beside it; a
// node enrolled meanwhile is then in the copy.
func TestPoolCopyReadAgainInBackground(t *testing.T) {
	pool := dbtest.New(t)
	ctx := context.Background()
	dbtest.RackedNodes(t, pool, 1, 2, "gpu")
	_, err := pool.Exec(ctx, `UPDATE nodes SET reservable = true`)
	require.NoError(t, err)
	s := NewStore(pool)
	t0 := time.Date(2030, 1, 6, 9, 0, 0, 0, time.UTC)
	admit := func(h int) {
		_, err := s.Admit(ctx, Request{UUID: uuid.New(), ProjectID: "p", OnStart: OnStartAllocate,
			Start: t0.Add(time.Duration(h) * time.Hour), End: t0.Add(time.Duration(h+1) * time.Hour),
			Reservations: []Reservation{{ResourceClass: "gpu", Count: 1, Rule: RuleNone, LevelIndex: -1}}}, zaptest.NewLogger(t))
		require.NoError(t, err)
	}
	admit(0)
	_, err = pool.Exec(ctx, `INSERT INTO nodes (uuid, name, driver, resource_class, provision_state, power_state, reservable)
		VALUES (gen_random_uuid(), 'gpu-new', 'fake-hardware', 'gpu', 'available', 'power off', true)`)
	require.NoError(t, err)
	s.cache.mu.Lock()
	require.Len(t, s.cache.byClass["gpu"], 2)
	s.cache.loaded = s.cache.loaded.Add(-time.Hour)
	s.cache.mu.Unlock()
	admit(2)
	require.Eventually(t, func() bool {
		s.cache.mu.Lock()
		defer s.cache.mu.Unlock()
		return !s.cache.loading && len(s.cache.byClass["gpu"]) == 3
	}, 10*time.Second, 10*time.Millisecond)
}
