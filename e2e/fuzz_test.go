package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/metalloc/metalloc/db/dbtest"
	"github.com/metalloc/metalloc/devstack"
	"github.com/metalloc/metalloc/driver"
)

// fuzzRequest is one request the HTTP fuzzer sent and what came back.
type fuzzRequest struct {
	method, url, body string
	status            int
	answer            []byte
	location          string // the Location header (Placement's 201 before 1.20 has no body)
}

// fuzzer generates malformed (and now and then valid) requests for
// metalloc-api and metalloc-placement from a seeded generator.
type fuzzer struct {
	rng        *rand.Rand
	api, pl    string
	nodes, rps []string // fixture node and provider uuids
	allocs     []string // fixture allocation uuids
}

var (
	// fuzzJunk are identifiers, names and filter values that have broken
	// servers before: traversal, injection, NUL, odd unicode, huge, empty.
	fuzzJunk = []string{"", ".", "..", "%2e%2e%2f", "../../etc/passwd", "' OR 1=1--", "\"; DROP TABLE nodes;--",
		"%00", "a\x00b", "\u202e\u0000", "\xff\xfe", "💥ä", "${jndi:ldap://x/a}", "{{7*7}}", "<script>",
		strings.Repeat("a", 300), strings.Repeat("x", 5000), "-1", "0", "99999999999999999999", "1e308",
		"NaN", "null", "true", "[]", "{}", "9e2c9a41-5b6d-4f7e-8a9b-0c1d2e3f4a5", "9E2C9A41-5B6D-4F7E-8A9B-0C1D2E3F4A5B",
		"CUSTOM_", "CUSTOM_" + strings.Repeat("A", 300), "in:", "!", "in:!,", ":", "VCPU:", "VCPU:-1", ",,,"}
	fuzzVersions = []string{"", "1.1", "1.82", "1.83", "latest", "1.", ".1", "1.-1", "abc", "2.0", "1.1.1",
		"99999999999999999999.1", "1.0x", " 1.50 ", "1.\u00bd"}
	fuzzPlacementVersions = []string{"", "placement 1.0", "placement 1.39", "placement 1.40", "placement latest",
		"placement", "placement 1.x", "nova 1.2", "placement 1.10, placement 1.39", "placement 1.-1", "placement \u00bd"}
	fuzzContentTypes = []string{"application/json", "application/json", "application/json", "application/json",
		"application/json", "application/json", "application/json", "text/plain", "",
		"application/json; charset=latin1", "multipart/form-data; boundary=x", "application/xml", "*/*"}
	fuzzMethods = []string{"PROPFIND", "TRACE", "OPTIONS", "HEAD", "FOO", "PATCH", "PUT", "DELETE", "POST"}
	fuzzParams  = []string{"limit", "marker", "sort_key", "sort_dir", "fields", "detail", "resource_class",
		"provision_state", "owner", "lessee", "driver", "maintenance", "associated", "conductor_group", "fault",
		"node", "state", "name", "uuid", "member_of", "resources", "required", "in_tree", "project_id",
		"user_id", "group_policy", "same_subtree", "root_required", "resources1", "required_X", "address", "portgroup",
		"node_uuid", "shard"}
)

func (f *fuzzer) pick(xs []string) string { return xs[f.rng.IntN(len(xs))] }

// ident is a fixture identifier most of the time, else junk or a random uuid.
func (f *fuzzer) ident(fixtures []string) string {
	switch n := f.rng.IntN(10); {
	case n < 6 && len(fixtures) > 0:
		return fixtures[f.rng.IntN(len(fixtures))]
	case n < 7:
		return uuid.NewString()
	default:
		return url.PathEscape(f.pick(fuzzJunk))
	}
}

// query is a few parameters with junk or plausible values.
func (f *fuzzer) query() string {
	q := url.Values{}
	for range f.rng.IntN(4) {
		v := f.pick(fuzzJunk)
		if f.rng.IntN(3) == 0 {
			v = f.pick([]string{"5", "name", "uuid,name", "asc", "desc", "gold", "available", "VCPU:1", "CUSTOM_GPU", "isolate", "none"})
		}
		q.Add(f.pick(fuzzParams), v)
	}
	return q.Encode()
}

