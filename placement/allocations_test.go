package placement

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
)

// callCT is call with an explicit Content-Type.
func callCT(t *testing.T, srv *httptest.Server, method, path, version, ct, body string) (int, http.Header, map[string]any) {
	t.Helper()
	req, err := http.NewRequest(method, srv.URL+path, strings.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("X-Auth-Token", "admin")
	req.Header.Set("Content-Type", ct)
	if version != "" {
		req.Header.Set("OpenStack-API-Version", "placement "+version)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	var out map[string]any
	_ = json.NewDecoder(resp.Body).Decode(&out)
	return resp.StatusCode, resp.Header, out
}

// setInv sets the provider's inventories (JSON object of class → record).
func setInv(t *testing.T, srv *httptest.Server, rp, invs string) {
	t.Helper()
	st, _, body := call(t, srv, "GET", "/resource_providers/"+rp+"/inventories", "", "")
	require.Equal(t, 200, st)
	gen := body["resource_provider_generation"]
	st, _, body = call(t, srv, "PUT", "/resource_providers/"+rp+"/inventories", "",
		fmt.Sprintf(`{"resource_provider_generation": %v, "inventories": %s}`, gen, invs))
	require.Equal(t, 200, st, body)
}

func TestAllocationsPutGetDelete(t *testing.T) {
	t.Parallel()
	srv, pool := invServer(t)
	rp1 := mkProvider(t, pool, "rp1")
	rp2 := mkProvider(t, pool, "rp2")
	setInv(t, srv, rp1, `{"VCPU": {"total": 8, "max_unit": 4}, "MEMORY_MB": {"total": 1024, "reserved": 512, "step_size": 128}}`)
	setInv(t, srv, rp2, `{"DISK_GB": {"total": 100, "allocation_ratio": 1.5}}`)
	c1 := uuid.NewString()

	// Pre-1.8 list format; incomplete consumer.
	st, _, body := call(t, srv, "PUT", "/allocations/"+c1, "1.0",
		fmt.Sprintf(`{"allocations": [{"resource_provider": {"uuid": "%s"}, "resources": {"VCPU": 2}}]}`, rp1))
	require.Equal(t, 204, st, body)
	st, _, body = call(t, srv, "GET", "/allocations/"+c1, "1.12", "")
	require.Equal(t, 200, st)
	require.Equal(t, IncompleteConsumerID, body["project_id"])
	require.EqualValues(t, 2, body["allocations"].(map[string]any)[rp1].(map[string]any)["resources"].(map[string]any)["VCPU"])
	st, _, body = call(t, srv, "GET", "/allocations/"+c1, "1.11", "")
	require.Equal(t, 200, st)
	require.NotContains(t, body, "project_id")

	// 1.8 requires project/user.
	st, _, _ = call(t, srv, "PUT", "/allocations/"+c1, "1.8",
		fmt.Sprintf(`{"allocations": [{"resource_provider": {"uuid": "%s"}, "resources": {"VCPU": 2}}]}`, rp1))
	require.Equal(t, 400, st)
	// 1.12 dict format; list is rejected.
	st, _, _ = call(t, srv, "PUT", "/allocations/"+c1, "1.12",
		fmt.Sprintf(`{"allocations": [{"resource_provider": {"uuid": "%s"}, "resources": {"VCPU": 2}}], "project_id": "p", "user_id": "u"}`, rp1))
	require.Equal(t, 400, st)
	st, _, body = call(t, srv, "PUT", "/allocations/"+c1, "1.12",
		fmt.Sprintf(`{"allocations": {"%s": {"resources": {"VCPU": 4, "MEMORY_MB": 256}}, "%s": {"resources": {"DISK_GB": 150}}},
		 "project_id": "p", "user_id": "u"}`, rp1, rp2))
	require.Equal(t, 204, st, body)

	// 1.28: consumer generation required and checked.
	st, _, body = call(t, srv, "GET", "/allocations/"+c1, "1.38", "")
	require.Equal(t, 200, st)
	require.EqualValues(t, 2, body["consumer_generation"])
	require.Equal(t, "unknown", body["consumer_type"])
	require.Equal(t, "p", body["project_id"])
	allocs := body["allocations"].(map[string]any)
	require.Len(t, allocs, 2)
	require.EqualValues(t, 150, allocs[rp2].(map[string]any)["resources"].(map[string]any)["DISK_GB"])
	st, _, body = call(t, srv, "PUT", "/allocations/"+c1, "1.28",
		fmt.Sprintf(`{"allocations": {"%s": {"resources": {"VCPU": 1}}}, "project_id": "p", "user_id": "u"}`, rp1))
	require.Equal(t, 400, st, body) // consumer_generation missing
	st, _, body = call(t, srv, "PUT", "/allocations/"+c1, "1.28",
		fmt.Sprintf(`{"allocations": {"%s": {"resources": {"VCPU": 1}}}, "project_id": "p", "user_id": "u", "consumer_generation": 1}`, rp1))
	require.Equal(t, 409, st, body)
	_, code, detail := errOf(t, body)
	require.Equal(t, "placement.concurrent_update", code)
	require.Contains(t, detail, "expected 2 but got 1")
	st, _, body = call(t, srv, "PUT", "/allocations/"+uuid.NewString(), "1.28",
		fmt.Sprintf(`{"allocations": {"%s": {"resources": {"VCPU": 1}}}, "project_id": "p", "user_id": "u", "consumer_generation": 3}`, rp1))
	require.Equal(t, 409, st, body)
	_, _, detail = errOf(t, body)
	require.Contains(t, detail, "expected null but got 3")
	// 1.38 requires consumer_type.
	st, _, _ = call(t, srv, "PUT", "/allocations/"+c1, "1.38",
		fmt.Sprintf(`{"allocations": {"%s": {"resources": {"VCPU": 1}}}, "project_id": "p", "user_id": "u", "consumer_generation": 2}`, rp1))
	require.Equal(t, 400, st)
	st, _, body = call(t, srv, "PUT", "/allocations/"+c1, "1.38",
		fmt.Sprintf(`{"allocations": {"%s": {"resources": {"VCPU": 1}}}, "project_id": "p", "user_id": "u2",
		 "consumer_generation": 2, "consumer_type": "INSTANCE"}`, rp1))
	require.Equal(t, 204, st, body)
	st, _, body = call(t, srv, "GET", "/allocations/"+c1, "1.38", "")
	require.Equal(t, 200, st)
	require.Equal(t, "INSTANCE", body["consumer_type"])
	require.Equal(t, "u2", body["user_id"])
	require.EqualValues(t, 3, body["consumer_generation"])
	require.Len(t, body["allocations"], 1)

	// Provider allocations.
	st, _, body = call(t, srv, "GET", "/resource_providers/"+rp1+"/allocations", "1.28", "")
	require.Equal(t, 200, st)
	cons := body["allocations"].(map[string]any)[c1].(map[string]any)
	require.EqualValues(t, 3, cons["consumer_generation"])
	require.EqualValues(t, 1, cons["resources"].(map[string]any)["VCPU"])
	st, _, body = call(t, srv, "GET", "/resource_providers/"+rp2+"/allocations", "", "")
	require.Equal(t, 200, st)
	require.Empty(t, body["allocations"])
	st, _, _ = call(t, srv, "GET", "/resource_providers/"+uuid.NewString()+"/allocations", "", "")
	require.Equal(t, 404, st)

	// Errors: malformed consumer, unknown provider, unknown class, no
	// inventory, constraints, capacity.
	put := func(v, allocs string) (int, string, string) {
		st, _, body := call(t, srv, "PUT", "/allocations/"+uuid.NewString(), v,
			fmt.Sprintf(`{"allocations": %s, "project_id": "p", "user_id": "u"}`, allocs))
		if st == 204 {
			return st, "", ""
		}
		_, code, detail := errOf(t, body)
		return st, code, detail
	}
	st, _, _ = call(t, srv, "PUT", "/allocations/not-a-uuid", "1.12",
		fmt.Sprintf(`{"allocations": {"%s": {"resources": {"VCPU": 1}}}, "project_id": "p", "user_id": "u"}`, rp1))
	require.Equal(t, 400, st)
	st, _, detail = put("1.12", fmt.Sprintf(`{"%s": {"resources": {"VCPU": 1}}}`, uuid.NewString()))
	require.Equal(t, 400, st)
	require.Contains(t, detail, "that does not exist")
	st, _, detail = put("1.12", fmt.Sprintf(`{"%s": {"resources": {"CUSTOM_NOPE": 1}}}`, rp1))
	require.Equal(t, 400, st)
	require.Contains(t, detail, "No such resource class CUSTOM_NOPE")
	st, _, detail = put("1.12", fmt.Sprintf(`{"%s": {"resources": {"DISK_GB": 1}}}`, rp1))
	require.Equal(t, 409, st)
	require.Contains(t, detail, "invalid")
	st, _, detail = put("1.23", fmt.Sprintf(`{"%s": {"resources": {"VCPU": 5}}}`, rp1))
	require.Equal(t, 409, st)
	require.Contains(t, detail, "violate inventory constraints")
	st, _, detail = put("1.23", fmt.Sprintf(`{"%s": {"resources": {"MEMORY_MB": 100}}}`, rp1))
	require.Equal(t, 409, st)
	require.Contains(t, detail, "violate inventory constraints")
	st, code, detail = put("1.23", fmt.Sprintf(`{"%s": {"resources": {"MEMORY_MB": 640}}}`, rp1))
	require.Equal(t, 409, st)
	require.Equal(t, "placement.undefined_code", code)
	require.Contains(t, detail, "exceed the capacity")
	st, _, _ = put("1.23", fmt.Sprintf(`{"%s": {"resources": {"MEMORY_MB": 384}}}`, rp1))
	require.Equal(t, 204, st)
	st, _, _ = put("1.12", fmt.Sprintf(`{"%s": {"resources": {"VCPU": 0}}}`, rp1))
	require.Equal(t, 400, st)
	st, _, _ = put("1.12", `{}`)
	require.Equal(t, 400, st) // empty allocations only from 1.28

	// 1.28: empty allocations delete; DELETE; 404 afterwards.
	st, _, body = call(t, srv, "PUT", "/allocations/"+c1, "1.28",
		`{"allocations": {}, "project_id": "p", "user_id": "u", "consumer_generation": 3}`)
	require.Equal(t, 204, st, body)
	st, _, body = call(t, srv, "GET", "/allocations/"+c1, "1.28", "")
	require.Equal(t, 200, st)
	require.Empty(t, body["allocations"])
	require.NotContains(t, body, "consumer_generation")
	st, _, _ = call(t, srv, "DELETE", "/allocations/"+c1, "", "")
	require.Equal(t, 404, st)
	c2 := uuid.NewString()
	st, _, _ = call(t, srv, "PUT", "/allocations/"+c2, "1.28",
		fmt.Sprintf(`{"allocations": {"%s": {"resources": {"VCPU": 1}}}, "project_id": "p", "user_id": "u", "consumer_generation": null}`, rp1))
	require.Equal(t, 204, st)
	st, _, _ = call(t, srv, "DELETE", "/allocations/"+c2, "", "")
	require.Equal(t, 204, st)
	st, _, body = call(t, srv, "GET", "/allocations/"+c2, "", "")
	require.Equal(t, 200, st)
	require.Empty(t, body["allocations"])

	// Every write bumped the providers' generations.
	st, _, body = call(t, srv, "GET", "/resource_providers/"+rp1+"/usages", "1.15", "")
	require.Equal(t, 200, st)
	require.EqualValues(t, 0, body["usages"].(map[string]any)["VCPU"])
	require.EqualValues(t, 384, body["usages"].(map[string]any)["MEMORY_MB"])
	require.Greater(t, body["resource_provider_generation"].(float64), 5.0)
}

func TestPostAllocations(t *testing.T) {
	t.Parallel()
	srv, pool := invServer(t)
	rp := mkProvider(t, pool, "rp")
	setInv(t, srv, rp, `{"VCPU": {"total": 4}}`)
	a, b := uuid.NewString(), uuid.NewString()
	one := func(n int, gen string) string {
		return fmt.Sprintf(`{"allocations": {"%s": {"resources": {"VCPU": %d}}}, "project_id": "p", "user_id": "u"%s}`, rp, n, gen)
	}

	st, _, _ := call(t, srv, "POST", "/allocations", "1.12", fmt.Sprintf(`{"%s": %s}`, a, one(1, "")))
	require.Equal(t, 404, st)
	// All or nothing: 3 + 2 > 4.
	st, _, body := call(t, srv, "POST", "/allocations", "1.13", fmt.Sprintf(`{"%s": %s, "%s": %s}`, a, one(3, ""), b, one(2, "")))
	require.Equal(t, 409, st, body)
	st, _, body = call(t, srv, "GET", "/resource_providers/"+rp+"/usages", "", "")
	require.Equal(t, 200, st)
	require.EqualValues(t, 0, body["usages"].(map[string]any)["VCPU"])
	st, _, body = call(t, srv, "POST", "/allocations", "1.13", fmt.Sprintf(`{"%s": %s, "%s": %s}`, a, one(2, ""), b, one(2, "")))
	require.Equal(t, 204, st, body)
	// 1.28: generations; move b's allocation to a, removing b's.
	st, _, body = call(t, srv, "POST", "/allocations", "1.28", fmt.Sprintf(`{"%s": %s, "%s": %s}`,
		a, one(4, `, "consumer_generation": 1`), b,
		`{"allocations": {}, "project_id": "p", "user_id": "u", "consumer_generation": 1}`))
	require.Equal(t, 204, st, body)
	st, _, body = call(t, srv, "GET", "/allocations/"+b, "1.28", "")
	require.Equal(t, 200, st)
	require.Empty(t, body["allocations"])
	st, _, body = call(t, srv, "GET", "/allocations/"+a, "1.28", "")
	require.Equal(t, 200, st)
	require.EqualValues(t, 2, body["consumer_generation"])
	st, _, body = call(t, srv, "POST", "/allocations", "1.28", fmt.Sprintf(`{"%s": %s}`, a, one(1, `, "consumer_generation": 1`)))
	require.Equal(t, 409, st, body)
	st, _, _ = call(t, srv, "POST", "/allocations", "1.13", `{}`)
	require.Equal(t, 400, st)
	st, _, _ = call(t, srv, "POST", "/allocations", "1.13", `{"bogus": {}}`)
	require.Equal(t, 400, st)
}

func TestUsages(t *testing.T) {
	t.Parallel()
	srv, pool := invServer(t)
	rp := mkProvider(t, pool, "rp")
	setInv(t, srv, rp, `{"VCPU": {"total": 64}, "MEMORY_MB": {"total": 65536}}`)
	put := func(project, user, ctype string, vcpu int) {
		t.Helper()
		st, _, body := call(t, srv, "PUT", "/allocations/"+uuid.NewString(), "1.38", fmt.Sprintf(
			`{"allocations": {"%s": {"resources": {"VCPU": %d, "MEMORY_MB": 128}}}, "project_id": "%s", "user_id": "%s",
			  "consumer_generation": null, "consumer_type": "%s"}`, rp, vcpu, project, user, ctype))
		require.Equal(t, 204, st, body)
	}
	put("p1", "u1", "INSTANCE", 1)
	put("p1", "u2", "INSTANCE", 2)
	put("p1", "u1", "MIGRATION", 4)
	put("p2", "u1", "INSTANCE", 8)
	st, _, body := call(t, srv, "PUT", "/allocations/"+uuid.NewString(), "1.12", fmt.Sprintf(
		`{"allocations": {"%s": {"resources": {"VCPU": 16}}}, "project_id": "p1", "user_id": "u1"}`, rp))
	require.Equal(t, 204, st, body)

	st, _, _ = call(t, srv, "GET", "/usages?project_id=p1", "1.8", "")
	require.Equal(t, 404, st)
	st, _, _ = call(t, srv, "GET", "/usages", "1.9", "")
	require.Equal(t, 400, st)
	st, _, _ = call(t, srv, "GET", "/usages?project_id=p1&bogus=1", "1.9", "")
	require.Equal(t, 400, st)
	st, _, _ = call(t, srv, "GET", "/usages?project_id=p1&consumer_type=INSTANCE", "1.37", "")
	require.Equal(t, 400, st)
	st, _, _ = call(t, srv, "GET", "/usages?project_id=p1&consumer_type=lower", "1.38", "")
	require.Equal(t, 400, st)

	st, h, body := call(t, srv, "GET", "/usages?project_id=p1", "1.15", "")
	require.Equal(t, 200, st)
	require.Equal(t, "no-cache", h.Get("Cache-Control"))
	require.Equal(t, map[string]any{"VCPU": 23.0, "MEMORY_MB": 384.0}, body["usages"])
	st, _, body = call(t, srv, "GET", "/usages?project_id=p1&user_id=u1", "1.9", "")
	require.Equal(t, 200, st)
	require.Equal(t, map[string]any{"VCPU": 21.0, "MEMORY_MB": 256.0}, body["usages"])

	st, _, body = call(t, srv, "GET", "/usages?project_id=p1", "1.38", "")
	require.Equal(t, 200, st)
	require.Equal(t, map[string]any{
		"INSTANCE":  map[string]any{"VCPU": 3.0, "MEMORY_MB": 256.0, "consumer_count": 2.0},
		"MIGRATION": map[string]any{"VCPU": 4.0, "MEMORY_MB": 128.0, "consumer_count": 1.0},
		"unknown":   map[string]any{"VCPU": 16.0, "consumer_count": 1.0},
	}, body["usages"])
	st, _, body = call(t, srv, "GET", "/usages?project_id=p1&consumer_type=all", "1.38", "")
	require.Equal(t, 200, st)
	require.Equal(t, map[string]any{"all": map[string]any{"VCPU": 23.0, "MEMORY_MB": 384.0, "consumer_count": 4.0}}, body["usages"])
	st, _, body = call(t, srv, "GET", "/usages?project_id=p1&consumer_type=unknown", "1.38", "")
	require.Equal(t, 200, st)
	require.Equal(t, map[string]any{"unknown": map[string]any{"VCPU": 16.0, "consumer_count": 1.0}}, body["usages"])
	st, _, body = call(t, srv, "GET", "/usages?project_id=p1&user_id=u1&consumer_type=INSTANCE", "1.38", "")
	require.Equal(t, 200, st)
	require.Equal(t, map[string]any{"INSTANCE": map[string]any{"VCPU": 1.0, "MEMORY_MB": 128.0, "consumer_count": 1.0}}, body["usages"])

	st, _, body = call(t, srv, "GET", "/resource_providers/"+rp+"/usages", "", "")
	require.Equal(t, 200, st)
	require.Equal(t, map[string]any{"VCPU": 31.0, "MEMORY_MB": 512.0}, body["usages"])
	st, _, _ = call(t, srv, "GET", "/resource_providers/"+uuid.NewString()+"/usages", "", "")
	require.Equal(t, 404, st)
}

// TestConcurrentClaims races 32 clients against 10 providers whose
// capacity admits exactly K allocations: exactly K succeed, the others get
// 409, and no provider ends up over capacity.
func TestConcurrentClaims(t *testing.T) {
	t.Parallel()
	srv, pool := invServer(t)
	const providers, clients, perProvider = 10, 32, 2 // K = 20
	var rps []string
	for i := 0; i < providers; i++ {
		rp := mkProvider(t, pool, fmt.Sprintf("rp%d", i))
		// capacity (5 - 1) * 1.0 = 4 VCPU; each claim takes 2.
		setInv(t, srv, rp, `{"VCPU": {"total": 5, "reserved": 1}}`)
		rps = append(rps, rp)
	}
	// Client i claims 2 VCPU on provider i%10: every provider gets 3 or 4
	// racing clients and admits exactly 2 of them.
	var wg sync.WaitGroup
	var mu sync.Mutex
	ok, conflicts := 0, 0
	for i := 0; i < clients; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			rp := rps[i%providers]
			body := fmt.Sprintf(`{"allocations": {"%s": {"resources": {"VCPU": 2}}}, "project_id": "p", "user_id": "u",
				"consumer_generation": null}`, rp)
			req, _ := http.NewRequest("PUT", srv.URL+"/allocations/"+uuid.NewString(), strings.NewReader(body))
			req.Header.Set("X-Auth-Token", "admin")
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("OpenStack-API-Version", "placement 1.28")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Error(err)
				return
			}
			resp.Body.Close()
			mu.Lock()
			defer mu.Unlock()
			switch resp.StatusCode {
			case 204:
				ok++
			case 409:
				conflicts++
			default:
				t.Errorf("status %d", resp.StatusCode)
			}
		}(i)
	}
	wg.Wait()
	require.Equal(t, providers*perProvider, ok)
	require.Equal(t, clients-providers*perProvider, conflicts)

	// Usages equal the allocations, and no provider is over capacity.
	var total int64
	for _, rp := range rps {
		st, _, body := call(t, srv, "GET", "/resource_providers/"+rp+"/usages", "", "")
		require.Equal(t, 200, st)
		used := int64(body["usages"].(map[string]any)["VCPU"].(float64))
		require.LessOrEqual(t, used, int64(4))
		total += used
		st, _, body = call(t, srv, "GET", "/resource_providers/"+rp+"/allocations", "", "")
		require.Equal(t, 200, st)
		var sum int64
		for _, c := range body["allocations"].(map[string]any) {
			sum += int64(c.(map[string]any)["resources"].(map[string]any)["VCPU"].(float64))
		}
		require.Equal(t, used, sum)
	}
	require.Equal(t, int64(providers*perProvider*2), total)
	var dbSum int64
	require.NoError(t, pool.QueryRow(context.Background(), `SELECT COALESCE(sum(used), 0) FROM placement.allocations`).Scan(&dbSum))
	require.Equal(t, total, dbSum)
}

