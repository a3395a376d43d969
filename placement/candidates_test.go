package placement

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/metalloc/metalloc/placement/candidate"
	"github.com/metalloc/metalloc/web"
)

// acFixture builds providers with plain SQL for the candidate tests.
type acFixture struct {
	t    *testing.T
	srv  *httptest.Server
	pool *pgxpool.Pool
	name map[string]string // uuid -> name
}

func newACFixture(t *testing.T) *acFixture {
	srv, pool := invServer(t)
	return &acFixture{t: t, srv: srv, pool: pool, name: map[string]string{}}
}

func (f *acFixture) exec(sql string, args ...any) {
	f.t.Helper()
	_, err := f.pool.Exec(context.Background(), sql, args...)
	require.NoError(f.t, err)
}

// rp creates a provider (a root when parent is "") and returns its uuid.
func (f *acFixture) rp(name, parent string) string {
	f.t.Helper()
	id := uuid.NewString()
	if parent == "" {
		f.exec(`INSERT INTO placement.resource_providers (uuid, name) VALUES ($1, $2)`, id, name)
		f.exec(`UPDATE placement.resource_providers SET root_provider_id = id WHERE uuid = $1`, id)
	} else {
		f.exec(`INSERT INTO placement.resource_providers (uuid, name, parent_provider_id, root_provider_id)
			SELECT $1, $2, p.id, p.root_provider_id FROM placement.resource_providers p WHERE p.uuid = $3`, id, name, parent)
	}
	f.name[id] = name
	return id
}

// inv sets an inventory: total, reserved, min_unit, max_unit, step_size
// (max_unit 0 means total), allocation_ratio 1.
func (f *acFixture) inv(rp, class string, total, reserved, minUnit, maxUnit, step int, ratio float64) {
	f.t.Helper()
	if maxUnit == 0 {
		maxUnit = total
	}
	f.exec(`INSERT INTO placement.inventories (resource_provider_id, resource_class_id, total, reserved, min_unit, max_unit, step_size, allocation_ratio)
		SELECT p.id, rc.id, $3, $4, $5, $6, $7, $8 FROM placement.resource_providers p, placement.resource_classes rc
		 WHERE p.uuid = $1 AND rc.name = $2`, rp, class, total, reserved, minUnit, maxUnit, step, ratio)
}

func (f *acFixture) simpleInv(rp, class string, total int) { f.inv(rp, class, total, 0, 1, 0, 1, 1) }

func (f *acFixture) traits(rp string, names ...string) {
	f.t.Helper()
	for _, n := range names {
		f.exec(`INSERT INTO placement.traits (name) VALUES ($1) ON CONFLICT DO NOTHING`, n)
		f.exec(`INSERT INTO placement.resource_provider_traits (resource_provider_id, trait_id)
			SELECT p.id, t.id FROM placement.resource_providers p, placement.traits t WHERE p.uuid = $1 AND t.name = $2`, rp, n)
	}
}

func (f *acFixture) aggs(rp string, aggs ...string) {
	f.t.Helper()
	for _, a := range aggs {
		f.exec(`INSERT INTO placement.resource_provider_aggregates (resource_provider_id, aggregate_uuid)
			SELECT p.id, $2 FROM placement.resource_providers p WHERE p.uuid = $1`, rp, a)
	}
}

// use allocates amount of class on rp to a new consumer.
func (f *acFixture) use(rp, class string, amount int) {
	f.t.Helper()
	c := uuid.NewString()
	f.exec(`INSERT INTO placement.consumers (uuid, project_id, user_id) VALUES ($1, 'p', 'u')`, c)
	f.exec(`INSERT INTO placement.allocations (resource_provider_id, consumer_id, resource_class_id, used)
		SELECT p.id, c.id, rc.id, $4 FROM placement.resource_providers p, placement.consumers c, placement.resource_classes rc
		 WHERE p.uuid = $1 AND c.uuid = $2 AND rc.name = $3`, rp, c, class, amount)
}

// get calls GET /allocation_candidates?query at version.
func (f *acFixture) get(query, version string) (int, map[string]any) {
	f.t.Helper()
	st, _, body := call(f.t, f.srv, "GET", "/allocation_candidates?"+query, version, "")
	return st, body
}

// cands returns the candidates (dict form) as sorted strings
// "name:CLASS=N,name:CLASS=N" for easy comparison.
func (f *acFixture) cands(query, version string) []string {
	f.t.Helper()
	st, body := f.get(query, version)
	require.Equal(f.t, 200, st, "%v", body)
	var out []string
	for _, ar := range body["allocation_requests"].([]any) {
		var parts []string
		for rp, res := range ar.(map[string]any)["allocations"].(map[string]any) {
			for rc, n := range res.(map[string]any)["resources"].(map[string]any) {
				parts = append(parts, f.name[rp]+":"+rc+"="+itoa(n))
			}
		}
		sort.Strings(parts)
		s := ""
		for i, p := range parts {
			if i > 0 {
				s += ","
			}
			s += p
		}
		out = append(out, s)
	}
	sort.Strings(out)
	return out
}

func itoa(n any) string {
	if x, ok := n.(float64); ok {
		return strconv.FormatInt(int64(x), 10)
	}
	return "?"
}

// summaryNames are the names of the providers in provider_summaries.
func (f *acFixture) summaryNames(body map[string]any) []string {
	var out []string
	for u := range body["provider_summaries"].(map[string]any) {
		out = append(out, f.name[u])
	}
	sort.Strings(out)
	return out
}

