package topology

import (
	"context"
	"slices"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/metalloc/metalloc/db/dbtest"
)

func setExtra(t *testing.T, pool *pgxpool.Pool, id int64, extra string) {
	t.Helper()
	if _, err := pool.Exec(context.Background(), `UPDATE nodes SET extra = $2::jsonb WHERE id = $1`, id, extra); err != nil {
		t.Fatal(err)
	}
}

func TestSaveLoad(t *testing.T) {
	pool := dbtest.New(t)
	ctx := t.Context()
	if got, err := Load(ctx, pool); err != nil || len(got) != 0 {
		t.Fatalf("empty topology: %v %v", got, err)
	}
	want := []Level{{"row", "extra.row"}, {"rack", "trait:CUSTOM_RACK_"}}
	if err := Save(ctx, pool, want); err != nil {
		t.Fatal(err)
	}
	got, err := Load(ctx, pool)
	if err != nil || !slices.Equal(got, want) {
		t.Fatalf("Load = %v, %v; want %v", got, err, want)
	}
	// Replacing: fewer levels, the old ones gone.
	want = []Level{{"aggr", "aggregate"}}
	if err := Save(ctx, pool, want); err != nil {
		t.Fatal(err)
	}
	if got, _ := Load(ctx, pool); !slices.Equal(got, want) {
		t.Fatalf("Load = %v; want %v", got, want)
	}
	// Invalid lists are refused before the database.
	if err := Save(ctx, pool, []Level{{"rack", "extra.rack"}, {"rack", "extra.r"}}); err == nil {
		t.Fatal("duplicate names saved")
	}
	if err := Save(ctx, pool, nil); err != nil {
		t.Fatal(err)
	}
	if got, _ := Load(ctx, pool); len(got) != 0 {
		t.Fatalf("after clearing: %v", got)
	}
}

// TestSaveConcurrent: concurrent replacements are serialised (no unique
// violation), the last one wins whole.
func TestSaveConcurrent(t *testing.T) {
	pool := dbtest.New(t)
	ctx := t.Context()
	lists := [][]Level{
		{{"row", "extra.row"}, {"rack", "extra.rack"}},
		{{"rack", "extra.rack"}},
		{{"block", "properties.block"}, {"row", "extra.row"}, {"rack", "extra.rack"}},
	}
	errs := make(chan error, 30)
	for i := range 30 {
		go func() { errs <- Save(ctx, pool, lists[i%len(lists)]) }()
	}
	for range 30 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	got, err := Load(ctx, pool)
	if err != nil || !slices.ContainsFunc(lists, func(l []Level) bool { return slices.Equal(l, got) }) {
		t.Fatalf("Load = %v, %v: not one of the saved lists", got, err)
	}
}

func TestFreeCandidates(t *testing.T) {
	pool := dbtest.New(t)
	ctx := t.Context()
	if err := Save(ctx, pool, []Level{
		{"row", "extra.row"}, {"rack", "trait:CUSTOM_RACK_"}, {"aggr", "aggregate"}, {"u", "properties.u"},
	}); err != nil {
		t.Fatal(err)
	}
	owner := "p1"
	a, ua := dbtest.Node(t, pool, dbtest.NodeSpec{Traits: []string{"CUSTOM_RACK_07", "CUSTOM_RACK_03", "CUSTOM_GPU"},
		Properties: map[string]any{"u": 12}})
	setExtra(t, pool, a, `{"row": 1}`)
	b, ub := dbtest.Node(t, pool, dbtest.NodeSpec{Traits: []string{"CUSTOM_GPU"}, Owner: &owner})
	setExtra(t, pool, b, `{"row": "2"}`)
	c, _ := dbtest.Node(t, pool, dbtest.NodeSpec{Traits: []string{"CUSTOM_GPU"}, Maintenance: true})
	setExtra(t, pool, c, `{"row": "2"}`)
	dbtest.Node(t, pool, dbtest.NodeSpec{ResourceClass: "silver"})
	d, ud := dbtest.Node(t, pool, dbtest.NodeSpec{})
	// d's Placement provider is in two aggregates: the smaller uuid wins.
	agg1, agg2 := uuid.MustParse("00000000-0000-0000-0000-0000000000a1"), uuid.MustParse("00000000-0000-0000-0000-0000000000b2")
	if _, err := pool.Exec(ctx, `
		WITH rp AS (INSERT INTO placement.resource_providers (uuid, name) VALUES ($1::uuid, ($1::uuid)::text) RETURNING id)
		INSERT INTO placement.resource_provider_aggregates (resource_provider_id, aggregate_uuid)
		SELECT rp.id, unnest($2::uuid[]) FROM rp`, ud, []uuid.UUID{agg2, agg1}); err != nil {
		t.Fatal(err)
	}

	got, err := FreeCandidates(ctx, pool, Filter{ResourceClass: "gold"})
	if err != nil {
		t.Fatal(err)
	}
	want := []Candidate{
		{ID: a, UUID: ua, Path: []string{"1", "03", "", "12"}},
		{ID: b, UUID: ub, Path: []string{"2", "", "", ""}},
		{ID: d, UUID: ud, Path: []string{"", "", agg1.String(), ""}},
	}
	if !slices.EqualFunc(got, want, func(x, y Candidate) bool {
		return x.ID == y.ID && x.UUID == y.UUID && slices.Equal(x.Path, y.Path)
	}) {
		t.Fatalf("FreeCandidates =\n%v\nwant\n%v", got, want)
	}
	for _, tc := range []struct {
		name string
		f    Filter
		want []int64
	}{
		{"traits", Filter{ResourceClass: "gold", Traits: []string{"CUSTOM_GPU"}}, []int64{a, b}},
		{"owner", Filter{ResourceClass: "gold", Owner: &owner}, []int64{b}},
		{"candidates", Filter{ResourceClass: "gold", CandidateNodes: []uuid.UUID{ua, ud}}, []int64{a, d}},
		{"class", Filter{ResourceClass: "bronze"}, nil},
	} {
		got, err := FreeCandidates(ctx, pool, tc.f)
		if err != nil {
			t.Fatal(err)
		}
		var ids []int64
		for _, c := range got {
			ids = append(ids, c.ID)
		}
		if !slices.Equal(ids, tc.want) {
			t.Errorf("%s: ids %v, want %v", tc.name, ids, tc.want)
		}
	}
}