// TestConcurrentMultiProviderClaims races clients that each claim on two
// providers (in both orders) to show the id-ordered locking never
// deadlocks and never over-commits.
func TestConcurrentMultiProviderClaims(t *testing.T) {
	t.Parallel()
	srv, pool := invServer(t)
	a := mkProvider(t, pool, "a")
	b := mkProvider(t, pool, "b")
	setInv(t, srv, a, `{"VCPU": {"total": 10}}`)
	setInv(t, srv, b, `{"DISK_GB": {"total": 10}}`)
	var wg sync.WaitGroup
	var mu sync.Mutex
	ok := 0
	for i := 0; i < 32; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			first, second := fmt.Sprintf(`"%s": {"resources": {"VCPU": 1}}`, a), fmt.Sprintf(`"%s": {"resources": {"DISK_GB": 1}}`, b)
			if i%2 == 1 {
				first, second = second, first
			}
			body := fmt.Sprintf(`{"allocations": {%s, %s}, "project_id": "p", "user_id": "u"}`, first, second)
			req, _ := http.NewRequest("PUT", srv.URL+"/allocations/"+uuid.NewString(), strings.NewReader(body))
			req.Header.Set("X-Auth-Token", "admin")
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("OpenStack-API-Version", "placement 1.12")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Error(err)
				return
			}
			resp.Body.Close()
			mu.Lock()
			defer mu.Unlock()
			if resp.StatusCode == 204 {
				ok++
			} else if resp.StatusCode != 409 {
				t.Errorf("status %d", resp.StatusCode)
			}
		}(i)
	}
	wg.Wait()
	require.Equal(t, 10, ok)
}