func TestCandidatesSingleProviders(t *testing.T) {
	t.Parallel()
	f := newACFixture(t)
	cn1 := f.rp("cn1", "")
	f.simpleInv(cn1, "VCPU", 8)
	f.simpleInv(cn1, "MEMORY_MB", 4096)
	f.inv(cn1, "DISK_GB", 100, 10, 1, 50, 5, 1.0)
	f.traits(cn1, "HW_CPU_X86_AVX2", "CUSTOM_GOLD")
	cn2 := f.rp("cn2", "")
	f.inv(cn2, "VCPU", 4, 0, 1, 4, 1, 4.0)
	f.simpleInv(cn2, "MEMORY_MB", 1024)
	f.simpleInv(cn2, "DISK_GB", 1000)
	f.use(cn2, "VCPU", 15)

	q := "resources=VCPU:1,MEMORY_MB:512,DISK_GB:10"
	require.Equal(t, []string{
		"cn1:DISK_GB=10,cn1:MEMORY_MB=512,cn1:VCPU=1",
		"cn2:DISK_GB=10,cn2:MEMORY_MB=512,cn2:VCPU=1",
	}, f.cands(q, "1.12"))
	// Capacity with ratio: cn2 has (4-0)*4 = 16 VCPU, 15 used.
	require.Len(t, f.cands("resources=VCPU:2", "1.12"), 1)
	// max_unit, step_size, min_unit, reserved on cn1's DISK_GB.
	require.Equal(t, []string{"cn2:DISK_GB=60"}, f.cands("resources=DISK_GB:60", "1.12"))
	require.Equal(t, []string{"cn2:DISK_GB=7"}, f.cands("resources=DISK_GB:7", "1.12"))
	require.Len(t, f.cands("resources=DISK_GB:50", "1.12"), 2)
	// No candidates: 200 with empty lists.
	st, body := f.get("resources=VCPU:100", "1.39")
	require.Equal(t, 200, st)
	require.Equal(t, []any{}, body["allocation_requests"])
	require.Equal(t, map[string]any{}, body["provider_summaries"])

	// 1.10: list form; summaries with requested classes only, no traits.
	st, body = f.get("resources=VCPU:1", "1.10")
	require.Equal(t, 200, st)
	ars := body["allocation_requests"].([]any)
	require.Len(t, ars, 2)
	al := ars[0].(map[string]any)["allocations"].([]any)[0].(map[string]any)
	require.Contains(t, []string{cn1, cn2}, al["resource_provider"].(map[string]any)["uuid"])
	require.Equal(t, map[string]any{"VCPU": 1.0}, al["resources"])
	ps := body["provider_summaries"].(map[string]any)[cn2].(map[string]any)
	require.Equal(t, map[string]any{"resources": map[string]any{"VCPU": map[string]any{"capacity": 16.0, "used": 15.0}}}, ps)
	// 1.17 traits; 1.27 all classes; 1.29 parent/root; 1.34 mappings.
	_, body = f.get("resources=VCPU:1", "1.17")
	ps = body["provider_summaries"].(map[string]any)[cn1].(map[string]any)
	// In trait id order (standard first), as Placement.
	require.Equal(t, []any{"HW_CPU_X86_AVX2", "CUSTOM_GOLD"}, ps["traits"])
	require.Len(t, ps["resources"], 1)
	_, body = f.get("resources=VCPU:1", "1.27")
	ps = body["provider_summaries"].(map[string]any)[cn1].(map[string]any)
	require.Equal(t, map[string]any{"capacity": 90.0, "used": 0.0}, ps["resources"].(map[string]any)["DISK_GB"])
	require.NotContains(t, ps, "root_provider_uuid")
	_, body = f.get("resources=VCPU:1", "1.29")
	ps = body["provider_summaries"].(map[string]any)[cn1].(map[string]any)
	require.Nil(t, ps["parent_provider_uuid"])
	require.Contains(t, ps, "parent_provider_uuid")
	require.Equal(t, cn1, ps["root_provider_uuid"])
	require.NotContains(t, body["allocation_requests"].([]any)[0], "mappings")
	st, h, body := call(t, f.srv, "GET", "/allocation_candidates?resources=VCPU:1&required=CUSTOM_GOLD", "1.34", "")
	require.Equal(t, 200, st)
	require.Equal(t, "no-cache", h.Get("Cache-Control"))
	ar := body["allocation_requests"].([]any)[0].(map[string]any)
	require.Equal(t, map[string]any{"": []any{cn1}}, ar["mappings"])
	require.Equal(t, map[string]any{cn1: map[string]any{"resources": map[string]any{"VCPU": 1.0}}}, ar["allocations"])

	// Traits: required, forbidden, any-of.
	f.exec(`INSERT INTO placement.traits (name) VALUES ('CUSTOM_SILVER')`)
	require.Equal(t, []string{"cn1:VCPU=1"}, f.cands("resources=VCPU:1&required=HW_CPU_X86_AVX2", "1.17"))
	require.Equal(t, []string{"cn2:VCPU=1"}, f.cands("resources=VCPU:1&required=!CUSTOM_GOLD", "1.22"))
	require.Equal(t, []string{"cn1:VCPU=1"}, f.cands("resources=VCPU:1&required=in:CUSTOM_GOLD,CUSTOM_SILVER", "1.39"))
	require.Empty(t, f.cands("resources=VCPU:1&required=CUSTOM_GOLD&required=!HW_CPU_X86_AVX2", "1.39"))
	// Before 1.39 only the last required counts.
	require.Len(t, f.cands("resources=VCPU:1&required=CUSTOM_GOLD&required=!CUSTOM_SILVER", "1.38"), 2)

	// root_required (1.35).
	require.Equal(t, []string{"cn2:VCPU=1"}, f.cands("resources=VCPU:1&root_required=!CUSTOM_GOLD", "1.35"))
	require.Equal(t, []string{"cn1:VCPU=1"}, f.cands("resources=VCPU:1&root_required=CUSTOM_GOLD,HW_CPU_X86_AVX2", "1.35"))

	// Limit.
	st, body = f.get(q+"&limit=1", "1.16")
	require.Equal(t, 200, st)
	require.Len(t, body["allocation_requests"], 1)
	require.Len(t, body["provider_summaries"], 1)
}