// value is a JSON value of a random type, sometimes huge or deeply nested.
func (f *fuzzer) value(depth int) any {
	switch f.rng.IntN(12) {
	case 0:
		return nil
	case 1:
		return f.rng.IntN(3) == 0
	case 2:
		return f.rng.NormFloat64() * 1e12
	case 3:
		return -f.rng.Int64()
	case 4:
		if depth < 4 {
			m := map[string]any{}
			for range f.rng.IntN(4) {
				m[f.pick(fuzzJunk)] = f.value(depth + 1)
			}
			return m
		}
		return map[string]any{}
	case 5:
		if depth < 4 {
			a := []any{}
			for range f.rng.IntN(4) {
				a = append(a, f.value(depth+1))
			}
			return a
		}
		return []any{}
	case 6:
		return strings.Repeat("é", 20000+f.rng.IntN(40000))
	default:
		return f.pick(fuzzJunk)
	}
}

// mutate damages a valid JSON body: a field gets a wrong value, is dropped
// or duplicated, or the text is truncated, flipped, nested or bloated.
func (f *fuzzer) mutate(valid string) string {
	var doc any
	_ = json.Unmarshal([]byte(valid), &doc)
	switch f.rng.IntN(9) {
	case 0:
		return valid
	case 1:
		if len(valid) > 1 {
			return valid[:f.rng.IntN(len(valid))]
		}
	case 2:
		b := []byte(valid)
		for range 1 + f.rng.IntN(3) {
			b[f.rng.IntN(len(b))] = byte(f.rng.IntN(256))
		}
		return string(b)
	case 3:
		n := 100 + f.rng.IntN(20000)
		return strings.Repeat("[", n) + strings.Repeat("]", n)
	case 4:
		return `{"a":"` + strings.Repeat("x", 120000+f.rng.IntN(100000)) + `"}`
	case 5:
		return string(bytes.Repeat([]byte{0}, 1+f.rng.IntN(64)))
	}
	switch d := doc.(type) {
	case map[string]any:
		for k := range d {
			switch f.rng.IntN(3) {
			case 0:
				d[k] = f.value(0)
			case 1:
				delete(d, k)
			}
		}
		if f.rng.IntN(3) == 0 {
			d[f.pick(fuzzJunk)] = f.value(0)
		}
	case []any:
		for i := range d {
			if m, ok := d[i].(map[string]any); ok {
				for k := range m {
					if f.rng.IntN(2) == 0 {
						m[k] = f.value(0)
					}
				}
			}
		}
	}
	out, _ := json.Marshal(doc)
	return string(out)
}

