package candidate

import (
	"slices"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
)

// The search is a pure function of the loaded world and the request: these
// tests build the world from rows, as the SQL loading would, and run it
// without a database or HTTP.

const (
	rcVCPU   int32 = 0
	rcMemory int32 = 1
	traitX   int64 = 7
)

// inv is an inventory of total units with Placement's defaults.
func inv(rc, total int32) cInv {
	return cInv{rc: rc, total: total, minUnit: 1, maxUnit: total, step: 1, ratio: 1}
}

// provUUID is a readable uuid for provider id.
func provUUID(id int64) uuid.UUID { return uuid.UUID{15: byte(id)} }

// testRows is a world's rows with its usage.
type testRows struct {
	provs  []provRow
	traits []traitRow
	aggs   []aggRow
	invs   []invRow
	usage  []usageRow
}

// search runs the request groups over rows and returns, per candidate, the
// ids of the providers of each group (sorted within a group).
func search(t *testing.T, rows *testRows, groups ...*cGroupQ) [][][]int64 {
	return searchCap(t, rows, "", 0, groups...)
}

// searchCap is search with a group_policy and a cap (0: none).
func searchCap(t *testing.T, rows *testRows, policy string, limit int, groups ...*cGroupQ) [][][]int64 {
	t.Helper()
	s := &cSearch{req: &Request{GroupPolicy: policy}, groups: groups, classNames: map[int32]string{rcVCPU: "VCPU", rcMemory: "MEMORY_MB"},
		sharingID: -1, traitNames: map[int64]string{}, cap: limit}
	for _, g := range groups {
		s.req.Groups = append(s.req.Groups, g.Group)
	}
	var out [][][]int64
	w := buildWorld(&worldRows{provs: rows.provs, traits: rows.traits, aggs: rows.aggs, invs: rows.invs}, -1, 0)
	s.usage = make([]int64, w.nInv)
	w.usageInto(s.usage, rows.usage)
	for _, a := range s.collect(w, map[string]bool{}) {
		var cand [][]int64
		for _, ps := range a.mappings {
			var ids []int64
			for _, p := range ps {
				ids = append(ids, p.id)
			}
			slices.Sort(ids)
			cand = append(cand, ids)
		}
		out = append(out, cand)
	}
	return out
}

// group is a request group for amounts of classes (rc, amount pairs).
func group(suffix string, classes ...cClass) *cGroupQ {
	return &cGroupQ{Group: &Group{Suffix: suffix, SameProvider: suffix != ""}, classes: classes}
}

func TestSearchSingleProvidersCapacityAndTraits(t *testing.T) {
	rows := &testRows{
		provs:  []provRow{{id: 1, root: 1, uuid: provUUID(1)}, {id: 2, root: 2, uuid: provUUID(2)}, {id: 3, root: 3, uuid: provUUID(3)}},
		invs:   []invRow{{1, inv(rcVCPU, 8)}, {2, inv(rcVCPU, 2)}, {3, inv(rcVCPU, 4)}},
		usage:  []usageRow{{pid: 2, rc: rcVCPU, used: 1}}, // 1 of 2 left: too little for 2
		traits: []traitRow{{3, traitX}},
	}
	need := cClass{rc: rcVCPU, name: "VCPU", amount: 2}
	require.Equal(t, [][][]int64{{{1}}, {{3}}}, search(t, rows, group("", need)))

	withX := group("", need)
	withX.requiredIDs = [][]int64{{traitX}}
	require.Equal(t, [][][]int64{{{3}}}, search(t, rows, withX))

	withoutX := group("", need)
	withoutX.forbiddenIDs = []int64{traitX}
	require.Equal(t, [][][]int64{{{1}}}, search(t, rows, withoutX))

	// max_unit and step_size bound a single request too.
	rows.invs[0].inv.maxUnit = 1
	require.Equal(t, [][][]int64{{{3}}}, search(t, rows, group("", need)))
}

// A tree: the unsuffixed group may take its classes from several providers
// of one tree; granular groups each take theirs from one provider.
func TestSearchTreesAndGranularGroups(t *testing.T) {
	rows := &testRows{
		provs: []provRow{
			{id: 1, root: 1, uuid: provUUID(1)},            // compute node: memory
			{id: 2, parent: 1, root: 1, uuid: provUUID(2)}, // NUMA 0: VCPU
			{id: 3, parent: 1, root: 1, uuid: provUUID(3)}, // NUMA 1: VCPU
		},
		invs: []invRow{{1, inv(rcMemory, 1024)}, {2, inv(rcVCPU, 4)}, {3, inv(rcVCPU, 4)}},
	}
	vcpu := cClass{rc: rcVCPU, name: "VCPU", amount: 2}
	mem := cClass{rc: rcMemory, name: "MEMORY_MB", amount: 512}
	// One group, both classes: the root's memory with either NUMA node's CPUs.
	require.ElementsMatch(t, [][][]int64{{{1, 2}}, {{1, 3}}}, search(t, rows, group("", vcpu, mem)))
	// More CPUs than one NUMA node has, in one granular group: nothing.
	require.Empty(t, search(t, rows, group("1", cClass{rc: rcVCPU, name: "VCPU", amount: 6})))
	// Two granular groups of 2 CPUs: any NUMA node for each (group_policy
	// none lets them share one).
	got := search(t, rows, group("1", vcpu), group("2", vcpu))
	require.NotEmpty(t, got)
	for _, c := range got {
		require.Len(t, c, 2)
		require.Len(t, c[0], 1)
		require.Len(t, c[1], 1)
	}
}

// A capped search returns the first candidates of the full search, in the
// same order: on a wide tree (a root with 4 children, 3 isolated granular
// groups: 4*3*2 = 24 of 64 combinations) and across roots.
func TestSearchCapIsPrefix(t *testing.T) {
	rows := &testRows{}
	for r := int64(1); r <= 2; r++ {
		root := r * 10
		rows.provs = append(rows.provs, provRow{id: root, root: root, uuid: provUUID(root)})
		for c := int64(1); c <= 4; c++ {
			rows.provs = append(rows.provs, provRow{id: root + c, parent: root, root: root, uuid: provUUID(root + c)})
			rows.invs = append(rows.invs, invRow{root + c, inv(rcVCPU, 4)})
		}
	}
	need := cClass{rc: rcVCPU, name: "VCPU", amount: 1}
	groups := func() []*cGroupQ { return []*cGroupQ{group("1", need), group("2", need), group("3", need)} }
	all := searchCap(t, rows, "isolate", 0, groups()...)
	require.Len(t, all, 48)
	for _, limit := range []int{1, 5, 24, 30, 48, 100} {
		require.Equal(t, all[:min(limit, len(all))], searchCap(t, rows, "isolate", limit, groups()...), "limit %d", limit)
	}
	// Without isolate every combination counts: 2 * 4^3.
	require.Len(t, searchCap(t, rows, "none", 0, groups()...), 128)
	require.Len(t, searchCap(t, rows, "none", 7, groups()...), 7)
}
