package lease

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/metalloc/metalloc/db/dbtest"
	"github.com/metalloc/metalloc/topology"
)

// TestLeaseReadPlansSetBased: admission's read (FreeNodes: with a domain
// under rule required and preferred, without one, and every free node),
// availability's (MatchingNodes, one class and every class) and the
// calendar's (CalendarNodes) read each table once and join by hash: no
// plan node runs more than once (EXPLAIN ANALYZE's loops), so nothing is
// looked up or computed node by node (issue 43: at 10,000 nodes a
// per-node subquery, the busy intervals' or the topology path's, costs
// tens to hundreds of milliseconds; the benchmark is `metalloc-manage
// bench leases`). Checked with generic plans (what a pooled connection keeps)
// made in a session that planned while the tables were analyzed empty and
// then served a fleet enrolled since, and in a new session on the
// analyzed fleet. No timing: the plans' shapes only.
func TestLeaseReadPlansSetBased(t *testing.T) {
	pool := dbtest.New(t)
	ctx := context.Background()
	require.NoError(t, topology.Save(ctx, pool,
		[]topology.Level{{Name: "row", Source: "extra.row"}, {Name: "rack", Source: "extra.rack"}}))
	_, err := pool.Exec(ctx, `ANALYZE nodes, node_traits, lease_nodes, leases, topology_levels`)
	require.NoError(t, err)

	stale := newExplainSession(t, pool.Config().ConnConfig.ConnString())
	stale.reads() // planned on the empty tables
	// The fleet, after: 2,000 reservable nodes in 50 racks of 40, a trait
	// on every other one, and 1,000 leases of 8 nodes over 30 days.
	for _, q := range []string{
		`INSERT INTO nodes (uuid, name, driver, resource_class, provision_state, power_state, extra, reservable)
		 SELECT gen_random_uuid(), 'n' || i, 'fake-hardware', 'gpu', 'available', 'power off',
		        jsonb_build_object('row', i / 400, 'rack', i / 40 % 10), true
		   FROM generate_series(0, 1999) i`,
		`INSERT INTO node_traits (node_id, trait) SELECT id, 'CUSTOM_A' FROM nodes WHERE id % 2 = 0`,
		`INSERT INTO leases (uuid, project_id, start_time, end_time)
		 SELECT gen_random_uuid(), 'p', '2030-01-01'::timestamptz + (i / 50) * interval '36 h',
		        '2030-01-01'::timestamptz + (i / 50) * interval '36 h' + interval '24 h'
		   FROM generate_series(0, 999) i`,
		`INSERT INTO lease_reservations (lease_id, resource_class, count) SELECT id, 'gpu', 8 FROM leases`,
		`WITH l AS (SELECT id, start_time, end_time, row_number() OVER (ORDER BY id) - 1 AS i FROM leases),
		      n AS (SELECT id, row_number() OVER (ORDER BY id) - 1 AS j FROM nodes)
		 INSERT INTO lease_nodes (lease_id, reservation_id, node_id, during)
		 SELECT l.id, r.id, n.id, tstzrange(l.start_time, l.end_time)
		   FROM l JOIN lease_reservations r ON r.lease_id = l.id
		   JOIN n ON n.j / 40 = l.i % 50 AND (n.j % 40) / 8 = (l.i / 50) % 5`,
	} {
		_, err := pool.Exec(ctx, q)
		require.NoError(t, err)
	}
	stale.Reset()
	stale.reads()
	stale.requireSetBased()

	_, err = pool.Exec(ctx, `ANALYZE`)
	require.NoError(t, err)
	fresh := newExplainSession(t, pool.Config().ConnConfig.ConnString())
	fresh.reads()
	fresh.requireSetBased()
}

// explainSession is a dbtest.PlanLog whose plans are generic (what a
// pooled connection keeps after a few runs) and logged with their actual
// loops.
type explainSession struct {
	*dbtest.PlanLog
	t *testing.T
}

func newExplainSession(t *testing.T, url string) *explainSession {
	t.Helper()
	return &explainSession{dbtest.NewPlanLog(t, url, "auto_explain.log_analyze = on", "auto_explain.log_timing = off",
		"plan_cache_mode = force_generic_plan"), t}
}