// next builds one request: target API, method, path and query, headers,
// body.
func (f *fuzzer) next() (*http.Request, string, bool) {
	node, alloc, rp := f.ident(f.nodes), f.ident(f.allocs), f.ident(f.rps)
	type tmpl struct{ method, path, body string }
	var ts []tmpl
	ironic := f.rng.IntN(2) == 0
	if ironic {
		ts = []tmpl{
			{"GET", "/v1/nodes?" + f.query(), ""},
			{"GET", "/v1/nodes/detail?" + f.query(), ""},
			{"GET", "/v1/nodes/" + node + "?" + f.query(), ""},
			{"GET", "/v1/nodes/" + node + "/states", ""},
			{"GET", "/v1/nodes/" + node + "/traits", ""},
			{"GET", "/v1/nodes/" + node + "/allocation", ""},
			{"GET", "/v1/allocations?" + f.query(), ""},
			{"GET", "/v1/allocations/" + alloc, ""},
			{"GET", "/v1/conductors?" + f.query(), ""},
			{"GET", "/v1/topology", ""},
			{"PUT", "/v1/topology", `{"levels":[{"name":"row","source":"extra.row"},{"name":"rack","source":"trait:CUSTOM_RACK_"}]}`},
			{"POST", "/v1/nodes", `{"driver":"fake-hardware","name":"fz-` + strconv.Itoa(f.rng.IntN(1e6)) + `","resource_class":"fuzz","properties":{"cpus":4},"extra":{"a":"b"}}`},
			{"PATCH", "/v1/nodes/" + node, `[{"op":"replace","path":"/extra/k","value":"v"},{"op":"add","path":"/properties/x","value":1}]`},
			{"PATCH", "/v1/nodes/" + node, `[{"op":"remove","path":"/extra/a"}]`},
			{"DELETE", "/v1/nodes/" + node, ""},
			{"PUT", "/v1/nodes/" + node + "/maintenance", `{"reason":"fuzz"}`},
			{"PUT", "/v1/nodes/" + node + "/states/power", `{"target":"power on"}`},
			{"PUT", "/v1/nodes/" + node + "/states/provision", `{"target":"manage"}`},
			{"PUT", "/v1/nodes/" + node + "/traits", `{"traits":["CUSTOM_FUZZ"]}`},
			{"PUT", "/v1/nodes/" + node + "/traits/" + url.PathEscape(f.pick(fuzzJunk)), ""},
			{"POST", "/v1/allocations", `{"resource_class":"fuzz","traits":["CUSTOM_FUZZ"],"name":"fa-` + strconv.Itoa(f.rng.IntN(1e6)) + `","extra":{}}`},
			{"PATCH", "/v1/allocations/" + alloc, `[{"op":"add","path":"/extra/x","value":"y"}]`},
			{"POST", "/v1/allocation_groups", `{"count":2,"resource_class":"fuzz","required":"rack","traits":["CUSTOM_FUZZ"],"name":"fg-` + strconv.Itoa(f.rng.IntN(1e6)) + `","extra":{}}`},
			{"GET", "/v1/allocation_groups?" + f.query(), ""},
			{"GET", "/v1/allocation_groups/" + f.ident(nil), ""},
			{"PATCH", "/v1/allocation_groups/" + f.ident(nil), `[{"op":"replace","path":"/count","value":3}]`},
			{"DELETE", "/v1/allocation_groups/" + f.ident(nil), ""},
			{"DELETE", "/v1/allocations/" + alloc, ""},
			{f.pick(fuzzMethods), "/v1/nodes/" + node, `{}`},
			{"GET", "/v1/ports?" + f.query(), ""},
			{"GET", "/v1/portgroups/detail?" + f.query(), ""},
			{"GET", "/v1/nodes/" + node + "/ports?" + f.query(), ""},
			{"GET", "/v1/ports/" + f.ident(nil) + "?" + f.query(), ""},
			{"POST", "/v1/ports", `{"node_uuid":"` + node + `","address":"` + fmt.Sprintf("52:54:00:%02x:%02x:%02x", f.rng.IntN(256), f.rng.IntN(256), f.rng.IntN(256)) +
				`","extra":{"a":"b"},"local_link_connection":{"port_id":"p","switch_id":"aa:bb:cc:dd:ee:ff"},"physical_network":"n"}`},
			{"POST", "/v1/portgroups", `{"node_uuid":"` + node + `","name":"fpg-` + strconv.Itoa(f.rng.IntN(1e6)) + `","mode":"802.3ad","properties":{}}`},
			{"PATCH", "/v1/portgroups/" + f.ident(nil), `[{"op":"add","path":"/extra/x","value":"y"}]`},
			{"GET", "/v1/nodes/" + node + "/validate", ""},
			{"PUT", "/v1/nodes/" + node + "/states/raid", `{"logical_disks":[{"size_gb":"MAX","raid_level":"1","is_root_volume":true}]}`},
			{"POST", "/v1/nodes/" + node + "/vifs", `{"id":"` + f.ident(nil) + `"}`},
			{"GET", "/v1/nodes/" + node + "/vifs", ""},
			{"GET", "/v1/nodes/" + node + "/history?" + f.query(), ""},
			{"GET", "/v1/nodes/" + node + "/management/indicators/" + url.PathEscape(f.pick(fuzzJunk)), ""},
			{"GET", "/v1/drivers?" + f.query(), ""},
			{"GET", "/v1/drivers/" + f.ident(nil) + "/properties", ""},
			{"GET", "/v1/chassis?" + f.query(), ""},
			{"POST", "/v1/chassis", `{"description":"fz","extra":{"a":1}}`},
			{"PATCH", "/v1/chassis/" + f.ident(nil), `[{"op":"add","path":"/extra/x","value":"y"}]`},
			{"GET", "/v1/deploy_templates?" + f.query(), ""},
			{"POST", "/v1/deploy_templates", `{"name":"CUSTOM_FZ_` + strconv.Itoa(f.rng.IntN(1e6)) + `","steps":[{"interface":"bios","step":"s","args":{},"priority":1}]}`},
			{"PATCH", "/v1/deploy_templates/" + f.ident(nil), `[{"op":"replace","path":"/steps/0/priority","value":"2"}]`},
			{"GET", "/v1/shards", ""},
		}
	} else {
		ts = []tmpl{
			{"GET", "/resource_providers?" + f.query(), ""},
			{"GET", "/resource_providers/" + rp, ""},
			{"GET", "/resource_providers/" + rp + "/inventories", ""},
			{"GET", "/resource_providers/" + rp + "/usages", ""},
			{"GET", "/allocation_candidates?" + f.query(), ""},
			{"GET", "/traits?" + f.query(), ""},
			{"GET", "/usages?" + f.query(), ""},
			{"GET", "/resource_classes/" + url.PathEscape(f.pick(fuzzJunk)), ""},
			{"POST", "/resource_providers", `{"name":"fz-` + strconv.Itoa(f.rng.IntN(1e6)) + `"}`},
			{"PUT", "/resource_providers/" + rp, `{"name":"fz-` + strconv.Itoa(f.rng.IntN(1e6)) + `"}`},
			{"PUT", "/resource_providers/" + rp + "/inventories", `{"resource_provider_generation":1,"inventories":{"VCPU":{"total":8}}}`},
			{"PUT", "/resource_providers/" + rp + "/traits", `{"resource_provider_generation":1,"traits":["HW_CPU_X86_AVX2"]}`},
			{"PUT", "/resource_providers/" + rp + "/aggregates", `{"resource_provider_generation":1,"aggregates":["` + uuid.NewString() + `"]}`},
			{"DELETE", "/resource_providers/" + rp, ""},
			{"PUT", "/traits/" + url.PathEscape(f.pick(fuzzJunk)), ""},
			{"PUT", "/allocations/" + uuid.NewString(), `{"allocations":{"` + rp + `":{"resources":{"VCPU":1}}},"project_id":"p","user_id":"u","consumer_generation":null,"consumer_type":"INSTANCE"}`},
			{"POST", "/reshaper", `{"inventories":{},"allocations":{}}`},
			{f.pick(fuzzMethods), "/resource_providers/" + rp, `{}`},
		}
	}
	t := ts[f.rng.IntN(len(ts))]
	body := t.body
	if body != "" {
		body = f.mutate(body)
	}
	base := f.pl
	if ironic {
		base = f.api
	}
	req, err := http.NewRequest(t.method, base+t.path, strings.NewReader(body))
	if err != nil {
		req, _ = http.NewRequest(http.MethodGet, base+"/v1/nodes/"+url.PathEscape(t.path), nil)
	}
	req.Header.Set("Content-Type", f.pick(fuzzContentTypes))
	// Most requests carry a good microversion, so that they reach the
	// handlers.
	good := f.rng.IntN(10) < 7
	switch {
	case ironic && good:
		req.Header.Set("X-OpenStack-Ironic-API-Version", f.pick([]string{"1.82", "1.60", "1.52", "latest"}))
	case ironic:
		req.Header.Set("X-OpenStack-Ironic-API-Version", f.pick(fuzzVersions))
	case good:
		req.Header.Set("OpenStack-API-Version", f.pick([]string{"placement 1.39", "placement 1.20", "placement 1.10", "placement latest"}))
	default:
		req.Header.Set("OpenStack-API-Version", f.pick(fuzzPlacementVersions))
	}
	switch f.rng.IntN(30) {
	case 0:
	case 1:
		req.SetBasicAuth("fuzzer", "wrong")
	case 2:
		req.Header.Set("Authorization", "Basic !!!"+headerSafe(f.pick(fuzzJunk)))
	case 3:
		req.Header.Set("Authorization", "Bearer "+strings.Repeat("t", 9000))
	default:
		req.SetBasicAuth("fuzzer", "fuzz-pw")
	}
	return req, body, ironic
}