// TestAllocationGenerations: as Placement's replace_all and delete_all, a
// write bumps the providers the new allocations name (and, for a consumer
// given none, those it leaves); a provider a consumer moves off, and every
// provider on DELETE /allocations/{c}, keep their generation.
func TestAllocationGenerations(t *testing.T) {
	t.Parallel()
	srv := testServer(t)
	rpCreate(t, srv, "ga", rpU1, "")
	rpCreate(t, srv, "gb", rpU2, "")
	setInv(t, srv, rpU1, `{"VCPU": {"total": 8}}`)
	setInv(t, srv, rpU2, `{"VCPU": {"total": 8}}`)
	gen := func(rp string) float64 {
		_, _, b := call(t, srv, "GET", "/resource_providers/"+rp, "1.14", "")
		return b["generation"].(float64)
	}
	c := uuid.NewString()
	put := func(body string) {
		t.Helper()
		st, _, b := call(t, srv, "PUT", "/allocations/"+c, "1.28", body)
		require.Equal(t, 204, st, b)
	}
	a0, b0 := gen(rpU1), gen(rpU2)
	put(`{"allocations": {"` + rpU1 + `": {"resources": {"VCPU": 1}}}, "project_id": "p", "user_id": "u", "consumer_generation": null}`)
	require.Equal(t, a0+1, gen(rpU1))
	put(`{"allocations": {"` + rpU2 + `": {"resources": {"VCPU": 1}}}, "project_id": "p", "user_id": "u", "consumer_generation": 1}`)
	require.Equal(t, a0+1, gen(rpU1), "moved off: no bump")
	require.Equal(t, b0+1, gen(rpU2))
	put(`{"allocations": {}, "project_id": "p", "user_id": "u", "consumer_generation": 2}`)
	require.Equal(t, b0+2, gen(rpU2), "emptied: bump")
	put(`{"allocations": {"` + rpU1 + `": {"resources": {"VCPU": 1}}}, "project_id": "p", "user_id": "u", "consumer_generation": null}`)
	st, _, _ := call(t, srv, "DELETE", "/allocations/"+c, "1.28", "")
	require.Equal(t, 204, st)
	require.Equal(t, a0+2, gen(rpU1), "DELETE: no bump")
}