// reads runs admission's, availability's and the calendar's reads as the
// API does (in a transaction after ReadPlans): FreeNodes for rule
// required and preferred (a few nodes, and more than a rack has), none
// and every free node, MatchingNodes for a class with a trait and for
// every class, CalendarNodes for every class.
func (s *explainSession) reads() {
	s.t.Helper()
	ctx := context.Background()
	from := time.Date(2030, 1, 10, 0, 0, 0, 0, time.UTC)
	gpu := "gpu"
	racks := []string{"extra.row", "extra.rack"}
	four, sixty := int32(4), int32(60)
	err := pgx.BeginFunc(ctx, s.Conn, func(tx pgx.Tx) error {
		q := New(tx)
		if err := q.ReadPlans(ctx); err != nil {
			return err
		}
		for _, p := range []FreeNodesParams{
			{Sources: racks, Rule: RuleRequired, Want: &four},
			{Sources: racks, Rule: RulePreferred, Want: &sixty},
			{Sources: []string{}, Rule: RuleNone, Want: &four},
			{Sources: racks, Rule: RuleRequired},
		} {
			p.ResourceClass, p.Traits, p.Forbidden = "gpu", []string{"CUSTOM_A"}, []string{}
			p.FromTime, p.UntilTime = from, from.Add(48*time.Hour)
			if _, err := q.FreeNodes(ctx, p); err != nil {
				return err
			}
		}
		for _, rc := range []*string{&gpu, nil} {
			if _, err := q.MatchingNodes(ctx, MatchingNodesParams{ResourceClass: rc, Traits: []string{"CUSTOM_A"},
				Forbidden: []string{}, Sources: racks, FromTime: from, UntilTime: from.Add(90 * 24 * time.Hour)}); err != nil {
				return err
			}
		}
		_, err := q.CalendarNodes(ctx, CalendarNodesParams{Sources: racks, FromTime: from, UntilTime: from.Add(30 * 24 * time.Hour)})
		return err
	})
	require.NoError(s.t, err)
}

// requireSetBased fails when a plan node of a logged plan of FreeNodes,
// MatchingNodes or CalendarNodes ran more than once.
func (s *explainSession) requireSetBased() {
	s.t.Helper()
	seen := 0
	for _, doc := range s.Plans() {
		var p struct {
			Query string          `json:"Query Text"`
			Plan  json.RawMessage `json:"Plan"`
		}
		require.NoError(s.t, json.Unmarshal([]byte(doc), &p))
		if !strings.Contains(p.Query, "FreeNodes") && !strings.Contains(p.Query, "MatchingNodes") &&
			!strings.Contains(p.Query, "CalendarNodes") {
			continue
		}
		seen++
		var bad []string
		walkPlan(p.Plan, func(n map[string]any) {
			if loops, _ := n["Actual Loops"].(float64); loops > 1 {
				bad = append(bad, fmt.Sprintf("%v %v (%v loops)", n["Node Type"], n["Relation Name"], loops))
			}
		})
		require.Empty(s.t, bad, "plan nodes run more than once in\n%s\nplan: %s", p.Query, p.Plan)
	}
	require.Equal(s.t, 7, seen, "the reads' plans logged")
}

// walkPlan calls fn on every node of an EXPLAIN JSON plan.
func walkPlan(raw json.RawMessage, fn func(map[string]any)) {
	var n map[string]any
	if json.Unmarshal(raw, &n) != nil {
		return
	}
	var visit func(map[string]any)
	visit = func(n map[string]any) {
		fn(n)
		if kids, ok := n["Plans"].([]any); ok {
			for _, k := range kids {
				if m, ok := k.(map[string]any); ok {
					visit(m)
				}
			}
		}
	}
	visit(n)
}