func TestCandidatesAggregates(t *testing.T) {
	t.Parallel()
	f := newACFixture(t)
	aggA, aggB := uuid.NewString(), uuid.NewString()
	cn1, cn2, cn3 := f.rp("cn1", ""), f.rp("cn2", ""), f.rp("cn3", "")
	for _, cn := range []string{cn1, cn2, cn3} {
		f.simpleInv(cn, "VCPU", 4)
	}
	f.aggs(cn1, aggA)
	f.aggs(cn2, aggA, aggB)
	f.aggs(cn3, aggB)
	require.Equal(t, []string{"cn1:VCPU=1", "cn2:VCPU=1"}, f.cands("resources=VCPU:1&member_of="+aggA, "1.21"))
	require.Equal(t, []string{"cn1:VCPU=1", "cn2:VCPU=1", "cn3:VCPU=1"}, f.cands("resources=VCPU:1&member_of=in:"+aggA+","+aggB, "1.21"))
	require.Equal(t, []string{"cn2:VCPU=1"}, f.cands("resources=VCPU:1&member_of="+aggA+"&member_of="+aggB, "1.24"))
	require.Equal(t, []string{"cn3:VCPU=1"}, f.cands("resources=VCPU:1&member_of=!"+aggA, "1.32"))
	require.Equal(t, []string{"cn1:VCPU=1"}, f.cands("resources=VCPU:1&member_of=!in:"+aggB+","+uuid.NewString(), "1.32"))
	require.Empty(t, f.cands("resources=VCPU:1&member_of="+uuid.NewString(), "1.21"))
	// Combined with traits.
	f.traits(cn2, "CUSTOM_FAST")
	require.Equal(t, []string{"cn2:VCPU=1"}, f.cands("resources=VCPU:1&member_of="+aggB+"&required=CUSTOM_FAST", "1.21"))
	require.Equal(t, []string{"cn3:VCPU=1"}, f.cands("resources=VCPU:1&member_of="+aggB+"&required=!CUSTOM_FAST", "1.22"))
}

// Scenario 1 of placement-generic-resource-pools.md: compute nodes without
// local disk share the DISK_GB of an NFS pool in their aggregate; scenario
// 2a: a per-rack IPV4_ADDRESS pool.
func TestCandidatesSharing(t *testing.T) {
	t.Parallel()
	f := newACFixture(t)
	rack1, rack2 := uuid.NewString(), uuid.NewString()
	cn1, cn2, cn3 := f.rp("cn1", ""), f.rp("cn2", ""), f.rp("cn3", "")
	for _, cn := range []string{cn1, cn2, cn3} {
		f.simpleInv(cn, "VCPU", 8)
		f.simpleInv(cn, "MEMORY_MB", 8192)
	}
	f.simpleInv(cn3, "DISK_GB", 100) // local disk
	f.aggs(cn1, rack1)
	f.aggs(cn2, rack1)
	f.aggs(cn3, rack2)
	nfs := f.rp("nfs", "")
	f.simpleInv(nfs, "DISK_GB", 2000)
	f.traits(nfs, "MISC_SHARES_VIA_AGGREGATE", "STORAGE_DISK_SSD")
	f.aggs(nfs, rack1)
	ips := f.rp("ips", "")
	f.simpleInv(ips, "IPV4_ADDRESS", 254)
	f.traits(ips, "MISC_SHARES_VIA_AGGREGATE")
	f.aggs(ips, rack2)

	q := "resources=VCPU:1,MEMORY_MB:512,DISK_GB:10"
	require.Equal(t, []string{
		"cn1:MEMORY_MB=512,cn1:VCPU=1,nfs:DISK_GB=10",
		"cn2:MEMORY_MB=512,cn2:VCPU=1,nfs:DISK_GB=10",
		"cn3:DISK_GB=10,cn3:MEMORY_MB=512,cn3:VCPU=1",
	}, f.cands(q, "1.12"))
	st, body := f.get(q, "1.29")
	require.Equal(t, 200, st)
	require.Equal(t, []string{"cn1", "cn2", "cn3", "nfs"}, f.summaryNames(body))
	// Only the sharing provider: one candidate (not one per anchor).
	require.Equal(t, []string{"nfs:DISK_GB=1000"}, f.cands("resources=DISK_GB:1000&limit=5", "1.16"))
	require.Equal(t, []string{"nfs:DISK_GB=1000"}, f.cands("resources=DISK_GB:1000", "1.12"))
	// Traits of the sharing provider count for the whole candidate.
	require.Equal(t, []string{
		"cn1:MEMORY_MB=512,cn1:VCPU=1,nfs:DISK_GB=10",
		"cn2:MEMORY_MB=512,cn2:VCPU=1,nfs:DISK_GB=10",
	}, f.cands(q+"&required=STORAGE_DISK_SSD", "1.17"))
	require.Equal(t, []string{"cn3:DISK_GB=10,cn3:MEMORY_MB=512,cn3:VCPU=1"}, f.cands(q+"&required=!STORAGE_DISK_SSD", "1.22"))
	// member_of: the sharing provider must itself be in the aggregate.
	require.Equal(t, []string{
		"cn1:MEMORY_MB=512,cn1:VCPU=1,nfs:DISK_GB=10",
		"cn2:MEMORY_MB=512,cn2:VCPU=1,nfs:DISK_GB=10",
	}, f.cands(q+"&member_of="+rack1, "1.21"))
	require.Equal(t, []string{"cn3:DISK_GB=10,cn3:MEMORY_MB=512,cn3:VCPU=1"}, f.cands(q+"&member_of=!"+rack1, "1.32"))
	// Scenario 2a: an address from the rack's pool.
	require.Equal(t, []string{"cn3:VCPU=1,ips:IPV4_ADDRESS=1"}, f.cands("resources=VCPU:1,IPV4_ADDRESS:1", "1.12"))
	// A compute with local disk in the NFS aggregate gets both options.
	f.aggs(cn3, rack1)
	require.Equal(t, []string{
		"cn3:DISK_GB=10,cn3:MEMORY_MB=512,cn3:VCPU=1",
		"cn3:MEMORY_MB=512,cn3:VCPU=1,nfs:DISK_GB=10",
	}, f.cands(q, "1.12")[2:])
	// Full pool: no shared candidates.
	f.use(nfs, "DISK_GB", 1995)
	require.Equal(t, []string{"cn3:DISK_GB=10,cn3:MEMORY_MB=512,cn3:VCPU=1"}, f.cands(q, "1.12"))
	// Limit keeps summaries to the trees used.
	st, body = f.get("resources=VCPU:1&limit=1", "1.29")
	require.Equal(t, 200, st)
	require.Len(t, body["allocation_requests"], 1)
	require.Len(t, body["provider_summaries"], 1)
}