// TestHTTPFuzz sends METALLOC_FUZZ_REQUESTS (default 10,000) generated
// malformed requests, 8 at a time, to a running metalloc-api and
// metalloc-placement with authentication on (http_basic): bad JSON, wrong
// types, huge and deeply nested values, NUL and odd unicode, bad uuids and
// names in paths, injection-like filters, fields, sort keys and markers,
// bad microversions, wrong content types, odd methods, bad credentials.
// Port and port group routes are fuzzed too (for their answers).
// No answer may be a 5xx, both services must still be running and
// answering, neither may have logged a panic, and the database must hold
// exactly what the accepted (2xx) requests wrote: the nodes, allocations
// and resource providers created and not deleted, and every fixture
// object no accepted request named unchanged. METALLOC_FUZZ_SEED replays
// a run (the seed is logged).
func TestHTTPFuzz(t *testing.T) {
	t.Parallel()
	n := 10000
	if s := os.Getenv("METALLOC_FUZZ_REQUESTS"); s != "" {
		var err error
		n, err = strconv.Atoi(s)
		require.NoError(t, err)
	}
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("METALLOC_FUZZ_SEED"); s != "" {
		var err error
		seed, err = strconv.ParseUint(s, 10, 64)
		require.NoError(t, err)
	}
	t.Logf("fuzzing with %d requests, METALLOC_FUZZ_SEED=%d", n, seed)

	users := filepath.Join(t.TempDir(), "htpasswd")
	htpasswd(t, users, "fuzzer", "fuzz-pw")
	dbURL := dbtest.NewURL(t)
	stack, _ := startStackOpts(t, 1, devstack.Options{
		DatabaseURL: dbURL, Placement: true,
		Env: []string{
			"METALLOC_API_AUTH_STRATEGY=http_basic", "METALLOC_API_HTTP_BASIC_AUTH_USER_FILE=" + users,
			"METALLOC_PLACEMENT_AUTH_STRATEGY=http_basic", "METALLOC_PLACEMENT_HTTP_BASIC_AUTH_USER_FILE=" + users,
		},
	})
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, dbURL)
	require.NoError(t, err)
	t.Cleanup(pool.Close)

	send := func(method, u, body string) (int, []byte) {
		req, err := http.NewRequest(method, u, strings.NewReader(body))
		require.NoError(t, err)
		req.SetBasicAuth("fuzzer", "fuzz-pw")
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-OpenStack-Ironic-API-Version", "1.82")
		req.Header.Set("OpenStack-API-Version", "placement 1.39")
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		raw, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, raw
	}
	uuidOf := func(raw []byte) string {
		var v struct{ UUID string }
		_ = json.Unmarshal(raw, &v)
		return v.UUID
	}
	f := &fuzzer{rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)), api: stack.APIURL, pl: stack.PlacementURL}
	// No conductor process: allocations stay as the API wrote them. A
	// conductors row that stays alive for the run serves the drivers, so
	// that nodes can be created (the API requires a live conductor).
	for _, c := range stack.Conductors {
		require.NoError(t, c.Signal(syscall.SIGTERM))
		require.NoError(t, c.Wait(30*time.Second))
	}
	_, err = pool.Exec(ctx, `INSERT INTO conductors (hostname, drivers, expires_at)
		VALUES ('fuzz-drivers', $1, now() + interval '1 day')`, driver.Names())
	require.NoError(t, err)
	for i := range 8 {
		st, raw := send("POST", stack.APIURL+"/v1/nodes", fmt.Sprintf(`{"driver":"fake-hardware","name":"fixture-%d","resource_class":"fuzz","extra":{"a":"b"}}`, i))
		require.Equal(t, 201, st, "%s", raw)
		f.nodes = append(f.nodes, uuidOf(raw))
		st, raw = send("POST", stack.APIURL+"/v1/allocations", fmt.Sprintf(`{"resource_class":"fuzz","name":"fixture-%d"}`, i))
		require.Equal(t, 201, st, "%s", raw)
		f.allocs = append(f.allocs, uuidOf(raw))
		rp := uuid.NewString()
		st, raw = send("POST", stack.PlacementURL+"/resource_providers", fmt.Sprintf(`{"name":"fixture-%d","uuid":"%s"}`, i, rp))
		require.Equal(t, 200, st, "%s", raw)
		f.rps = append(f.rps, rp)
		st, raw = send("PUT", stack.PlacementURL+"/resource_providers/"+rp+"/inventories", `{"resource_provider_generation":0,"inventories":{"VCPU":{"total":8}}}`)
		require.Equal(t, 200, st, "%s", raw)
	}
	before := fuzzSnapshot(t, pool)

	// Generate every request up front (the generator is not safe for
	// concurrent use), then send them 8 at a time.
	type job struct {
		req    *http.Request
		body   string
		ironic bool
	}
	jobs := make([]job, n)
	for i := range jobs {
		jobs[i].req, jobs[i].body, jobs[i].ironic = f.next()
	}
	results := make([]fuzzRequest, n)
	var wg sync.WaitGroup
	next := make(chan int)
	client := &http.Client{Timeout: time.Minute}
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				j := jobs[i]
				r := fuzzRequest{method: j.req.Method, url: j.req.URL.String(), body: j.body}
				resp, err := client.Do(j.req)
				if err != nil {
					r.status, r.answer = -1, []byte(err.Error())
				} else {
					r.status, r.location = resp.StatusCode, resp.Header.Get("Location")
					r.answer, _ = io.ReadAll(io.LimitReader(resp.Body, 1<<20))
					resp.Body.Close()
				}
				results[i] = r
			}
		}()
	}
	start := time.Now()
	for i := range jobs {
		next <- i
		if (i+1)%5000 == 0 {
			t.Logf("sent %d of %d requests (%.0f/s)", i+1, n, float64(i+1)/time.Since(start).Seconds())
		}
	}
	close(next)
	wg.Wait()

	statuses := map[int]int{}
	var bad []string
	for _, r := range results {
		statuses[r.status]++
		if r.status >= 500 || r.status < 0 {
			bad = append(bad, fmt.Sprintf("%s %.300s body %.200q: %d %.300s", r.method, r.url, r.body, r.status, r.answer))
		}
	}
	t.Logf("statuses: %v", statuses)
	if len(bad) > 20 {
		bad = bad[:20]
	}
	require.Empty(t, bad, "server errors or dropped connections:\n%s", strings.Join(bad, "\n"))

	for _, p := range []*devstack.Process{stack.API, stack.Placement} {
		require.False(t, p.Exited(), "%s exited", p.Name)
		logged, err := os.ReadFile(p.LogPath)
		require.NoError(t, err)
		require.NotContains(t, string(logged), "panic", "%s logged a panic", p.Name)
	}
	st, _ := send("GET", stack.APIURL+"/v1/nodes/"+f.nodes[0], "")
	require.Contains(t, []int{200, 404}, st, "metalloc-api still answers")
	st, _ = send("GET", stack.PlacementURL+"/resource_providers", "")
	require.Equal(t, 200, st, "metalloc-placement still answers")

	fuzzCheckDatabase(t, pool, before, results)
}

