package dbtest

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/metalloc/metalloc/driver"
)

// NodeSpec describes a node for Node. Zero values take the defaults noted.
type NodeSpec struct {
	// Name defaults to "node-" and 8 random hex digits.
	Name string
	// ResourceClass defaults to "gold".
	ResourceClass string
	// ProvisionState defaults to "available".
	ProvisionState string
	// PowerState defaults to "power off".
	PowerState string
	// Maintenance puts the node in maintenance.
	Maintenance bool
	// Traits are the node's traits.
	Traits []string
	// Owner and Lessee are the node's (nil: none).
	Owner, Lessee *string
	// Properties are the node's properties (nil: {}).
	Properties map[string]any
}

// Node inserts one node the way enrolment through the API leaves it, with
// its traits, and returns its id and uuid.
func Node(t testing.TB, pool *pgxpool.Pool, s NodeSpec) (int64, uuid.UUID) {
	t.Helper()
	if s.Name == "" {
		s.Name = "node-" + randomHex(4)
	}
	if s.ResourceClass == "" {
		s.ResourceClass = "gold"
	}
	if s.ProvisionState == "" {
		s.ProvisionState = "available"
	}
	if s.PowerState == "" {
		s.PowerState = "power off"
	}
	if s.Properties == nil {
		s.Properties = map[string]any{}
	}
	props, err := json.Marshal(s.Properties)
	if err != nil {
		t.Fatalf("dbtest: node properties: %v", err)
	}
	u := uuid.New()
	var id int64
	err = pgx.BeginFunc(context.Background(), pool, func(tx pgx.Tx) error {
		if err := tx.QueryRow(context.Background(), `
			INSERT INTO nodes (uuid, name, driver, resource_class, provision_state, power_state,
			                   maintenance, owner, lessee, properties)
			VALUES ($1, $2, 'fake-hardware', $3, $4, $5, $6, $7, $8, $9) RETURNING id`,
			u, s.Name, s.ResourceClass, s.ProvisionState, s.PowerState, s.Maintenance,
			s.Owner, s.Lessee, props).Scan(&id); err != nil {
			return err
		}
		_, err := tx.Exec(context.Background(),
			`INSERT INTO node_traits (node_id, trait) SELECT $1, unnest($2::text[])`, id, s.Traits)
		return err
	})
	if err != nil {
		t.Fatalf("dbtest: inserting node %s: %v", s.Name, err)
	}
	return id, u
}

// Nodes inserts n available, powered-off nodes of resource class rc, named
// rc-1 ... rc-n, in one statement.
func Nodes(t testing.TB, pool *pgxpool.Pool, n int, rc string) {
	t.Helper()
	if _, err := pool.Exec(context.Background(), `
		INSERT INTO nodes (uuid, name, driver, resource_class, provision_state, power_state)
		SELECT gen_random_uuid(), $2 || '-' || i, 'fake-hardware', $2, 'available', 'power off'
		  FROM generate_series(1, $1) i`, n, rc); err != nil {
		t.Fatalf("dbtest: inserting %d nodes of %s: %v", n, rc, err)
	}
}

// AllocationSpec describes an allocation for Allocation. Zero values take
// the defaults noted.
type AllocationSpec struct {
	// ResourceClass defaults to "gold".
	ResourceClass string
	// Traits are the requested traits.
	Traits []string
	// CandidateNodes limits the nodes the allocation may take (nil: any).
	CandidateNodes []uuid.UUID
	// Owner is the allocation's owner (nil: none).
	Owner *string
	// Conductor is the owning conductor's id (conductor_affinity); 0 leaves
	// the row unclaimed.
	Conductor int64
	// Node, when not 0, makes the allocation active on that node, which is
	// linked back (allocation_id, instance_uuid) in the same transaction.
	Node int64
}

