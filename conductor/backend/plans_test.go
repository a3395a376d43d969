package backend

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/metalloc/metalloc/allocation"
	"github.com/metalloc/metalloc/db/dbtest"
)

// TestClaimPlansIgnoreNodeStatistics: every plan of an allocation's life
// that reads nodes, node_traits or allocations (the API's insert and its triggers, the
// claim, the pick, the slow path's reservation, the reservation's writes
// and triggers) is the same in a session that made
// its plans while both tables were empty when last analyzed and then
// served a fleet enrolled since, with no ANALYZE in between (issue 44:
// 10,000 nodes enrolled through the API, a burst right after), as in a
// new session on the analyzed fleet: migration 00044. Before it, the stale
// session read the id range over all of nodes_topology_idx, every trait of
// node_traits_trait_idx per node the pick visited, and all of nodes per
// insert; before 00045, the reservation's link checks read all of
// allocations and the events' numbering all of allocation_events (both
// analyzed empty, grown by a burst since).
func TestClaimPlansIgnoreNodeStatistics(t *testing.T) {
	t.Parallel()
	f := setup(t)
	ctx := context.Background()
	me := f.conductor("c")
	_, err := f.pool.Exec(ctx, `ANALYZE nodes, node_traits, allocations, allocation_traits, allocation_events`)
	require.NoError(t, err)

	// A session as a conductor's or the API's, opened before the fleet was
	// enrolled: its warm-up plans every function and trigger of an
	// allocation's life on the empty tables.
	stale := newPlanSession(t, f.pool)
	stale.exec(`SELECT metalloc_warm_up()`)
	// The fleet, as enrolled: one class, three traits on every node.
	_, err = f.pool.Exec(ctx, `
		WITH n AS (
			INSERT INTO nodes (uuid, name, driver, resource_class, provision_state, power_state)
			SELECT gen_random_uuid(), 'node-' || i, 'fake-hardware', 'gold', 'available', 'power off'
			  FROM generate_series(1, 2000) i
			RETURNING id)
		INSERT INTO node_traits (node_id, trait)
		SELECT n.id, t FROM n, unnest('{CUSTOM_A,CUSTOM_B,CUSTOM_C}'::text[]) t`)
	require.NoError(t, err)
	// The start of a first burst, while the allocations table is still a
	// page or two: its first reservations' link checks (and whatever else
	// runs more than five times) get their generic plans for a tiny
	// table; then the rest of the burst (ended, out of the claim's way).
	// The allocations table too was empty when last analyzed.
	for range 4 {
		stale.life(me)
	}
	_, err = f.pool.Exec(ctx, `
		INSERT INTO allocations (uuid, resource_class, state, last_error)
		SELECT gen_random_uuid(), 'gold', 'error', 'a burst before' FROM generate_series(1, 3000)`)
	require.NoError(t, err)
	stale.reset()
	stale.life(me)

	_, err = f.pool.Exec(ctx, `ANALYZE nodes, node_traits, allocations, allocation_events`)
	require.NoError(t, err)
	fresh := newPlanSession(t, f.pool)
	fresh.exec(`SELECT metalloc_warm_up()`)
	fresh.reset()
	fresh.life(me)

	want, got := fresh.shapes(), stale.shapes()
	require.NotEmpty(t, want)
	for q, shape := range want {
		require.Contains(t, got, q, "statement planned by the stale session too")
		if strings.Contains(q, "FROM allocation_events e WHERE e.seq IS NULL") {
			// The numbering's read of the unnumbered events (00051): by
			// allocation_events_unnumbered or by allocation_events_seq_key's
			// "seq IS NULL", as the statistics say; both read those only.
			for _, s := range []string{shape, got[q]} {
				require.True(t, strings.Contains(s, "allocation_events_unnumbered") ||
					strings.Contains(s, "Index Scan on allocation_events using allocation_events_seq_key"), s)
			}
			continue
		}
		require.Equal(t, shape, got[q], "the plan of\n%s\nin a session that planned it on empty tables", q)
		for _, bad := range []string{"Seq Scan on nodes", "Seq Scan on node_traits", "Seq Scan on allocations\n", "Seq Scan on allocation_events\n", "nodes_topology_idx", "node_traits_trait_idx"} {
			require.NotContains(t, shape, bad, q)
		}
	}
}

// planSession is a connection of its own (its own plans) that logs the
// plan of every statement it runs, nested ones included (dbtest.PlanLog).
type planSession struct {
	*dbtest.PlanLog
	t    *testing.T
	conn *pgx.Conn
}