// A compute node with two NUMA children and two SR-IOV PFs below.
func nestedFixture(t *testing.T) (*acFixture, map[string]string) {
	f := newACFixture(t)
	ids := map[string]string{}
	cn := f.rp("cn", "")
	ids["cn"] = cn
	f.simpleInv(cn, "DISK_GB", 100)
	for _, n := range []string{"numa0", "numa1"} {
		id := f.rp(n, cn)
		ids[n] = id
		f.simpleInv(id, "VCPU", 4)
		f.simpleInv(id, "MEMORY_MB", 2048)
	}
	for i, n := range []string{"pf0", "pf1"} {
		id := f.rp(n, ids["numa"+strconv.Itoa(i)])
		ids[n] = id
		f.simpleInv(id, "SRIOV_NET_VF", 4)
	}
	f.traits(ids["pf0"], "CUSTOM_PHYSNET_A")
	f.traits(ids["pf1"], "CUSTOM_PHYSNET_B")
	f.traits(ids["numa1"], "HW_NUMA_ROOT")
	return f, ids
}

func TestCandidatesNested(t *testing.T) {
	t.Parallel()
	f, ids := nestedFixture(t)
	require.Equal(t, []string{
		"cn:DISK_GB=10,numa0:VCPU=1,pf0:SRIOV_NET_VF=1",
		"cn:DISK_GB=10,numa0:VCPU=1,pf1:SRIOV_NET_VF=1",
		"cn:DISK_GB=10,numa1:VCPU=1,pf0:SRIOV_NET_VF=1",
		"cn:DISK_GB=10,numa1:VCPU=1,pf1:SRIOV_NET_VF=1",
	}, f.cands("resources=VCPU:1,DISK_GB:10,SRIOV_NET_VF:1", "1.29"))
	st, body := f.get("resources=VCPU:1,SRIOV_NET_VF:1", "1.29")
	require.Equal(t, 200, st)
	require.Equal(t, []string{"cn", "numa0", "numa1", "pf0", "pf1"}, f.summaryNames(body))
	ps := body["provider_summaries"].(map[string]any)[ids["pf1"]].(map[string]any)
	require.Equal(t, ids["numa1"], ps["parent_provider_uuid"])
	require.Equal(t, ids["cn"], ps["root_provider_uuid"])
	require.Equal(t, map[string]any{"DISK_GB": map[string]any{"capacity": 100.0, "used": 0.0}},
		body["provider_summaries"].(map[string]any)[ids["cn"]].(map[string]any)["resources"])
	// Traits of the providers used, collectively.
	require.Equal(t, []string{
		"numa0:VCPU=1,pf1:SRIOV_NET_VF=1",
		"numa1:VCPU=1,pf1:SRIOV_NET_VF=1",
	}, f.cands("resources=VCPU:1,SRIOV_NET_VF:1&required=CUSTOM_PHYSNET_B", "1.29"))
	require.Equal(t, []string{
		"numa1:VCPU=1,pf1:SRIOV_NET_VF=1",
	}, f.cands("resources=VCPU:1,SRIOV_NET_VF:1&required=CUSTOM_PHYSNET_B,HW_NUMA_ROOT", "1.29"))
	require.Equal(t, []string{
		"numa0:VCPU=1,pf0:SRIOV_NET_VF=1",
	}, f.cands("resources=VCPU:1,SRIOV_NET_VF:1&required=!CUSTOM_PHYSNET_B,!HW_NUMA_ROOT", "1.29"))
	// Before 1.29 one provider per tree: nothing here.
	require.Empty(t, f.cands("resources=VCPU:1,SRIOV_NET_VF:1", "1.28"))
	require.Len(t, f.cands("resources=VCPU:1", "1.28"), 2)
	st, body = f.get("resources=VCPU:1", "1.28")
	require.Equal(t, 200, st)
	require.Equal(t, []string{"numa0", "numa1"}, f.summaryNames(body))
	// in_tree (1.31): any provider of the tree names it.
	require.Len(t, f.cands("resources=VCPU:1&in_tree="+ids["pf1"], "1.31"), 2)
	require.Empty(t, f.cands("resources=VCPU:1&in_tree="+uuid.NewString(), "1.31"))
	other := f.rp("other", "")
	f.simpleInv(other, "VCPU", 4)
	require.Equal(t, []string{"other:VCPU=1"}, f.cands("resources=VCPU:1&in_tree="+other, "1.31"))
	// root_required applies to the root of the tree.
	f.traits(ids["cn"], "CUSTOM_ROOT")
	require.Len(t, f.cands("resources=VCPU:1&root_required=CUSTOM_ROOT", "1.35"), 2)
	require.Equal(t, []string{"other:VCPU=1"}, f.cands("resources=VCPU:1&root_required=!CUSTOM_ROOT", "1.35"))
	require.Empty(t, f.cands("resources=VCPU:1&root_required=HW_NUMA_ROOT", "1.35"))
}

