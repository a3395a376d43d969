package candidate

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/metalloc/metalloc/web"
)

// addTree adds one tree to pool's providers: a root with children
// children, each holding VCPU units (so that Placement's rules for nested
// trees apply to every request, and granular groups multiply).
func addTree(t *testing.T, pool *pgxpool.Pool, children, units int) {
	t.Helper()
	ctx := context.Background()
	for _, st := range []struct {
		sql  string
		args []any
	}{
		{`INSERT INTO placement.resource_providers (uuid, name) VALUES (gen_random_uuid(), 'tree')`, nil},
		{`UPDATE placement.resource_providers SET root_provider_id = id WHERE name = 'tree'`, nil},
		{`INSERT INTO placement.resource_providers (uuid, name, parent_provider_id, root_provider_id)
			SELECT gen_random_uuid(), 'tree-child-' || c, r.id, r.id
			  FROM placement.resource_providers r, generate_series(1, $1) c WHERE r.name = 'tree'`, []any{children}},
		{`INSERT INTO placement.inventories (resource_provider_id, resource_class_id, total, max_unit)
			SELECT p.id, rc.id, $1, $1 FROM placement.resource_providers p, placement.resource_classes rc
			 WHERE p.name LIKE 'tree-child-%' AND rc.name = 'VCPU'`, []any{units}},
		{`ANALYZE`, nil},
	} {
		_, err := pool.Exec(ctx, st.sql, st.args...)
		require.NoError(t, err, st.sql)
	}
}

// answerAt is Find's answer to req at v: the JSON body and whether it was
// streamed (searched again while written).
func answerAt(t *testing.T, f *Finder, req *Request, v web.Version) (string, bool) {
	t.Helper()
	res, err := f.Find(context.Background(), req, v)
	require.NoError(t, err)
	var buf bytes.Buffer
	require.NoError(t, res.Write(&buf))
	return buf.String(), res.ans.stream != nil
}

// countRequests is the number of allocation requests of a JSON answer.
func countRequests(t *testing.T, body string) int {
	t.Helper()
	var doc struct {
		AllocationRequests []json.RawMessage `json:"allocation_requests"`
	}
	require.NoError(t, json.Unmarshal([]byte(body), &doc))
	return len(doc.AllocationRequests)
}

// granular is n granular groups of VCPU:1.
func granular(n int) []*Group {
	var gs []*Group
	for i := 1; i <= n; i++ {
		gs = append(gs, &Group{Suffix: fmt.Sprint(i), SameProvider: true, Resources: []ResourceAmount{{"VCPU", 1}}})
	}
	return gs
}

// An answer too large to keep, written while it is searched again, is the
// answer kept in memory byte for byte: one group over flat providers,
// granular groups multiplied over a wide tree, before 1.29 on nested
// trees (candidates using two providers of one tree dropped, the limit
// applied after them, the summaries keeping the providers of every
// candidate), with and without limits.
func TestStreamedAnswerIsTheKeptAnswer(t *testing.T) {
	t.Parallel()
	pool := flatWorld(t, 2000)
	addTree(t, pool, 4, 6)
	streaming := NewFinder(pool, func() bool { return false })
	streaming.collectMax = 10
	keeping := NewFinder(pool, func() bool { return false })
	keeping.collectMax = -1
	v139, v128 := web.Version{Major: 1, Minor: 39}, web.Version{Major: 1, Minor: 28}
	oneClass := []*Group{{Resources: []ResourceAmount{{"CUSTOM_NODE_1", 1}}}}
	for _, c := range []struct {
		name   string
		req    *Request
		v      web.Version
		stream bool
	}{
		{"one class", &Request{Groups: oneClass}, v139, true},
		{"one class 1.28", &Request{Groups: oneClass}, v128, true},
		{"one class limit 300 1.28", &Request{Groups: oneClass, Limit: 300}, v128, true},
		{"one class limit 5", &Request{Groups: oneClass, Limit: 5}, v139, false},
		{"6 granular none", &Request{Groups: granular(6), GroupPolicy: "none"}, v139, true},
		{"6 granular none limit 2000", &Request{Groups: granular(6), GroupPolicy: "none", Limit: 2000}, v139, true},
		{"6 granular none 1.28", &Request{Groups: granular(6), GroupPolicy: "none"}, v128, true},
		{"4 granular isolate", &Request{Groups: granular(4), GroupPolicy: "isolate"}, v139, true},
	} {
		want, kept := answerAt(t, keeping, c.req, c.v)
		require.False(t, kept, c.name)
		got, streamed := answerAt(t, streaming, c.req, c.v)
		require.Equal(t, c.stream, streamed, c.name)
		require.Equal(t, want, got, c.name)
		require.NotZero(t, countRequests(t, got), c.name)
	}
}

// SetMax bounds the candidates one request generates, before limit and
// random sampling, whatever the path: an answer in order (streamed or
// not), a randomized one, the batched search of a limited request.
func TestMaxCandidates(t *testing.T) {
	t.Parallel()
	pool := flatWorld(t, 2000)
	req := func(limit int) *Request {
		return &Request{Groups: []*Group{{Resources: []ResourceAmount{{"CUSTOM_NODE_1", 1}}}}, Limit: limit}
	}
	v := web.Version{Major: 1, Minor: 39}
	unbounded := NewFinder(pool, func() bool { return false })
	unbounded.SetMax(-1)
	all := countRequests(t, findAnswer(t, unbounded, req(0)))
	require.Greater(t, all, 300, "the world has more candidates than the bounds below")

	inOrder := NewFinder(pool, func() bool { return false })
	inOrder.SetMax(100)
	random := NewFinder(pool, func() bool { return true })
	random.SetMax(100)
	batched := NewFinder(pool, func() bool { return false })
	batched.SetMax(100)
	batched.maxCached = 0 // limited requests search batches
	for _, f := range []*Finder{inOrder, random, batched} {
		for limit, want := range map[int]int{0: 100, 300: 100, 50: 50} {
			body, _ := answerAt(t, f, req(limit), v)
			require.Equal(t, want, countRequests(t, body), "limit %d", limit)
		}
	}
	inOrder.collectMax = 10
	body, streamed := answerAt(t, inOrder, req(0), v)
	require.True(t, streamed)
	require.Equal(t, 100, countRequests(t, body))
	require.Equal(t, DefaultMax, NewFinder(pool, func() bool { return false }).maxCandidates())
}