// fuzzState is what the database holds: row digests of nodes, allocations
// and resource providers (with their inventories, traits and aggregates),
// by uuid, and the names of nodes, allocations and providers.
type fuzzState struct {
	// allocs leaves out allocation group members: they come and go with
	// their group (groups).
	nodes, allocs, rps, groups map[string]string // uuid -> md5 of the row(s)
	// records are chassis and deploy templates.
	records map[string]string
	names   map[string]string // uuid -> name
}

func fuzzSnapshot(t *testing.T, pool *pgxpool.Pool) fuzzState {
	t.Helper()
	s := fuzzState{nodes: map[string]string{}, allocs: map[string]string{}, rps: map[string]string{},
		groups: map[string]string{}, records: map[string]string{}, names: map[string]string{}}
	for _, q := range []struct {
		into map[string]string
		sql  string
	}{
		{s.nodes, `SELECT n.uuid::text, md5(row_to_json(n)::text || coalesce((SELECT string_agg(trait, ',' ORDER BY trait) FROM node_traits WHERE node_id = n.id), '')), coalesce(n.name, '') FROM nodes n`},
		{s.allocs, `SELECT a.uuid::text, md5(row_to_json(a)::text), coalesce(a.name, '') FROM allocations a WHERE a.group_id IS NULL`},
		{s.groups, `SELECT g.uuid::text, md5(row_to_json(g)::text), coalesce(g.name, '') FROM allocation_groups g`},
		{s.records, `SELECT c.uuid::text, md5(row_to_json(c)::text), '' FROM chassis c
		             UNION ALL SELECT d.uuid::text, md5(row_to_json(d)::text), d.name FROM deploy_templates d`},
		{s.rps, `SELECT rp.uuid::text, md5(row_to_json(rp)::text
		           || coalesce((SELECT string_agg(row_to_json(i)::text, ',' ORDER BY i.resource_class_id) FROM placement.inventories i WHERE i.resource_provider_id = rp.id), '')
		           || coalesce((SELECT string_agg(trait_id::text, ',' ORDER BY trait_id) FROM placement.resource_provider_traits WHERE resource_provider_id = rp.id), '')
		           || coalesce((SELECT string_agg(aggregate_uuid::text, ',' ORDER BY aggregate_uuid) FROM placement.resource_provider_aggregates WHERE resource_provider_id = rp.id), '')),
		           rp.name FROM placement.resource_providers rp`},
	} {
		rows, err := pool.Query(context.Background(), q.sql)
		require.NoError(t, err)
		for rows.Next() {
			var id, digest, name string
			require.NoError(t, rows.Scan(&id, &digest, &name))
			q.into[id], s.names[id] = digest, name
		}
		require.NoError(t, rows.Err())
	}
	return s
}