func TestCandidatesGranular(t *testing.T) {
	t.Parallel()
	f, ids := nestedFixture(t)
	_ = ids
	// Two VFs from two different PFs.
	q := "resources1=SRIOV_NET_VF:1&resources2=SRIOV_NET_VF:1"
	require.Equal(t, []string{
		"pf0:SRIOV_NET_VF=1,pf1:SRIOV_NET_VF=1",
		"pf0:SRIOV_NET_VF=1,pf1:SRIOV_NET_VF=1",
	}, f.cands(q+"&group_policy=isolate", "1.29"))
	require.Equal(t, []string{
		"pf0:SRIOV_NET_VF=1,pf1:SRIOV_NET_VF=1",
		"pf0:SRIOV_NET_VF=1,pf1:SRIOV_NET_VF=1",
		"pf0:SRIOV_NET_VF=2",
		"pf1:SRIOV_NET_VF=2",
	}, f.cands(q+"&group_policy=none", "1.29"))
	st, body := f.get(q, "1.29")
	require.Equal(t, 400, st)
	_, _, detail := errOf(t, body)
	require.Equal(t, `The "group_policy" parameter is required when specifying more than one "resources{N}" parameter.`, detail)
	// Merged amounts are capacity-checked: 3+3 VFs do not fit on one PF.
	require.Equal(t, []string{
		"pf0:SRIOV_NET_VF=3,pf1:SRIOV_NET_VF=3",
		"pf0:SRIOV_NET_VF=3,pf1:SRIOV_NET_VF=3",
	}, f.cands("resources1=SRIOV_NET_VF:3&resources2=SRIOV_NET_VF:3&group_policy=none", "1.29"))
	// Granular traits are per provider; mappings name the groups.
	st, body = f.get("resources=VCPU:1&resources_NET=SRIOV_NET_VF:1&required_NET=CUSTOM_PHYSNET_A", "1.34")
	require.Equal(t, 200, st)
	ars := body["allocation_requests"].([]any)
	require.Len(t, ars, 2)
	for _, ar := range ars {
		m := ar.(map[string]any)["mappings"].(map[string]any)
		require.Equal(t, []any{ids["pf0"]}, m["_NET"])
		require.Len(t, m[""], 1)
	}
	// Unsuffixed and granular in the same tree only.
	require.Equal(t, []string{
		"numa1:VCPU=1,pf1:SRIOV_NET_VF=1",
	}, f.cands("resources=VCPU:1&required=HW_NUMA_ROOT&resources1=SRIOV_NET_VF:1&required1=CUSTOM_PHYSNET_B", "1.29"))
	// same_subtree (1.36): the VF under the NUMA node giving the CPUs.
	require.Equal(t, []string{
		"numa0:VCPU=1,pf0:SRIOV_NET_VF=1",
		"numa1:VCPU=1,pf1:SRIOV_NET_VF=1",
	}, f.cands("resources_CPU=VCPU:1&resources_NET=SRIOV_NET_VF:1&same_subtree=_CPU,_NET&group_policy=none", "1.36"))
	// A resourceless group anchoring the subtree.
	require.Equal(t, []string{
		"numa1:VCPU=1,pf1:SRIOV_NET_VF=1",
	}, f.cands("resources_CPU=VCPU:1&resources_NET=SRIOV_NET_VF:1&required_NUMA=HW_NUMA_ROOT&same_subtree=_CPU,_NET,_NUMA&group_policy=none", "1.36"))
	// Isolation failing: one PF only for two groups.
	require.Empty(t, f.cands("resources1=SRIOV_NET_VF:1&required1=CUSTOM_PHYSNET_A&resources2=SRIOV_NET_VF:1&required2=CUSTOM_PHYSNET_A&group_policy=isolate", "1.29"))
	require.Len(t, f.cands("resources1=SRIOV_NET_VF:1&required1=CUSTOM_PHYSNET_A&resources2=SRIOV_NET_VF:1&required2=CUSTOM_PHYSNET_A&group_policy=none", "1.29"), 1)
	// Granular group with a forbidden aggregate.
	agg := uuid.NewString()
	f.aggs(ids["pf0"], agg)
	require.Equal(t, []string{"pf1:SRIOV_NET_VF=1"}, f.cands("resources1=SRIOV_NET_VF:1&member_of1=!"+agg, "1.32"))
	require.Equal(t, []string{"pf0:SRIOV_NET_VF=1"}, f.cands("resources1=SRIOV_NET_VF:1&member_of1="+agg, "1.29"))
	// Limit with granular groups.
	st, body = f.get(q+"&group_policy=none&limit=3", "1.29")
	require.Equal(t, 200, st)
	require.Len(t, body["allocation_requests"], 3)
}

