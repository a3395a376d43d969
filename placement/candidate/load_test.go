package candidate

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/metalloc/metalloc/db/dbtest"
	"github.com/metalloc/metalloc/web"
)

// flatWorld inserts n flat providers like bare-metal nodes and computes:
// provider k has one of four custom classes (k % 4, total 1), every third
// one also VCPU 8 (reserved 1, step 2 on every sixth) and MEMORY_MB 4096,
// traits CUSTOM_A on even k and CUSTOM_B on every fifth; the class unit
// of every seventh is used, and 2 VCPU of every ninth. It returns the
// pool, analyzed.
func flatWorld(t *testing.T, n int) *pgxpool.Pool {
	t.Helper()
	pool := dbtest.New(t)
	ctx := context.Background()
	for _, sql := range []string{
		`INSERT INTO placement.resource_classes (id, name)
			SELECT 10000 + g, 'CUSTOM_NODE_' || g FROM generate_series(0, 3) g`,
		`INSERT INTO placement.traits (name) VALUES ('CUSTOM_A'), ('CUSTOM_B')`,
		`INSERT INTO placement.resource_providers (uuid, name)
			SELECT gen_random_uuid(), 'node-' || g FROM generate_series(0, $1 - 1) g`,
		`UPDATE placement.resource_providers SET root_provider_id = id`,
		`CREATE TABLE k AS SELECT id AS pid, split_part(name, '-', 2)::int AS k FROM placement.resource_providers`,
		`INSERT INTO placement.inventories (resource_provider_id, resource_class_id, total, max_unit)
			SELECT pid, 10000 + k % 4, 1, 1 FROM k`,
		`INSERT INTO placement.inventories (resource_provider_id, resource_class_id, total, reserved, max_unit, step_size)
			SELECT pid, rc.id, 8, 1, 8, CASE WHEN k % 6 = 0 THEN 2 ELSE 1 END
			  FROM k, placement.resource_classes rc WHERE k % 3 = 0 AND rc.name = 'VCPU'`,
		`INSERT INTO placement.inventories (resource_provider_id, resource_class_id, total, max_unit)
			SELECT pid, rc.id, 4096, 4096 FROM k, placement.resource_classes rc WHERE k % 3 = 0 AND rc.name = 'MEMORY_MB'`,
		`INSERT INTO placement.resource_provider_traits (resource_provider_id, trait_id)
			SELECT pid, t.id FROM k, placement.traits t
			 WHERE (t.name = 'CUSTOM_A' AND k % 2 = 0) OR (t.name = 'CUSTOM_B' AND k % 5 = 0)`,
		`INSERT INTO placement.consumers (uuid, project_id, user_id)
			SELECT gen_random_uuid(), 'p', 'u' FROM generate_series(1, 2)`,
		`INSERT INTO placement.allocations (resource_provider_id, consumer_id, resource_class_id, used)
			SELECT pid, (SELECT min(id) FROM placement.consumers), 10000 + k % 4, 1 FROM k WHERE k % 7 = 0`,
		`INSERT INTO placement.allocations (resource_provider_id, consumer_id, resource_class_id, used)
			SELECT pid, (SELECT max(id) FROM placement.consumers), rc.id, 2
			  FROM k, placement.resource_classes rc WHERE k % 9 = 0 AND k % 3 = 0 AND rc.name = 'VCPU'`,
		`ANALYZE`,
	} {
		var args []any
		if bytes.Contains([]byte(sql), []byte("$1")) {
			args = []any{n}
		}
		_, err := pool.Exec(ctx, sql, args...)
		require.NoError(t, err, sql)
	}
	return pool
}

// findAnswer is Find's JSON answer to req at 1.39 (not randomized).
func findAnswer(t *testing.T, f *Finder, req *Request) string {
	t.Helper()
	res, err := f.Find(context.Background(), req, web.Version{Major: 1, Minor: 39})
	require.NoError(t, err)
	var buf bytes.Buffer
	require.NoError(t, res.Write(&buf))
	return buf.String()
}

// On flat providers, the batched SQL search of limited requests
// (candidateRoots driven by one class's inventories, flatRootsSQL) gives
// exactly the answer of the search of the whole world in memory: the
// first candidates in provider order, whatever the classes, amounts,
// step sizes, usage and traits, at limits below, at and above the batch
// sizes.
func TestCandidateRootsFlatMatchesWholeWorld(t *testing.T) {
	t.Parallel()
	pool := flatWorld(t, 600)
	sqlSearch := NewFinder(pool, func() bool { return false })
	sqlSearch.maxCached = 0 // every world is large: limited requests search batches
	memSearch := NewFinder(pool, func() bool { return false })
	memSearch.maxCached = 1 << 40
	groups := []*Group{
		{Resources: []ResourceAmount{{"CUSTOM_NODE_1", 1}}},
		{Resources: []ResourceAmount{{"CUSTOM_NODE_2", 1}}, Required: [][]string{{"CUSTOM_A"}}},
		{Resources: []ResourceAmount{{"CUSTOM_NODE_2", 1}}, Required: [][]string{{"CUSTOM_A"}, {"CUSTOM_B"}}},
		{Resources: []ResourceAmount{{"CUSTOM_NODE_0", 1}}, Forbidden: []string{"CUSTOM_B"}},
		{Resources: []ResourceAmount{{"CUSTOM_NODE_1", 1}}, Required: [][]string{{"CUSTOM_A", "CUSTOM_B"}}},
		{Resources: []ResourceAmount{{"VCPU", 2}, {"MEMORY_MB", 1024}}},
		{Resources: []ResourceAmount{{"VCPU", 1}}}, // step 2 on every sixth
		{Resources: []ResourceAmount{{"VCPU", 6}}}, // only where 2 are not used
		{Resources: []ResourceAmount{{"VCPU", 8}}}, // none: 1 reserved
		{Resources: []ResourceAmount{{"MEMORY_MB", 1}, {"CUSTOM_NODE_3", 1}}, Required: [][]string{{"CUSTOM_B"}}},
	}
	for i, g := range groups {
		for _, limit := range []int{1, 3, 50, 64, 129, 1000} {
			req := &Request{Groups: []*Group{g}, Limit: limit}
			name := fmt.Sprintf("group %d limit %d", i, limit)
			want := findAnswer(t, memSearch, req)
			got := findAnswer(t, sqlSearch, req)
			require.JSONEq(t, want, got, name)
			var doc struct {
				AllocationRequests []any `json:"allocation_requests"`
			}
			require.NoError(t, json.Unmarshal([]byte(got), &doc))
			if i != 8 {
				require.NotEmpty(t, doc.AllocationRequests, name)
			}
		}
	}
}