// TestConsumerAllocationsOrder: GET /allocations/{consumer_uuid} lists the
// providers in the order of the request that wrote the allocations, and
// each provider's classes likewise, as Placement does (osc-placement's
// `allocation unset` shows them in that order): whatever the microversion
// and body form (dict, pre-1.12 list where a repeated provider keeps its
// first place, POST /allocations).
func TestConsumerAllocationsOrder(t *testing.T) {
	t.Parallel()
	srv := testServer(t)
	const a, b, c = "aaaaaaaa-0000-4000-8000-000000000001", "bbbbbbbb-0000-4000-8000-000000000002", "cccccccc-0000-4000-8000-000000000003"
	for _, rp := range []string{a, b, c} {
		st, _, body := call(t, srv, "POST", "/resource_providers", "1.20", `{"name": "`+rp+`", "uuid": "`+rp+`"}`)
		require.Equal(t, 200, st, body)
		setInv(t, srv, rp, `{"VCPU": {"total": 8}, "MEMORY_MB": {"total": 1024}, "DISK_GB": {"total": 100}}`)
	}
	// order reads the providers, and the classes of each, as GET lists them.
	order := func(consumer string) ([]string, map[string][]string) {
		st, _, text := callRaw(t, srv, "GET", "/allocations/"+consumer, map[string]string{"OpenStack-API-Version": "placement 1.39"}, "")
		require.Equal(t, 200, st, text)
		var got struct {
			Allocations jsonObject[allocProviderBody] `json:"allocations"`
		}
		require.NoError(t, json.Unmarshal([]byte(text), &got))
		classes := map[string][]string{}
		for _, rp := range got.Allocations.keys {
			classes[rp] = got.Allocations.vals[rp].Resources.keys
		}
		return got.Allocations.keys, classes
	}
	put := func(consumer, version, body string) {
		t.Helper()
		st, _, resp := call(t, srv, "PUT", "/allocations/"+consumer, version, body)
		require.Equal(t, 204, st, resp)
	}
	c1 := uuid.NewString()
	put(c1, "1.39", `{"allocations": {"`+c+`": {"resources": {"VCPU": 1}}, "`+a+`": {"resources": {"MEMORY_MB": 10, "VCPU": 1, "DISK_GB": 1}}, "`+
		b+`": {"resources": {"VCPU": 1}}}, "project_id": "p", "user_id": "u", "consumer_generation": null, "consumer_type": "INSTANCE"}`)
	provs, classes := order(c1)
	require.Equal(t, []string{c, a, b}, provs)
	require.Equal(t, []string{"MEMORY_MB", "VCPU", "DISK_GB"}, classes[a])
	// Rewritten in another order: listed in the new one.
	put(c1, "1.39", `{"allocations": {"`+b+`": {"resources": {"VCPU": 2}}, "`+a+`": {"resources": {"VCPU": 1}}, "`+
		c+`": {"resources": {"DISK_GB": 3, "VCPU": 1}}}, "project_id": "p", "user_id": "u", "consumer_generation": 1, "consumer_type": "INSTANCE"}`)
	provs, classes = order(c1)
	require.Equal(t, []string{b, a, c}, provs)
	require.Equal(t, []string{"DISK_GB", "VCPU"}, classes[c])

	// The pre-1.12 list: a provider named twice keeps its first place and
	// its last amounts.
	c2 := uuid.NewString()
	put(c2, "1.0", `{"allocations": [{"resource_provider": {"uuid": "`+c+`"}, "resources": {"VCPU": 1}},
		{"resource_provider": {"uuid": "`+a+`"}, "resources": {"VCPU": 1}},
		{"resource_provider": {"uuid": "`+b+`"}, "resources": {"VCPU": 1}},
		{"resource_provider": {"uuid": "`+c+`"}, "resources": {"MEMORY_MB": 5}}]}`)
	provs, classes = order(c2)
	require.Equal(t, []string{c, a, b}, provs)
	require.Equal(t, []string{"MEMORY_MB"}, classes[c])

	// POST /allocations, two consumers.
	c3, c4 := uuid.NewString(), uuid.NewString()
	st, _, body := call(t, srv, "POST", "/allocations", "1.39", `{
		"`+c3+`": {"allocations": {"`+b+`": {"resources": {"VCPU": 1}}, "`+c+`": {"resources": {"VCPU": 1}}},
			"project_id": "p", "user_id": "u", "consumer_generation": null, "consumer_type": "INSTANCE"},
		"`+c4+`": {"allocations": {"`+c+`": {"resources": {"VCPU": 1}}, "`+a+`": {"resources": {"VCPU": 1}}, "`+b+`": {"resources": {"VCPU": 1}}},
			"project_id": "p", "user_id": "u", "consumer_generation": null, "consumer_type": "INSTANCE"}}`)
	require.Equal(t, 204, st, body)
	provs, _ = order(c3)
	require.Equal(t, []string{b, c}, provs)
	provs, _ = order(c4)
	require.Equal(t, []string{c, a, b}, provs)
}