// Allocation inserts one allocation, allocating unless s.Node is set, and
// returns its id and uuid.
func Allocation(t testing.TB, pool *pgxpool.Pool, s AllocationSpec) (int64, uuid.UUID) {
	t.Helper()
	if s.ResourceClass == "" {
		s.ResourceClass = "gold"
	}
	var affinity, node *int64
	if s.Conductor != 0 {
		affinity = &s.Conductor
	}
	state := "allocating"
	if s.Node != 0 {
		node, state = &s.Node, "active"
	}
	u := uuid.New()
	var id int64
	err := pgx.BeginFunc(context.Background(), pool, func(tx pgx.Tx) error {
		if err := tx.QueryRow(context.Background(), `
			INSERT INTO allocations (uuid, resource_class, candidate_nodes, owner, conductor_affinity, state, node_id)
			VALUES ($1, $2, $3, $4, $5, $6, $7) RETURNING id`,
			u, s.ResourceClass, s.CandidateNodes, s.Owner, affinity, state, node).Scan(&id); err != nil {
			return err
		}
		if _, err := tx.Exec(context.Background(),
			`INSERT INTO allocation_traits (allocation_id, trait) SELECT $1, unnest($2::text[])`, id, s.Traits); err != nil {
			return err
		}
		if node != nil {
			_, err := tx.Exec(context.Background(), `
				UPDATE nodes SET allocation_id = $2, instance_uuid = $3,
				       instance_info = jsonb_build_object('traits', $4::text[])
				 WHERE id = $1`, *node, id, u, s.Traits)
			return err
		}
		return nil
	})
	if err != nil {
		t.Fatalf("dbtest: inserting allocation: %v", err)
	}
	return id, u
}

// Conductor inserts a conductor row named hostname whose last heartbeat is
// heartbeatAge old, online or not, with a heartbeat timeout of a minute (its
// expiry, a minute after that heartbeat), serving the registry's hardware
// types (driver.Names, as metalloc-conductor registers), and returns its id.
// A conductor is dead when offline or heartbeatAge exceeds a minute.
func Conductor(t testing.TB, pool *pgxpool.Pool, hostname string, heartbeatAge time.Duration, online bool) int64 {
	t.Helper()
	var id int64
	if err := pool.QueryRow(context.Background(), `
		INSERT INTO conductors (hostname, online, heartbeat_at, expires_at, drivers)
		VALUES ($1, $2, now() - make_interval(secs => $3), now() - make_interval(secs => $3) + interval '1 minute', $4)
		RETURNING id`,
		hostname, online, heartbeatAge.Seconds(), driver.Names()).Scan(&id); err != nil {
		t.Fatalf("dbtest: inserting conductor %s: %v", hostname, err)
	}
	return id
}

// WaitFor calls cond every 10 ms until it returns true, and fails the test
// with what if that takes longer than timeout, after calling onFail (to log
// what the test saw). It is the tests' one way to wait for something to
// happen (WaitEvery for a costly cond); a test that must show something
// does not happen waits for an event that comes after it instead.
func WaitFor(t testing.TB, timeout time.Duration, what string, cond func() bool, onFail ...func()) {
	t.Helper()
	WaitEvery(t, timeout, 10*time.Millisecond, what, cond, onFail...)
}

// WaitEvery is WaitFor calling cond every interval: for a cond that costs
// more than a query (many HTTP requests, a log file read).
func WaitEvery(t testing.TB, timeout, interval time.Duration, what string, cond func() bool, onFail ...func()) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			for _, f := range onFail {
				f()
			}
			t.Fatalf("after %s: waiting for %s", timeout, what)
		}
		<-tick.C
	}
}

// Count runs a count query and returns its result, failing the test on
// error.
func Count(t testing.TB, pool *pgxpool.Pool, sql string, args ...any) int {
	t.Helper()
	var n int
	if err := pool.QueryRow(context.Background(), sql, args...).Scan(&n); err != nil {
		t.Fatalf("dbtest: %s: %v", sql, fmt.Errorf("counting: %w", err))
	}
	return n
}

// Strings runs sql, a query of one non-null text column, and returns its
// rows in order, failing the test on error.
func Strings(t testing.TB, pool *pgxpool.Pool, sql string, args ...any) []string {
	t.Helper()
	rows, err := pool.Query(context.Background(), sql, args...)
	var out []string
	if err == nil {
		out, err = pgx.CollectRows(rows, pgx.RowTo[string])
	}
	if err != nil {
		t.Fatalf("dbtest: %s: %v", sql, err)
	}
	return out
}