func newPlanSession(t *testing.T, pool *pgxpool.Pool) *planSession {
	t.Helper()
	l := dbtest.NewPlanLog(t, pool.Config().ConnConfig.ConnString(), "auto_explain.log_nested_statements = on")
	return &planSession{PlanLog: l, t: t, conn: l.Conn}
}

func (s *planSession) exec(sql string, args ...any) {
	s.t.Helper()
	s.Exec(sql, args...)
}

// reset forgets the plans logged so far.
func (s *planSession) reset() { s.Reset() }

// life runs what an allocation's life runs on the database backend: the
// API's insert (CreateAllocations, two rows with a trait each) and the
// numbering of its events, the
// claim and reservation of the batch (ClaimReserve), and a slow-path
// reservation attempt (Reserve: the pick without a start).
func (s *planSession) life(me int64) {
	s.t.Helper()
	ctx := context.Background()
	u := []uuid.UUID{uuid.New(), uuid.New()}
	_, err := allocation.New(s.conn).CreateAllocations(ctx, allocation.CreateAllocationsParams{
		Uuids: u, HasNames: []bool{false, false}, Names: []string{"", ""},
		ResourceClasses: []string{"gold", "gold"}, Extras: []string{"{}", "{}"},
		HasOwners: []bool{false, false}, Owners: []string{"", ""},
		TraitUuids: u, Traits: []string{"CUSTOM_A", "CUSTOM_C"},
	})
	require.NoError(s.t, err)
	// The API's numbering of the insert's events (the hub, every few ms).
	s.exec(`SELECT metalloc_sequence_allocation_events()`)
	_, err = New(s.conn).ClaimReserve(ctx, ClaimReserveParams{Me: me, Batch: 8})
	require.NoError(s.t, err)
	_, err = New(s.conn).Reserve(ctx, ReserveParams{Me: me, ResourceClass: "gold", Traits: []string{"CUSTOM_B"}})
	if err != pgx.ErrNoRows {
		require.NoError(s.t, err)
	}
}

// shapes are the plans logged that read nodes or node_traits, by query
// text: each plan's nodes with their relation and index, without costs or
// conditions (the distinct shapes of a text, sorted, if it ran with more
// than one).
func (s *planSession) shapes() map[string]string {
	all := map[string][]string{}
	for _, doc := range s.Plans() {
		var p struct {
			Query string          `json:"Query Text"`
			Plan  json.RawMessage `json:"Plan"`
		}
		require.NoError(s.t, json.Unmarshal([]byte(doc), &p), doc)
		var b strings.Builder
		planShape(s.t, &b, p.Plan, 0)
		// The walk reads nodes in id order from its start through either
		// index: which one is cheaper depends on the share of nodes that
		// are free, what statistics are for.
		shape := strings.ReplaceAll(b.String(), "using nodes_free_idx", "using nodes_pkey")
		if !strings.Contains(shape, " on nodes") && !strings.Contains(shape, " on node_traits") && !strings.Contains(shape, " on allocations") && !strings.Contains(shape, " on allocation_events") {
			continue
		}
		q := strings.Join(strings.Fields(p.Query), " ")
		if !slices.Contains(all[q], shape) {
			all[q] = append(all[q], shape)
		}
	}
	out := map[string]string{}
	for q, shapes := range all {
		slices.Sort(shapes)
		out[q] = strings.Join(shapes, "--\n")
	}
	return out
}

// planShape writes one line per plan node of an EXPLAIN (FORMAT JSON)
// plan: its type, relation and index, indented by depth.
func planShape(t *testing.T, b *strings.Builder, raw json.RawMessage, depth int) {
	var n struct {
		Type     string            `json:"Node Type"`
		Relation string            `json:"Relation Name"`
		Index    string            `json:"Index Name"`
		Parent   string            `json:"Parent Relationship"`
		Plans    []json.RawMessage `json:"Plans"`
	}
	require.NoError(t, json.Unmarshal(raw, &n))
	fmt.Fprintf(b, "%s%s %s", strings.Repeat("  ", depth), n.Parent, n.Type)
	if n.Relation != "" {
		fmt.Fprintf(b, " on %s", n.Relation)
	}
	if n.Index != "" {
		fmt.Fprintf(b, " using %s", n.Index)
	}
	b.WriteByte('\n')
	for _, c := range n.Plans {
		planShape(t, b, c, depth+1)
	}
}