// TestTopologyPathsMatchView: metalloc_topology_paths (migration 00052)
// gives every node the path the view node_topology_paths gives it, for
// levels of every source kind (extra, properties, trait:, aggregate) with
// values missing, and for no level; it returns nothing for no ids. The
// lease reads (MatchingNodes, CalendarNodes, FreeNodes of every free
// node), which compute extra and properties levels inline
// (metalloc_topology_path, 00056) and take the others from
// metalloc_topology_paths, give each node the view's path cut at every
// level.
func TestTopologyPathsMatchView(t *testing.T) {
	pool := dbtest.New(t)
	ctx := context.Background()
	for _, q := range []string{
		`INSERT INTO nodes (uuid, name, driver, resource_class, provision_state, power_state, reservable, extra, properties)
		 SELECT gen_random_uuid(), 'n' || i, 'fake-hardware', 'gpu', 'available', 'power off', true,
		        CASE WHEN i % 5 <> 0 THEN jsonb_build_object('row', i / 4) ELSE '{}' END,
		        CASE WHEN i % 3 <> 0 THEN jsonb_build_object('pdu', 'p' || i % 2) ELSE '{}' END
		   FROM generate_series(1, 24) i`,
		`INSERT INTO node_traits (node_id, trait) SELECT id, 'CUSTOM_RACK_' || id % 3 FROM nodes WHERE id % 4 <> 0`,
		`INSERT INTO node_traits (node_id, trait) SELECT id, 'CUSTOM_RACK_Z' FROM nodes WHERE id % 2 = 0`,
		`INSERT INTO placement.resource_providers (uuid, name) SELECT uuid, name FROM nodes WHERE id % 2 = 1`,
		`INSERT INTO placement.resource_provider_aggregates (resource_provider_id, aggregate_uuid)
		 SELECT id, gen_random_uuid() FROM placement.resource_providers`,
	} {
		_, err := pool.Exec(ctx, q)
		require.NoError(t, err)
	}
	read := func(q string) map[int64][]string {
		rows, err := pool.Query(ctx, q)
		require.NoError(t, err)
		out := map[int64][]string{}
		for rows.Next() {
			var id int64
			var path []string
			require.NoError(t, rows.Scan(&id, &path))
			out[id] = path
		}
		require.NoError(t, rows.Err())
		return out
	}
	for _, levels := range [][]topology.Level{
		{{Name: "row", Source: "extra.row"}, {Name: "pdu", Source: "properties.pdu"},
			{Name: "rack", Source: "trait:CUSTOM_RACK_"}, {Name: "agg", Source: "aggregate"}},
		{{Name: "rack", Source: "trait:CUSTOM_RACK_"}, {Name: "row", Source: "extra.row"}},
		{},
	} {
		require.NoError(t, topology.Save(ctx, pool, levels))
		want := read(`SELECT id, path FROM node_topology_paths`)
		require.Len(t, want, 24)
		require.Equal(t, want, read(`SELECT node_id, path FROM metalloc_topology_paths(ARRAY(SELECT id FROM nodes))`), "%v", levels)
		require.Len(t, read(`SELECT node_id, path FROM metalloc_topology_paths('{}')`), 0)
		require.Len(t, read(`SELECT node_id, path FROM metalloc_topology_paths(NULL)`), 0)
		for lvl := -1; lvl < len(levels); lvl++ {
			cut := map[int64][]string{}
			for id, p := range want {
				cut[id] = p[:lvl+1]
			}
			require.Equal(t, cut, leaseReadPaths(t, pool, levelSources(levels, lvl)), "%v down to %d", levels, lvl)
		}
	}
}

// leaseReadPaths are the paths down to the levels sources that
// MatchingNodes gives every reservable node of class gpu, after checking
// that CalendarNodes and FreeNodes (every free node) give the same.
func leaseReadPaths(t *testing.T, pool *pgxpool.Pool, sources []string) map[int64][]string {
	t.Helper()
	ctx := context.Background()
	from := time.Date(2030, 1, 10, 0, 0, 0, 0, time.UTC)
	gpu := "gpu"
	q := New(pool)
	rows, err := q.MatchingNodes(ctx, MatchingNodesParams{ResourceClass: &gpu, Traits: []string{}, Forbidden: []string{},
		Sources: sources, FromTime: from, UntilTime: from.Add(time.Hour)})
	require.NoError(t, err)
	crows, err := q.CalendarNodes(ctx, CalendarNodesParams{ResourceClass: &gpu, Sources: sources,
		FromTime: from, UntilTime: from.Add(time.Hour)})
	require.NoError(t, err)
	frows, err := q.FreeNodes(ctx, FreeNodesParams{ResourceClass: gpu, Traits: []string{}, Forbidden: []string{},
		Sources: sources, Rule: RulePreferred, FromTime: from, UntilTime: from.Add(time.Hour)})
	require.NoError(t, err)
	out, cal, free := map[int64][]string{}, map[int64][]string{}, map[int64][]string{}
	for _, r := range rows {
		out[r.ID] = r.Path
	}
	for _, r := range crows {
		cal[r.ID] = r.Path
	}
	for _, r := range frows {
		free[r.ID] = r.Path
	}
	require.Equal(t, out, cal, "CalendarNodes' paths")
	require.Equal(t, out, free, "FreeNodes' paths")
	return out
}