// fuzzCheckDatabase compares the database with what the accepted
// requests wrote: each object that exists is a fixture or was created by
// an accepted request and was not deleted by one; each fixture or created
// object that is gone was deleted by an accepted request; each fixture no
// accepted write named (by uuid or name, in its path or body) is unchanged.
func fuzzCheckDatabase(t *testing.T, pool *pgxpool.Pool, before fuzzState, results []fuzzRequest) {
	after := fuzzSnapshot(t, pool)
	created := map[string]string{} // uuid -> name given at creation
	var writes []fuzzRequest
	for _, r := range results {
		if r.status < 200 || r.status > 299 || r.method == "GET" || r.method == "HEAD" {
			continue
		}
		writes = append(writes, r)
		// Ports and port groups are not part of the snapshot (they are
		// fuzzed for their answers only, and go with their node).
		if r.method == "POST" && !strings.Contains(r.url, "/v1/port") {
			var v struct{ UUID, Name string }
			_ = json.Unmarshal(r.answer, &v)
			if v.UUID == "" && r.location != "" {
				v.UUID = r.location[strings.LastIndex(r.location, "/")+1:]
			}
			if v.UUID != "" {
				created[v.UUID] = v.Name
			}
		}
	}
	// named reports whether an accepted write named id or its name.
	named := func(id string, deletesOnly bool) bool {
		keys := []string{id}
		if n := created[id]; n != "" {
			keys = append(keys, n)
		}
		if n := before.names[id]; n != "" {
			keys = append(keys, n)
		}
		if n := after.names[id]; n != "" {
			keys = append(keys, n)
		}
		for _, w := range writes {
			if deletesOnly && w.method != "DELETE" {
				continue
			}
			u, _ := url.PathUnescape(w.url)
			for _, k := range keys {
				if strings.Contains(u, "/"+k) || (!deletesOnly && strings.Contains(w.body, k)) {
					return true
				}
			}
		}
		return false
	}
	var problems []string
	for kind, pair := range map[string][2]map[string]string{
		"node": {before.nodes, after.nodes}, "allocation": {before.allocs, after.allocs}, "resource provider": {before.rps, after.rps},
		"allocation group": {before.groups, after.groups}, "record": {before.records, after.records},
	} {
		was, is := pair[0], pair[1]
		for id := range is {
			if _, fixture := was[id]; !fixture && !isCreated(created, id) {
				problems = append(problems, fmt.Sprintf("%s %s exists but no accepted request created it", kind, id))
			}
		}
		for id := range was {
			if _, still := is[id]; !still && !named(id, true) {
				problems = append(problems, fmt.Sprintf("fixture %s %s is gone but no accepted request deleted it", kind, id))
			} else if still && is[id] != was[id] && !named(id, false) {
				problems = append(problems, fmt.Sprintf("fixture %s %s changed but no accepted request wrote it", kind, id))
			}
		}
	}
	for id := range created {
		_, n := after.nodes[id]
		_, a := after.allocs[id]
		_, r := after.rps[id]
		_, g := after.groups[id]
		_, rec := after.records[id]
		if !n && !a && !r && !g && !rec && !named(id, true) {
			problems = append(problems, fmt.Sprintf("created object %s is gone but no accepted request deleted it", id))
		}
	}
	t.Logf("accepted writes: %d; objects created: %d", len(writes), len(created))
	require.Empty(t, problems, "\n%s", strings.Join(problems, "\n"))
}

func isCreated(created map[string]string, id string) bool {
	_, ok := created[id]
	return ok
}

// headerSafe drops the control characters net/http refuses to send in a
// header value.
func headerSafe(s string) string {
	return strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f {
			return -1
		}
		return r
	}, s)
}