// planNode is a node of EXPLAIN (FORMAT JSON)'s plan.
type planNode struct {
	NodeType     string     `json:"Node Type"`
	Relation     string     `json:"Relation Name"`
	Index        string     `json:"Index Name"`
	ActualRows   float64    `json:"Actual Rows"`
	ActualLoops  float64    `json:"Actual Loops"`
	RowsRemoved  float64    `json:"Rows Removed by Filter"`
	ParentRel    string     `json:"Parent Relationship"`
	Plans        []planNode `json:"Plans"`
	SubplanName  string     `json:"Subplan Name"`
	SharedHit    float64    `json:"Shared Hit Blocks"`
	SharedRead   float64    `json:"Shared Read Blocks"`
	IndexCond    string     `json:"Index Cond"`
	FilterString string     `json:"Filter"`
}

// walk calls fn on n and every node below it.
func (n *planNode) walk(fn func(*planNode)) {
	fn(n)
	for i := range n.Plans {
		n.Plans[i].walk(fn)
	}
}

// The flat root walk reads the inventories of the requested class in
// provider order from the index and stops at its limit: it never scans
// the providers (or all inventories), and the rows it reads are about
// the limit times the share of the class, not the number of providers.
func TestCandidateRootsFlatPlanReadsOneClass(t *testing.T) {
	t.Parallel()
	const n = 4000
	pool := flatWorld(t, n)
	ctx := context.Background()
	var rc int32
	var traitA int64
	require.NoError(t, pool.QueryRow(ctx, `SELECT id FROM placement.resource_classes WHERE name = 'CUSTOM_NODE_2'`).Scan(&rc))
	require.NoError(t, pool.QueryRow(ctx, `SELECT id FROM placement.traits WHERE name = 'CUSTOM_A'`).Scan(&traitA))
	for _, g := range []*cGroupQ{
		{Group: &Group{}, classes: []cClass{{rc: rc, amount: 1}}},
		{Group: &Group{}, classes: []cClass{{rc: rc, amount: 1}}, requiredIDs: [][]int64{{traitA}}},
	} {
		const limit = 100
		s := &cSearch{groups: []*cGroupQ{g}}
		sql, args := candidateRootsSQL(s, 0, limit)
		var raw []byte
		// A generic plan too: pgx prepares the statement, and PostgreSQL
		// may switch to one after five runs.
		for _, mode := range []string{"force_custom_plan", "force_generic_plan"} {
			tx, err := pool.Begin(ctx)
			require.NoError(t, err)
			_, err = tx.Exec(ctx, "SET LOCAL plan_cache_mode = "+mode)
			require.NoError(t, err)
			_, err = tx.Exec(ctx, rootWalkSettings)
			require.NoError(t, err)
			require.NoError(t, tx.QueryRow(ctx, "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) "+sql, args...).Scan(&raw))
			require.NoError(t, tx.Rollback(ctx))
			var doc []struct {
				Plan planNode `json:"Plan"`
			}
			require.NoError(t, json.Unmarshal(raw, &doc), string(raw))
			root := &doc[0].Plan
			var driving *planNode
			var read float64
			root.walk(func(p *planNode) {
				switch {
				case p.NodeType == "Seq Scan" || p.NodeType == "Bitmap Heap Scan":
					t.Errorf("%s: %s on %s in the plan:\n%s", mode, p.NodeType, p.Relation, raw)
				case p.Relation == "resource_providers":
					t.Errorf("%s: the walk reads the providers:\n%s", mode, raw)
				case p.Relation == "inventories" && p.Index == "inventories_class_provider_idx" && p.ActualLoops == 1 && driving == nil:
					driving = p // one pass in index order, not a probe per row
				}
				if p.Relation != "" {
					read += (p.ActualRows + p.RowsRemoved) * max(p.ActualLoops, 1)
				}
			})
			require.NotNil(t, driving, "%s: the walk is not driven by inventories_class_provider_idx:\n%s", mode, raw)
			// 1 provider in 4 has the class (all of them the trait), 1 in 7
			// of those is used: the walk reads a few hundred rows of every
			// table together, not the 4,000 providers.
			require.Less(t, driving.ActualRows+driving.RowsRemoved, float64(3*limit), "%s:\n%s", mode, raw)
			require.Less(t, read, float64(n), "%s: rows read by the whole plan:\n%s", mode, raw)
		}
	}
}
