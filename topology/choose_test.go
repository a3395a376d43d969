package topology

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

var rowRack = []Level{{"row", "extra.row"}, {"rack", "extra.rack"}}

// fleet builds candidates: spec maps "row/rack" to a node count; ids
// ascend in the order of the sorted keys. A key "" is nodes with no path,
// "r/" nodes with a row but no rack.
func fleet(spec map[string]int) []Candidate {
	keys := make([]string, 0, len(spec))
	for k := range spec {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var out []Candidate
	id := int64(1)
	for _, k := range keys {
		path := []string{"", ""}
		if k != "" {
			row, rack, _ := strings.Cut(k, "/")
			path = []string{row, rack}
		}
		for range spec[k] {
			out = append(out, Candidate{ID: id, Path: slices.Clone(path)})
			id++
		}
	}
	return out
}

func domains(plans []Plan) []string {
	out := make([]string, len(plans))
	for i, p := range plans {
		out[i] = fmt.Sprintf("%s:%d", DomainName(p.Domain), p.Spare)
	}
	return out
}

func TestChooseRequired(t *testing.T) {
	cands := fleet(map[string]int{"1/01": 10, "1/02": 6, "1/03": 8, "2/01": 6, "2/02": 3, "": 20, "2/": 5})
	plans, nf := Choose(rowRack, cands, Request{Count: 6, Rule: Required, Level: 1}, nil)
	if nf != nil {
		t.Fatal(nf)
	}
	// Best fit first (spare 0: 1/02 and 2/01, by name without rng), then 1/03, 1/01.
	if got, want := domains(plans), []string{"1/02:0", "2/01:0", "1/03:2", "1/01:4"}; !slices.Equal(got, want) {
		t.Fatalf("plans %v, want %v", got, want)
	}
	for _, p := range plans {
		if len(p.Nodes) != 6+p.Spare {
			t.Errorf("plan %v has %d nodes", p.Domain, len(p.Nodes))
		}
		for _, n := range p.Nodes {
			if !under(n, p.Domain) {
				t.Errorf("plan %v holds node %v", p.Domain, n.Path)
			}
		}
	}
	// Row level: row 2's nodes without a rack count for the row.
	plans, _ = Choose(rowRack, cands, Request{Count: 14, Rule: Required, Level: 0}, nil)
	if got, want := domains(plans), []string{"2:0", "1:10"}; !slices.Equal(got, want) {
		t.Fatalf("row plans %v, want %v", got, want)
	}
	// Inside the row, no rack holds 7: the largest rack's nodes first.
	plans, _ = Choose(rowRack, cands, Request{Count: 7, Rule: Required, Level: 0}, nil)
	if p := plans[0]; DomainName(p.Domain) != "2" || DomainName(p.Nodes[0].Path) != "2/01" {
		t.Fatalf("first plan %v starts with %v, want row 2 from rack 2/01", p.Domain, p.Nodes[0].Path)
	}
	// A rack holds 8: the best-fitting one first.
	plans, _ = Choose(rowRack, cands, Request{Count: 8, Rule: Required, Level: 0}, nil)
	if p := plans[1]; DomainName(p.Domain) != "1" || DomainName(p.Nodes[0].Path) != "1/03" {
		t.Fatalf("row 1 plan starts with %v, want rack 1/03 (best fit for 8)", p.Nodes[0].Path)
	}
	// Within: grow in rack 1/01 only.
	plans, _ = Choose(rowRack, cands, Request{Count: 6, Rule: Required, Level: 1, Within: []string{"1", "01"}}, nil)
	if got, want := domains(plans), []string{"1/01:4"}; !slices.Equal(got, want) {
		t.Fatalf("within plans %v, want %v", got, want)
	}
}

func TestChooseRandomTies(t *testing.T) {
	cands := fleet(map[string]int{"1/01": 4, "1/02": 4, "1/03": 4, "1/04": 9})
	seen := map[string]int{}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 300 {
		plans, nf := Choose(rowRack, cands, Request{Count: 4, Rule: Required, Level: 1}, rng)
		if nf != nil {
			t.Fatal(nf)
		}
		seen[DomainName(plans[0].Domain)]++
		if last := plans[len(plans)-1]; DomainName(last.Domain) != "1/04" {
			t.Fatalf("last plan %v, want 1/04", last.Domain)
		}
	}
	for _, d := range []string{"1/01", "1/02", "1/03"} {
		if seen[d] < 50 {
			t.Errorf("tie %s chosen first %d times in 300: %v", d, seen[d], seen)
		}
	}
}

func TestChooseNoFit(t *testing.T) {
	cands := fleet(map[string]int{"1/01": 5, "1/02": 6, "1/03": 5, "1/04": 5, "2/01": 2, "2/02": 1, "": 9})
	for _, tc := range []struct {
		cands []Candidate
		req   Request
		want  string
	}{
		{cands, Request{Count: 8, Rule: Required, Level: 1, Describe: Describe("baremetal-gpu", []string{"CUSTOM_A100"})},
			"no rack has 8 free nodes of baremetal-gpu with CUSTOM_A100: best is 1/02 with 6; 3 racks have 5; 2 more have fewer"},
		{cands, Request{Count: 6, Rule: Required, Level: 1, Within: []string{"2"}},
			"no rack in 2 has 6 free nodes: best is 2/01 with 2; 1 rack has 1"},
		{cands, Request{Count: 30, Rule: Required, Level: 0},
			"no row has 30 free nodes: best is 1 with 21; 1 row has 3"},
		{fleet(map[string]int{"1/01": 3, "1/02": 3}), Request{Count: 4, Rule: Required, Level: 1},
			"no rack has 4 free nodes: best is 1/01 with 3 (as is 1 more rack)"},
		{nil, Request{Count: 4, Rule: Required, Level: 1, Describe: "of gold"}, "no rack has 4 free nodes of gold: none is free"},
		{fleet(map[string]int{"": 7}), Request{Count: 4, Rule: Required, Level: 1},
			"no rack has 4 free nodes: none of the 7 free nodes is in a rack (its topology value is missing)"},
		{cands, Request{Count: 4, Rule: Required, Level: 1, Within: []string{"3"}},
			"no rack in 3 has 4 free nodes: none of the 33 free nodes is in 3"},
		{cands, Request{Count: 40, Rule: Preferred, Level: 1, Describe: "of gold"}, "not enough free nodes of gold: 40 wanted, 33 free"},
		{cands, Request{Count: 40}, "not enough free nodes: 40 wanted, 33 free"},
		{cands, Request{Count: 4, Rule: Required, Level: 2}, "no topology level 2: 2 levels are configured"},
		{cands, Request{Count: 0}, "invalid count 0: a group needs at least one node"},
	} {
		plans, nf := Choose(rowRack, tc.cands, tc.req, nil)
		if nf == nil {
			t.Errorf("%+v: plans %v, want NoFit", tc.req, domains(plans))
			continue
		}
		if nf.Error() != tc.want {
			t.Errorf("%+v:\n got %q\nwant %q", tc.req, nf.Error(), tc.want)
		}
	}
}

func TestChoosePreferred(t *testing.T) {
	cands := fleet(map[string]int{"1/01": 5, "1/02": 6, "1/03": 5, "2/01": 7, "2/02": 6, "2/03": 2, "": 3})
	// A rack fits: the best fit first, then the other fitting racks, then
	// spans, then anywhere.
	plans, nf := Choose(rowRack, cands, Request{Count: 6, Rule: Preferred, Level: 1}, nil)
	if nf != nil {
		t.Fatal(nf)
	}
	if got, want := domains(plans), []string{"1/02:0", "2/02:0", "2/01:1", ":28"}; !slices.Equal(got, want) {
		t.Fatalf("plans %v, want %v", got, want)
	}
	// No rack holds 10: the fewest racks under one row (row 2: 7+6, two
	// racks; row 1: 6+5, two racks, spare 6 vs 5), then anywhere.
	plans, _ = Choose(rowRack, cands, Request{Count: 10, Rule: Preferred, Level: 1}, nil)
	if got, want := domains(plans), []string{"2:5", "1:6", ":24"}; !slices.Equal(got, want) {
		t.Fatalf("plans %v, want %v", got, want)
	}
	if got := DomainName(plans[0].Nodes[0].Path); got != "2/01" {
		t.Fatalf("span starts in %s, want the largest rack 2/01", got)
	}
	// Prefer: growing where the group sits.
	plans, _ = Choose(rowRack, cands, Request{Count: 5, Rule: Preferred, Level: 1, Prefer: []string{"2", "01"}}, nil)
	if DomainName(plans[0].Domain) != "2/01" {
		t.Fatalf("preferred first %v", domains(plans))
	}
	// Across rows: the fleet plan, largest racks first, pathless nodes last.
	plans, _ = Choose(rowRack, cands, Request{Count: 30, Rule: Preferred, Level: 1}, nil)
	if got, want := domains(plans), []string{":4"}; !slices.Equal(got, want) {
		t.Fatalf("plans %v, want %v", got, want)
	}
	if n := plans[0].Nodes; DomainName(n[0].Path) != "2/01" || n[len(n)-1].Path[0] != "" {
		t.Fatalf("fleet plan order: first %v last %v", n[0].Path, n[len(n)-1].Path)
	}
}

func TestChooseNone(t *testing.T) {
	cands := fleet(map[string]int{"1/01": 5, "1/02": 3, "2/01": 4, "": 2})
	plans, nf := Choose(rowRack, cands, Request{Count: 3}, nil)
	if nf != nil || len(plans) != 1 || plans[0].Spare != 11 || len(plans[0].Nodes) != 14 {
		t.Fatalf("plans %v, %v", plans, nf)
	}
	// The best-fitting rack (1/02 holds exactly 3) first.
	if got := DomainName(plans[0].Nodes[0].Path); got != "1/02" {
		t.Fatalf("first node in %s, want 1/02", got)
	}
	// No rack holds 7: the best-fitting row (row 1, 8 nodes) first.
	plans, _ = Choose(rowRack, cands, Request{Count: 7}, nil)
	if got := plans[0].Nodes[0].Path[0]; got != "1" {
		t.Fatalf("first node in row %s, want 1", got)
	}
	// No topology at all: id order.
	plans, _ = Choose(nil, cands, Request{Count: 3, Rule: None}, nil)
	if plans[0].Nodes[0].ID != 1 {
		t.Fatalf("first node %v", plans[0].Nodes[0])
	}
}
