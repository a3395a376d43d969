package lease

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
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