func TestCandidatesBadRequests(t *testing.T) {
	t.Parallel()
	f := newACFixture(t)
	cn := f.rp("cn", "")
	f.simpleInv(cn, "VCPU", 4)
	for _, c := range []struct{ q, v, detail string }{
		{"resources=VCPU:1", "1.9", "The resource could not be found."},
		{"", "1.10", "Invalid query string parameters: 'resources' is a required property"},
		{"resources=VCPU:1&limit=2", "1.15", "Invalid query string parameters: Additional properties are not allowed ('limit' was unexpected)"},
		{"resources=VCPU:1&limit=0", "1.16", "Invalid query string parameters: '0' does not match '^[1-9][0-9]*$'"},
		{"resources=VCPU:1&group_policy=x", "1.25", "Invalid query string parameters: 'x' is not one of ['none', 'isolate']"},
		{"resources=VCPU:1&foo=1", "1.25", "Invalid query string parameters: 'foo' does not match any of the regexes: '^member_of([1-9][0-9]*)?$', '^required([1-9][0-9]*)?$', '^resources([1-9][0-9]*)?$'"},
		{"resources=VCPU:x", "1.10", "Requested resource VCPU expected positive integer amount. Got: x."},
		{"resources=VCPU", "1.10", "Badly formed resources parameter. Expected resources query string parameter in form: ?resources=VCPU:2,MEMORY_MB:1024. Got: VCPU."},
		{"resources=FOO:1", "1.10", "Invalid resource class in resources parameter: No such resource class FOO."},
		{"resources=VCPU:1&required=CUSTOM_NOPE", "1.17", "No such trait(s): CUSTOM_NOPE."},
		{"resources=VCPU:1&required=!CUSTOM_X", "1.17", "Invalid query string parameters: Expected 'required' parameter value of the form: HW_CPU_X86_VMX,CUSTOM_MAGIC. Got: !CUSTOM_X"},
		{"resources=VCPU:1&required=CUSTOM_X,!CUSTOM_X", "1.22", "Conflicting required and forbidden traits found in the following traits keys: required: (CUSTOM_X)"},
		{"resources=VCPU:1&member_of=!" + uuid.NewString(), "1.31", "Forbidden member_of parameters are not supported in the specified microversion"},
		{"resources=VCPU:1&required1=CUSTOM_X", "1.25", "All traits parameters must be associated with resources.  Found the following orphaned traits keys: required1"},
		{"resources=VCPU:1&required_X=CUSTOM_X", "1.36", "Resourceless suffixed group request should be specified in `same_subtree` query param: bad group(s) - ['_X']."},
		{"resources=VCPU:1&same_subtree=_Y", "1.36", "Real suffixes should be specified in `same_subtree`: ['_Y'] not found in ['']."},
		{"required=CUSTOM_X", "1.36", "There must be at least one resources or resources[$S] parameter."},
		{"resources=VCPU:1&root_required=A&root_required=B", "1.35", "Query parameter 'root_required' may be specified only once."},
		{"resources=VCPU:1&in_tree=nope", "1.31", "Invalid query string parameters: Expected 'in_tree' parameter to be a format of uuid. Got: nope"},
	} {
		st, body := f.get(c.q, c.v)
		require.Equal(t, 404-4*boolInt(c.v != "1.9"), st, c.q)
		_, _, detail := errOf(t, body)
		// Schema violations go on with python-jsonschema's "Failed
		// validating ...", on the same line as Placement's (webob's).
		require.NotContains(t, detail, "\n", c.q)
		first, _, _ := strings.Cut(detail, "  Failed validating")
		require.Equal(t, c.detail, first, c.q)
		if strings.Contains(c.detail, "^[1-9][0-9]*$") {
			// Placement 8.0's text, the sub-schema as pprint lays it out.
			require.Equal(t, "Invalid query string parameters: '0' does not match '^[1-9][0-9]*$'  "+
				"Failed validating 'pattern' in schema['properties']['limit']:     {'minLength': 1,      'minimum': 1,      "+
				"'pattern': '^[1-9][0-9]*$',      'type': ['integer', 'string']}  On instance['limit']:     '0'", detail)
		}
	}
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// With a limit, candidates are found by batches of root providers; the
// answer is the first ones of the unlimited answer (or, randomized, a
// sample of it).
func TestCandidatesLimitBatches(t *testing.T) {
	t.Parallel()
	f := newACFixture(t)
	agg := uuid.NewString()
	nfs := f.rp("nfs", "")
	f.simpleInv(nfs, "DISK_GB", 100000)
	f.traits(nfs, "MISC_SHARES_VIA_AGGREGATE")
	f.aggs(nfs, agg)
	for i := 0; i < 150; i++ {
		cn := f.rp("cn"+strconv.Itoa(i), "")
		f.simpleInv(cn, "VCPU", 4)
		if i%3 == 0 {
			f.simpleInv(cn, "DISK_GB", 100)
		}
		if i%2 == 0 {
			f.aggs(cn, agg)
		}
		if i%5 == 0 {
			f.use(cn, "VCPU", 4) // full
		}
	}
	q := "resources=VCPU:1,DISK_GB:10"
	all := f.cands(q, "1.29")
	// Not full (120 computes): 40 with local disk, 60 in the aggregate.
	require.Len(t, all, 40+60)
	for _, lim := range []int{1, 7, 50, 99, 100, 500} {
		got := f.cands(q+"&limit="+strconv.Itoa(lim), "1.29")
		require.Len(t, got, min(lim, len(all)), "limit %d", lim)
		for _, c := range got {
			require.Contains(t, all, c)
		}
	}
	// A limit of more digits than an int holds limits nothing, as
	// Placement's Python int: every candidate, not a 400 claiming the
	// digits do not match ^[1-9][0-9]*$.
	for _, lim := range []string{"9223372036854775807", "9223372036854775808", "100000000000000000000"} {
		require.Len(t, f.cands(q+"&limit="+lim, "1.29"), len(all), "limit %s", lim)
	}
	st, body := f.get(q+"&limit=3", "1.29")
	require.Equal(t, 200, st)
	names := f.summaryNames(body)
	require.LessOrEqual(t, len(names), 4)
	// Randomized: a sample of the candidates.
	h := NewHandler(f.pool, Options{})
	h.SetRandomizeAllocationCandidates(true)
	req, err := parseCandRequest(q+"&limit=10", web.Version{Major: 1, Minor: 29})
	require.NoError(t, err)
	seen := map[string]bool{}
	for i := 0; i < 5; i++ {
		out := findJSON(t, h, req)
		var doc map[string]any
		require.NoError(t, json.Unmarshal(out, &doc))
		require.Len(t, doc["allocation_requests"], 10)
		seen[string(out)] = true
	}
	require.Greater(t, len(seen), 1, "randomized answers differ")
	req, err = parseCandRequest(q, web.Version{Major: 1, Minor: 29})
	require.NoError(t, err)
	out := findJSON(t, h, req)
	var doc map[string]any
	require.NoError(t, json.Unmarshal(out, &doc))
	require.Len(t, doc["allocation_requests"], len(all))
}

// A granular group may take a shared resource; in_tree and member_of in
// granular groups; the list form before 1.12 with sharing providers.
func TestCandidatesGranularSharing(t *testing.T) {
	t.Parallel()
	f := newACFixture(t)
	agg := uuid.NewString()
	cn1, cn2 := f.rp("cn1", ""), f.rp("cn2", "")
	f.simpleInv(cn1, "VCPU", 4)
	f.simpleInv(cn2, "VCPU", 4)
	f.aggs(cn1, agg)
	nfs := f.rp("nfs", "")
	f.simpleInv(nfs, "DISK_GB", 1000)
	f.traits(nfs, "MISC_SHARES_VIA_AGGREGATE")
	f.aggs(nfs, agg)
	require.Equal(t, []string{"cn1:VCPU=1,nfs:DISK_GB=10"},
		f.cands("resources1=VCPU:1&resources2=DISK_GB:10&group_policy=isolate", "1.29"))
	require.Equal(t, []string{"cn2:VCPU=1"}, f.cands("resources1=VCPU:1&in_tree1="+cn2, "1.31"))
	require.Equal(t, []string{"cn1:VCPU=1"}, f.cands("resources1=VCPU:1&member_of1="+agg, "1.29"))
	st, body := f.get("resources=VCPU:1,DISK_GB:10", "1.11")
	require.Equal(t, 200, st)
	ars := body["allocation_requests"].([]any)
	require.Len(t, ars, 1)
	allocs := ars[0].(map[string]any)["allocations"].([]any)
	require.Len(t, allocs, 2)
	got := map[string]any{}
	for _, a := range allocs {
		m := a.(map[string]any)
		got[f.name[m["resource_provider"].(map[string]any)["uuid"].(string)]] = m["resources"]
	}
	require.Equal(t, map[string]any{"cn1": map[string]any{"VCPU": 1.0}, "nfs": map[string]any{"DISK_GB": 10.0}}, got)
	// A resourceless group without traits or aggregates finds nothing.
	require.Empty(t, f.cands("resources=VCPU:1&in_tree_X="+cn1+"&same_subtree=_X", "1.36"))
}

// findJSON answers req at 1.29 without HTTP.
func findJSON(t *testing.T, h *Handler, req *candidate.Request) []byte {
	t.Helper()
	res, err := h.candidates.Find(context.Background(), req, web.Version{Major: 1, Minor: 29})
	require.NoError(t, err)
	var buf bytes.Buffer
	require.NoError(t, res.Write(&buf))
	return buf.Bytes()
}

// The cached world (candidate/cache.go) is exact: every change to
// providers, inventories, traits, aggregates or usage between two requests
// shows in the second answer, limited or not, with or without member_of.
func TestCandidatesCacheFollowsChanges(t *testing.T) {
	t.Parallel()
	f := newACFixture(t)
	a := f.rp("a", "")
	f.simpleInv(a, "VCPU", 4)
	const v = "1.39"
	for _, q := range []string{"resources=VCPU:2", "resources=VCPU:2&limit=5"} {
		require.Equal(t, []string{"a:VCPU=2"}, f.cands(q, v), q)
	}
	b := f.rp("b", "")
	f.simpleInv(b, "VCPU", 2)
	require.Equal(t, []string{"a:VCPU=2", "b:VCPU=2"}, f.cands("resources=VCPU:2", v))
	f.use(b, "VCPU", 1) // usage only: no version bump, read per request
	require.Equal(t, []string{"a:VCPU=2"}, f.cands("resources=VCPU:2&limit=5", v))
	f.exec(`UPDATE placement.inventories SET total = 8 WHERE resource_provider_id = (SELECT id FROM placement.resource_providers WHERE uuid = $1)`, b)
	require.Equal(t, []string{"a:VCPU=2", "b:VCPU=2"}, f.cands("resources=VCPU:2", v))
	// Several consumers on one inventory add up (1 + 3 + 3 of 8).
	f.use(b, "VCPU", 3)
	f.use(b, "VCPU", 3)
	require.Equal(t, []string{"a:VCPU=2"}, f.cands("resources=VCPU:2", v))
	require.Equal(t, []string{"a:VCPU=1", "b:VCPU=1"}, f.cands("resources=VCPU:1&limit=5", v))
	f.exec(`DELETE FROM placement.allocations WHERE used = 3`)
	f.traits(b, "CUSTOM_FAST")
	require.Equal(t, []string{"b:VCPU=2"}, f.cands("resources=VCPU:2&required=CUSTOM_FAST", v))
	agg := uuid.NewString()
	f.aggs(a, agg)
	require.Equal(t, []string{"a:VCPU=2"}, f.cands("resources=VCPU:2&member_of="+agg, v))
	f.exec(`DELETE FROM placement.resource_provider_aggregates`)
	f.exec(`DELETE FROM placement.resource_provider_traits WHERE trait_id = (SELECT id FROM placement.traits WHERE name = 'CUSTOM_FAST')`)
	st, body := f.get("resources=VCPU:2&member_of="+agg, v)
	require.Equal(t, 200, st)
	require.Empty(t, body["allocation_requests"])
	require.Empty(t, f.cands("resources=VCPU:2&required=CUSTOM_FAST", v))
	// A change rolled back leaves the version (and the answer) alone.
	var before, after int64
	require.NoError(t, f.pool.QueryRow(context.Background(), `SELECT v FROM placement.world_version`).Scan(&before))
	tx, err := f.pool.Begin(context.Background())
	require.NoError(t, err)
	_, err = tx.Exec(context.Background(), `DELETE FROM placement.inventories`)
	require.NoError(t, err)
	require.NoError(t, tx.Rollback(context.Background()))
	require.NoError(t, f.pool.QueryRow(context.Background(), `SELECT v FROM placement.world_version`).Scan(&after))
	require.Equal(t, before, after)
	require.Equal(t, []string{"a:VCPU=2", "b:VCPU=2"}, f.cands("resources=VCPU:2", v))
	// One bump per transaction, however many rows it changes.
	f.exec(`UPDATE placement.inventories SET reserved = 0`)
	require.NoError(t, f.pool.QueryRow(context.Background(), `SELECT v FROM placement.world_version`).Scan(&after))
	require.Equal(t, before+1, after)
}

// Concurrent requests share the cached world (read-only once built) while
// writers change it: every answer is well-formed (run with -race).
func TestCandidatesCacheConcurrent(t *testing.T) {
	t.Parallel()
	f := newACFixture(t)
	agg := uuid.NewString()
	var rps []string
	for i := 0; i < 6; i++ {
		rp := f.rp("cn"+strconv.Itoa(i), "")
		f.simpleInv(rp, "VCPU", 8)
		f.aggs(rp, agg)
		rps = append(rps, rp)
	}
	queries := []string{"resources=VCPU:1", "resources=VCPU:1&limit=2", "resources=VCPU:1&member_of=" + agg}
	var wg sync.WaitGroup
	errs := make(chan string, 64)
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for i := 0; i < 15; i++ {
				q := queries[(g+i)%len(queries)]
				st, _, body := call(t, f.srv, "GET", "/allocation_candidates?"+q, "1.39", "")
				if st != 200 || body["allocation_requests"] == nil {
					errs <- fmt.Sprintf("%s: %d %v", q, st, body)
				}
			}
		}(g)
	}
	for i := 0; i < 10; i++ {
		f.exec(`UPDATE placement.inventories SET total = $1`, 8+i)
		f.use(rps[i%len(rps)], "VCPU", 1)
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
	require.Len(t, f.cands("resources=VCPU:1", "1.39"), 6)
}

// SetRandomizeAllocationCandidates sets Placement's
// randomize_allocation_candidates option for h (Options has the start-up
// value): when true, a limited GET /allocation_candidates returns a random
// sample of the candidates and an unlimited one returns them shuffled; when
// false (the default) the first candidates are returned, in provider order.
func (h *Handler) SetRandomizeAllocationCandidates(on bool) { h.randomize.Store(on) }