// Broken returns the allocation invariants that do not hold in pool's
// database, each as a sentence (none: all hold): a node holds at most one
// allocation, an active allocation's node names it back with the same
// instance, a node naming an allocation is named back by an active one.
func Broken(t testing.TB, pool *pgxpool.Pool) []string {
	t.Helper()
	checks := []struct{ what, sql string }{
		{"nodes booked twice", `SELECT count(*) FROM (SELECT node_id FROM allocations WHERE node_id IS NOT NULL
		                                              GROUP BY node_id HAVING count(*) > 1) d`},
		{"active allocations whose node does not hold them", `
			SELECT count(*) FROM allocations a LEFT JOIN nodes n ON n.id = a.node_id
			 WHERE a.state = 'active'
			   AND (n.id IS NULL OR n.allocation_id IS DISTINCT FROM a.id OR n.instance_uuid IS DISTINCT FROM a.uuid)`},
		{"nodes holding an allocation that is not active on them", `
			SELECT count(*) FROM nodes n LEFT JOIN allocations a ON a.id = n.allocation_id
			 WHERE n.allocation_id IS NOT NULL AND (a.state IS DISTINCT FROM 'active' OR a.node_id IS DISTINCT FROM n.id)`},
		{"allocations in error or allocating that hold a node", `
			SELECT count(*) FROM allocations WHERE state <> 'active' AND node_id IS NOT NULL`},
		{"active allocation groups whose members are not count", `
			SELECT count(*) FROM allocation_groups g
			 WHERE g.state = 'active' AND g.count <> (SELECT count(*) FROM allocations a WHERE a.group_id = g.id)`},
		{"allocation groups in error with members", `
			SELECT count(*) FROM allocation_groups g
			 WHERE g.state = 'error' AND EXISTS (SELECT 1 FROM allocations a WHERE a.group_id = g.id)`},
	}
	var out []string
	for _, c := range checks {
		if n := Count(t, pool, c.sql); n > 0 {
			out = append(out, fmt.Sprintf("%d %s", n, c.what))
		}
	}
	return out
}

// RackedNodes inserts racks*perRack available, powered-off nodes of class
// rc named rc-1 ..., perRack to a rack: extra.rack "r01", "r02", ...
// (two digits, then more) and extra.row "1" for the first half of the
// racks, "2" for the rest; the topology levels row=extra.row,
// rack=extra.rack read them (allocation groups).
func RackedNodes(t testing.TB, pool *pgxpool.Pool, racks, perRack int, rc string) {
	t.Helper()
	if _, err := pool.Exec(context.Background(), `
		INSERT INTO nodes (uuid, name, driver, resource_class, provision_state, power_state, extra)
		SELECT gen_random_uuid(), $3 || '-' || i, 'fake-hardware', $3, 'available', 'power off',
		       jsonb_build_object('row', CASE WHEN (i - 1) / $2::int < ($1::int + 1) / 2 THEN '1' ELSE '2' END,
		                          'rack', 'r' || lpad(((i - 1) / $2::int + 1)::text, 2, '0'))
		  FROM generate_series(1, $1::int * $2::int) i`, racks, perRack, rc); err != nil {
		t.Fatalf("dbtest: inserting %d racks of %d nodes of %s: %v", racks, perRack, rc, err)
	}
}

// Fleet inserts n nodes as the operator page's tests and benchmarks lay a
// fleet out: rows of 50 racks of 40 nodes (extra.row 1 + i/2000,
// extra.rack 1 + (i/40) mod 50, extra.slot), classes gold, silver, gpu and
// storage in turn, a fifth active with an instance, one in 50 manageable,
// one in 97 clean failed, one in 113 in maintenance, a third owned by
// project-a, two traits each (CUSTOM_T0..6, HW_CPU_X86_AVX0..1); then
// ANALYZE. A million takes a minute or two.
func Fleet(t testing.TB, pool *pgxpool.Pool, n int) {
	t.Helper()
	ctx := context.Background()
	if _, err := pool.Exec(ctx, `
		INSERT INTO nodes (uuid, name, driver, resource_class, provision_state, power_state, maintenance, instance_uuid, owner, extra)
		SELECT gen_random_uuid(), 'n' || i, 'fake-hardware', (ARRAY['gold','silver','gpu','storage'])[1 + i % 4],
		       CASE WHEN i % 5 = 1 THEN 'active' WHEN i % 50 = 0 THEN 'manageable' WHEN i % 97 = 0 THEN 'clean failed' ELSE 'available' END,
		       'power off', i % 113 = 0, CASE WHEN i % 5 = 1 THEN gen_random_uuid() END,
		       CASE WHEN i % 3 = 0 THEN 'project-a' END,
		       jsonb_build_object('row', 1 + i / 2000, 'rack', 1 + (i / 40) % 50, 'slot', 1 + i % 40)
		  FROM generate_series(0, $1::int - 1) i`, n); err != nil {
		t.Fatalf("dbtest: inserting a fleet of %d nodes: %v", n, err)
	}
	if _, err := pool.Exec(ctx, `
		INSERT INTO node_traits (node_id, trait)
		SELECT id, t FROM nodes, LATERAL (VALUES ('CUSTOM_T' || id % 7), ('HW_CPU_X86_AVX' || id % 2)) v (t);
		ANALYZE nodes, node_traits`); err != nil {
		t.Fatalf("dbtest: the fleet's traits: %v", err)
	}
}
