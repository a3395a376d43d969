package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
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
	"github.com/metalloc/metalloc/ironic"
	"github.com/metalloc/metalloc/web/webtest"
)

// ironicEnv is the environment of metalloc processes in front of ir in
// these tests: a full sync every 2 s, quick liveness and takeover.
func ironicEnv(ir *devstack.Ironic, extra ...string) []string {
	return append([]string{
		"METALLOC_IRONIC_ENDPOINT=" + ir.URL,
		"METALLOC_IRONIC_SYNC_SCHEDULE=@every 2s",
		"METALLOC_CONDUCTOR_HEARTBEAT_INTERVAL=300ms",
		"METALLOC_CONDUCTOR_HEARTBEAT_TIMEOUT=5s",
		"METALLOC_CONDUCTOR_TAKEOVER_SCHEDULE=@every 1s",
	}, extra...)
}

// ironicStack starts metalloc-api and n conductors in front of ir, on a
// database of their own, and returns them with a pool on that database.
func ironicStack(t *testing.T, ir *devstack.Ironic, n int, extra ...string) (*devstack.Stack, *pgxpool.Pool) {
	t.Helper()
	url := dbtest.NewURL(t)
	stack, _ := startStackOpts(t, n, devstack.Options{DatabaseURL: url, Env: ironicEnv(ir, extra...)})
	pool, err := pgxpool.New(context.Background(), url)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	return stack, pool
}

// enrollClass enrols n available nodes of resource class rc in Ironic,
// named <rc>-1 ... <rc>-n, and returns their uuids.
func enrollClass(t *testing.T, ir *devstack.Ironic, rc string, n int) []string {
	t.Helper()
	var specs []devstack.IronicNode
	for k := 1; k <= n; k++ {
		specs = append(specs, devstack.IronicNode{Name: fmt.Sprintf("%s-%d", rc, k), ResourceClass: rc})
	}
	uuids, err := ir.EnrollAvailable(context.Background(), specs, n)
	require.NoError(t, err)
	return uuids
}

// waitFree waits until metalloc's mirror has n free nodes of class rc.
func waitFree(t *testing.T, pool *pgxpool.Pool, rc string, n int) {
	t.Helper()
	dbtest.WaitFor(t, 2*time.Minute, fmt.Sprintf("%d free %s nodes in the mirror", n, rc), func() bool {
		return dbtest.Count(t, pool, `SELECT count(*) FROM free_nodes WHERE resource_class = $1`, rc) == n
	})
}

// waitSync waits until a full sync that started after now has finished.
func waitSync(t *testing.T, pool *pgxpool.Pool) {
	t.Helper()
	var now time.Time
	require.NoError(t, pool.QueryRow(context.Background(), `SELECT clock_timestamp()`).Scan(&now))
	dbtest.WaitFor(t, 2*time.Minute, "a full sync of Ironic's nodes", func() bool {
		return dbtest.Count(t, pool, `SELECT count(*) FROM ironic_sync_lease
			WHERE last_sync_started_at > $1 AND last_sync_at > last_sync_started_at`, now) == 1
	})
}

// apiCall sends one request to base (metalloc-api or Ironic) at
// microversion 1.82, with headers kv..., and returns the status and body;
// it fails the test on a 500.
func apiCall(t *testing.T, method, url string, body any, kv ...string) (int, []byte) {
	t.Helper()
	var rd io.Reader
	if body != nil {
		raw, err := json.Marshal(body)
		require.NoError(t, err)
		rd = bytes.NewReader(raw)
	}
	req, err := http.NewRequest(method, url, rd)
	require.NoError(t, err)
	req.Header.Set("X-OpenStack-Ironic-API-Version", "1.82")
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(kv); i += 2 {
		req.Header.Set(kv[i], kv[i+1])
	}
	resp, err := (&http.Client{Timeout: time.Minute}).Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.NotEqual(t, http.StatusInternalServerError, resp.StatusCode, "%s %s: %s", method, url, out)
	return resp.StatusCode, out
}

// allocDoc is an allocation as either API shows it.
type allocDoc struct {
	UUID      string  `json:"uuid"`
	State     string  `json:"state"`
	NodeUUID  *string `json:"node_uuid"`
	LastError *string `json:"last_error"`
}

// allocate creates an allocation through base and waits until it is no
// longer allocating (a 4xx from the POST comes back as the error).
func allocate(t *testing.T, base string, body map[string]any, kv ...string) (allocDoc, error) {
	t.Helper()
	st, raw := apiCall(t, http.MethodPost, base+"/v1/allocations", body, kv...)
	if st != http.StatusCreated {
		return allocDoc{}, fmt.Errorf("POST /v1/allocations: %d %s", st, raw)
	}
	var a allocDoc
	require.NoError(t, json.Unmarshal(raw, &a))
	var done allocDoc
	dbtest.WaitFor(t, 2*time.Minute, "allocation "+a.UUID+" to settle", func() bool {
		st, raw := apiCall(t, http.MethodGet, base+"/v1/allocations/"+a.UUID, nil, kv...)
		require.Equal(t, http.StatusOK, st, "%s", raw)
		require.NoError(t, json.Unmarshal(raw, &done))
		return done.State != "allocating"
	})
	return done, nil
}

// agree checks that metalloc and Ironic agree on the allocations and
// nodes of class rc: no allocation is left half-way (allocating, a journal
// row creating or deleting); every allocation of metalloc's is in Ironic,
// active on the same node (whose instance is that allocation) or, in
// error, in error or absent there; a node Ironic gives an allocation to is
// held by metalloc for that allocation or not at all (no node is held
// twice); and metalloc's own invariants hold.
func agree(t *testing.T, ir *devstack.Ironic, pool *pgxpool.Pool, rc string) {
	t.Helper()
	ctx := context.Background()
	// Deletions reach Ironic a moment after metalloc's (the journal's
	// deleter); nothing may stay half-way for long.
	dbtest.WaitFor(t, time.Minute, "no journal row left half-way (creating, deleting)", func() bool {
		return dbtest.Count(t, pool, `SELECT count(*) FROM ironic_allocations WHERE state IN ('creating', 'deleting')`) == 0
	})
	// Ironic answers at most 1,000 a page (api.max_limit): read by marker.
	inIronic := map[string]ironic.Allocation{}
	for marker := ""; ; {
		var ia struct {
			Allocations []ironic.Allocation `json:"allocations"`
		}
		_, err := ir.Do(ctx, http.MethodGet, "/v1/allocations?resource_class="+rc+"&limit=1000"+marker, nil, &ia)
		require.NoError(t, err)
		for _, a := range ia.Allocations {
			inIronic[a.UUID] = a
		}
		if len(ia.Allocations) < 1000 {
			break
		}
		marker = "&marker=" + ia.Allocations[len(ia.Allocations)-1].UUID
	}
	instance := map[string]string{}
	for marker := ""; ; {
		var in struct {
			Nodes []struct {
				UUID         string  `json:"uuid"`
				InstanceUUID *string `json:"instance_uuid"`
			} `json:"nodes"`
		}
		_, err := ir.Do(ctx, http.MethodGet, "/v1/nodes?resource_class="+rc+"&fields=uuid,instance_uuid&limit=1000"+marker, nil, &in)
		require.NoError(t, err)
		for _, n := range in.Nodes {
			if n.InstanceUUID != nil {
				instance[n.UUID] = *n.InstanceUUID
			}
		}
		if len(in.Nodes) < 1000 {
			break
		}
		marker = "&marker=" + in.Nodes[len(in.Nodes)-1].UUID
	}
	rows, err := pool.Query(ctx, `SELECT a.uuid::text, a.state, coalesce(n.uuid::text, '')
		FROM allocations a LEFT JOIN nodes n ON n.id = a.node_id WHERE a.resource_class = $1`, rc)
	require.NoError(t, err)
	mine := map[string]bool{}
	for rows.Next() {
		var u, state, node string
		require.NoError(t, rows.Scan(&u, &state, &node))
		mine[u] = true
		ia, found := inIronic[u]
		switch state {
		case "active":
			require.True(t, found, "metalloc's active allocation %s is not in Ironic", u)
			require.Equal(t, ironic.AllocationActive, ia.State, "allocation %s", u)
			require.Equal(t, node, ia.Node(), "allocation %s: metalloc and Ironic name different nodes", u)
			require.Equal(t, u, instance[node], "node %s: Ironic's instance is not allocation %s", node, u)
		case "error":
			require.True(t, !found || ia.State == ironic.AllocationError, "metalloc's failed allocation %s is %s in Ironic", u, ia.State)
		default:
			t.Fatalf("allocation %s still %s in metalloc", u, state)
		}
	}
	require.NoError(t, rows.Err())
	for node, inst := range instance {
		var held *string
		require.NoError(t, pool.QueryRow(ctx, `SELECT a.uuid::text FROM nodes n LEFT JOIN allocations a ON a.id = n.allocation_id
			WHERE n.uuid = $1`, node).Scan(&held))
		require.True(t, held == nil || *held == inst, "node %s: Ironic's instance %s, metalloc holds it for another allocation", node, inst)
		if !mine[inst] {
			require.Nil(t, held, "node %s taken directly in Ironic is held by metalloc", node)
		}
	}
	require.Empty(t, dbtest.Broken(t, pool))
}

// TestIronicFrontAllocations: metalloc-api and two conductors in front of
// the real Ironic (two conductors, json-rpc, fake-hardware), each subtest
// on nodes of a class of its own; at the end of each, metalloc and Ironic
// agree (agree).
func TestIronicFrontAllocations(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ir := startIronic(t, devstack.IronicOptions{})
	stack, pool := ironicStack(t, ir, 2)
	api := stack.APIURL

	// The openstack CLI pointed at metalloc: allocation create --wait,
	// instance_info, deploy --wait; Ironic has the allocation active on the
	// same node and the node active. A deployed node's allocation cannot
	// be deleted (Ironic says why, through metalloc); undeploy removes it
	// in both. An allocation deleted through metalloc is gone from both.
	t.Run("cli", func(t *testing.T) {
		enrollClass(t, ir, "cli", 2)
		waitFree(t, pool, "cli", 2)
		cli := okCLI(t, api)
		var a allocDoc
		require.NoError(t, json.Unmarshal([]byte(cli("baremetal", "allocation", "create", "--resource-class", "cli",
			"--wait", "120", "-f", "json")), &a))
		require.Equal(t, "active", a.State)
		node := *a.NodeUUID
		var ia ironic.Allocation
		_, err := ir.Do(ctx, http.MethodGet, "/v1/allocations/"+a.UUID, nil, &ia)
		require.NoError(t, err)
		require.Equal(t, ironic.AllocationActive, ia.State)
		require.Equal(t, node, ia.Node())

		cli("baremetal", "node", "set", node, "--instance-info", "image_source=http://images.example/cli.qcow2")
		cli("baremetal", "node", "deploy", node, "--wait", "180")
		var in struct {
			ProvisionState string `json:"provision_state"`
			InstanceUUID   string `json:"instance_uuid"`
		}
		_, err = ir.Do(ctx, http.MethodGet, "/v1/nodes/"+node, nil, &in)
		require.NoError(t, err)
		require.Equal(t, "active", in.ProvisionState)
		require.Equal(t, a.UUID, in.InstanceUUID)

		out, err := noauthCLI(api, "baremetal", "allocation", "delete", a.UUID)
		require.Error(t, err, "Ironic refuses to delete the allocation of an active node")
		require.Contains(t, out, "node is active")
		require.Equal(t, 1, dbtest.Count(t, pool, `SELECT count(*) FROM allocations WHERE uuid = $1`, a.UUID))

		cli("baremetal", "node", "undeploy", node, "--wait", "180")
		dbtest.WaitFor(t, time.Minute, "the allocation gone from metalloc after the undeploy", func() bool {
			return dbtest.Count(t, pool, `SELECT count(*) FROM allocations WHERE uuid = $1`, a.UUID) == 0
		})
		status, _ := ir.Do(ctx, http.MethodGet, "/v1/allocations/"+a.UUID, nil, nil)
		require.Equal(t, http.StatusNotFound, status)

		var b allocDoc
		require.NoError(t, json.Unmarshal([]byte(cli("baremetal", "allocation", "create", "--resource-class", "cli",
			"--wait", "120", "-f", "json")), &b))
		require.Equal(t, "active", b.State)
		cli("baremetal", "allocation", "delete", b.UUID)
		status, _ = ir.Do(ctx, http.MethodGet, "/v1/allocations/"+b.UUID, nil, nil)
		require.Equal(t, http.StatusNotFound, status)
		require.Zero(t, dbtest.Count(t, pool, `SELECT count(*) FROM allocations WHERE uuid = $1`, b.UUID))
		waitFree(t, pool, "cli", 2)
		agree(t, ir, pool, "cli")
	})

	// Nodes put into maintenance, deleted or given an instance directly in
	// Ironic are not allocated after the next sync; an allocation racing
	// such a change ends on another node or in error with the reason.
	t.Run("drift", func(t *testing.T) {
		nodes := enrollClass(t, ir, "drift", 6)
		waitFree(t, pool, "drift", 6)
		_, err := ir.Do(ctx, http.MethodPut, "/v1/nodes/"+nodes[0]+"/maintenance", map[string]any{"reason": "direct"}, nil)
		require.NoError(t, err)
		require.NoError(t, ir.SetProvisionState(ctx, nodes[1], "manage", "manageable", time.Minute))
		_, err = ir.Do(ctx, http.MethodDelete, "/v1/nodes/"+nodes[1], nil, nil)
		require.NoError(t, err)
		_, err = ir.Do(ctx, http.MethodPatch, "/v1/nodes/"+nodes[2],
			[]map[string]any{{"op": "add", "path": "/instance_uuid", "value": uuid.NewString()}}, nil)
		require.NoError(t, err)
		waitSync(t, pool)
		waitFree(t, pool, "drift", 3)
		require.Zero(t, dbtest.Count(t, pool, `SELECT count(*) FROM nodes WHERE uuid = $1`, nodes[1]))
		for _, n := range []string{nodes[0], nodes[2]} {
			a, err := allocate(t, api, map[string]any{"resource_class": "drift", "candidate_nodes": []string{n}})
			require.NoError(t, err)
			require.Equal(t, "error", a.State)
			require.Contains(t, *a.LastError, "none of the requested nodes are available and match the resource class drift")
		}
		st, _ := apiCall(t, http.MethodPost, api+"/v1/allocations",
			map[string]any{"resource_class": "drift", "candidate_nodes": []string{nodes[1]}})
		require.Equal(t, http.StatusBadRequest, st, "a node deleted in Ironic is no candidate")

		// Racing a change in Ironic: maintenance set directly there, and
		// at once an allocation asking for that node by name first (it
		// ends on another node) and one for that node only (error).
		_, err = ir.Do(ctx, http.MethodPut, "/v1/nodes/"+nodes[3]+"/maintenance", map[string]any{"reason": "racing"}, nil)
		require.NoError(t, err)
		named, err := allocate(t, api, map[string]any{"resource_class": "drift", "name": "drift-4"})
		require.NoError(t, err)
		require.Equal(t, "active", named.State)
		require.NotEqual(t, nodes[3], *named.NodeUUID)
		only, err := allocate(t, api, map[string]any{"resource_class": "drift", "candidate_nodes": []string{nodes[3]}})
		require.NoError(t, err)
		require.Equal(t, "error", only.State)
		require.Contains(t, *only.LastError, "none of the requested nodes are available")
		for _, a := range []allocDoc{named, only} {
			st, raw := apiCall(t, http.MethodDelete, api+"/v1/allocations/"+a.UUID, nil)
			require.Equal(t, http.StatusNoContent, st, "%s", raw)
		}
		waitSync(t, pool)
		agree(t, ir, pool, "drift")
	})

	// Allocations through metalloc racing allocations made directly in
	// Ironic on the same nodes, more asked than there are nodes: no node
	// held twice, every allocation accounted for in both systems.
	t.Run("race", func(t *testing.T) {
		nodes := enrollClass(t, ir, "race", 12)
		waitFree(t, pool, "race", len(nodes))
		var wg sync.WaitGroup
		var mu sync.Mutex
		var direct []string
		var errs []error
		for c := 0; c < 6; c++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range 3 {
					base := api
					if c%2 == 1 {
						base = ir.URL
					}
					a, err := allocateQuietly(base, map[string]any{"resource_class": "race"})
					mu.Lock()
					if err != nil {
						errs = append(errs, err)
					} else if base == ir.URL {
						direct = append(direct, a.UUID)
					}
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
		require.Empty(t, errs)
		waitSync(t, pool)
		agree(t, ir, pool, "race")
		require.GreaterOrEqual(t, len(nodes), dbtest.Count(t, pool, `SELECT count(*) FROM allocations WHERE resource_class = 'race' AND state = 'active'`)+
			activeIn(t, ir, direct), "no node taken twice")

		// Both systems let go of everything.
		rows, err := pool.Query(ctx, `SELECT uuid::text FROM allocations WHERE resource_class = 'race'`)
		require.NoError(t, err)
		var ours []string
		for rows.Next() {
			var u string
			require.NoError(t, rows.Scan(&u))
			ours = append(ours, u)
		}
		require.NoError(t, rows.Err())
		for _, u := range ours {
			st, raw := apiCall(t, http.MethodDelete, api+"/v1/allocations/"+u, nil)
			require.Equal(t, http.StatusNoContent, st, "%s", raw)
		}
		for _, u := range direct {
			_, _ = ir.Do(ctx, http.MethodDelete, "/v1/allocations/"+u, nil, nil)
		}
		waitSync(t, pool)
		waitFree(t, pool, "race", len(nodes))
		agree(t, ir, pool, "race")
	})

	// Issue 40: other clients allocate directly in Ironic, behind
	// metalloc's back (no full sync: the mirror learns of their nodes
	// only when Ironic refuses them). Of 40 nodes, 34 are taken directly
	// before, one more while metalloc allocates 4 at once: most of
	// metalloc's picks are refused, many more than 3 times for one
	// allocation (the old ironic.max_attempts), yet every allocation that
	// has a free node ends active; each refused node is read again from
	// Ironic. The allocation after the last free node is gone ends in
	// error saying why no node fits, each node counted; no node is held
	// twice.
	t.Run("contention", func(t *testing.T) {
		const n, taken = 40, 34
		tmpl := enrollClass(t, ir, "contend", 1)
		clones, err := ir.CloneNodes(ctx, tmpl[0], n-1, "contend-c")
		require.NoError(t, err)
		nodes := append(tmpl, clones...)
		cstack, cpool := ironicStack(t, ir, 2, "METALLOC_IRONIC_SYNC_SCHEDULE=off")
		contendAPI := cstack.APIURL
		waitFree(t, cpool, "contend", n)
		direct := takeDirectly(t, ir, "contend", nodes[:taken])

		var wg sync.WaitGroup
		var mu sync.Mutex
		var ours []allocDoc
		var errs []error
		for c := 0; c < 5; c++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				base := contendAPI
				if c == 4 {
					base = ir.URL // one more client straight to Ironic
				}
				a, err := allocateQuietly(base, map[string]any{"resource_class": "contend"})
				mu.Lock()
				defer mu.Unlock()
				switch {
				case err != nil:
					errs = append(errs, err)
				case base == ir.URL:
					direct = append(direct, a.UUID)
				default:
					ours = append(ours, a)
				}
			}()
		}
		wg.Wait()
		require.Empty(t, errs)
		require.Len(t, direct, taken+1)
		for _, a := range ours {
			require.Equal(t, "active", a.State, "allocation %s: %s", a.UUID, deref(a.LastError))
		}
		// One node is left free: one more allocation takes it, the next
		// finds none.
		last, err := allocate(t, contendAPI, map[string]any{"resource_class": "contend"})
		require.NoError(t, err)
		require.Equal(t, "active", last.State, deref(last.LastError))
		none, err := allocate(t, contendAPI, map[string]any{"resource_class": "contend"})
		require.NoError(t, err)
		require.Equal(t, "error", none.State)
		require.Regexp(t, fmt.Sprintf(`no available nodes match the resource class contend\.? \(no node fits: `+
			`%d of resource class contend, 0 available; not available: %d hold an allocation or instance\)`, n, n), *none.LastError)

		// Every direct node was refused, and read again (Ironic's instance
		// in the mirror, no mark): 35 refusals or more over 6
		// allocations, so some allocation was refused more than 3 times.
		require.Equal(t, taken+1, dbtest.Count(t, cpool, `SELECT count(*) FROM nodes
			WHERE resource_class = 'contend' AND instance_uuid IS NOT NULL AND allocation_id IS NULL AND NOT maintenance`))
		refusedMost := 0
		rows, err := cpool.Query(ctx, `SELECT attempts - 1 FROM ironic_allocations WHERE state = 'active'`)
		require.NoError(t, err)
		for rows.Next() {
			var k int
			require.NoError(t, rows.Scan(&k))
			refusedMost = max(refusedMost, k)
		}
		require.NoError(t, rows.Err())
		lastRefused := 0 // none when the others had tried every direct node
		if at := strings.Index(*none.LastError, "Ironic refused the "); at >= 0 {
			_, err = fmt.Sscanf((*none.LastError)[at:], "Ironic refused the %d nodes", &lastRefused)
			require.NoError(t, err, *none.LastError)
		}
		t.Logf("most refusals of an allocation that ended active: %d; of the last one: %d", refusedMost, lastRefused)
		require.Greater(t, max(refusedMost, lastRefused), 3)
		agree(t, ir, cpool, "contend")
		require.Equal(t, n, dbtest.Count(t, cpool, `SELECT count(*) FROM allocations WHERE resource_class = 'contend' AND state = 'active'`)+
			activeIn(t, ir, direct), "every node held once")
	})

	// A conductor SIGKILLed between its two writes (its allocation made in
	// Ironic, not yet active in metalloc): the conductor that takes it
	// over settles it on the same node.
	t.Run("kill", func(t *testing.T) {
		enrollClass(t, ir, "kill", 2)
		victim, vpool := ironicStack(t, ir, 1, "METALLOC_LOG_LEVEL=info", "METALLOC_TEST_IRONIC_PAUSE=after_create:10m")
		waitFree(t, vpool, "kill", 2)
		st, raw := apiCall(t, http.MethodPost, victim.APIURL+"/v1/allocations", map[string]any{"resource_class": "kill"})
		require.Equal(t, http.StatusCreated, st, "%s", raw)
		var a allocDoc
		require.NoError(t, json.Unmarshal(raw, &a))
		p := victim.Conductors[0]
		dbtest.WaitFor(t, 2*time.Minute, "the conductor to pause between its two writes", func() bool {
			return logLines(t, []*devstack.Process{p}, "test pause") > 0
		})
		require.NoError(t, p.Signal(syscall.SIGKILL))
		require.Error(t, p.Wait(30*time.Second))
		var held string
		require.NoError(t, vpool.QueryRow(ctx, `SELECT n.uuid::text FROM allocations a JOIN nodes n ON n.id = a.node_id
			WHERE a.uuid = $1 AND a.state = 'allocating'`, a.UUID).Scan(&held))
		// Ironic has it (it settles it in the background): one system has
		// the allocation active, the other allocating, on the same node.
		var ia ironic.Allocation
		dbtest.WaitFor(t, time.Minute, "Ironic to settle its copy", func() bool {
			_, err := ir.Do(ctx, http.MethodGet, "/v1/allocations/"+a.UUID, nil, &ia)
			require.NoError(t, err)
			return ia.State != ironic.AllocationAllocating
		})
		require.Equal(t, ironic.AllocationActive, ia.State)
		require.Equal(t, held, ia.Node())

		_, err := victim.StartConductor("rescuer", "METALLOC_TEST_IRONIC_PAUSE=")
		require.NoError(t, err)
		dbtest.WaitFor(t, 2*time.Minute, "the takeover to settle the allocation", func() bool {
			return dbtest.Count(t, vpool, `SELECT count(*) FROM allocations WHERE uuid = $1 AND state = 'active'`, a.UUID) == 1
		})
		require.Equal(t, held, func() string {
			var n string
			require.NoError(t, vpool.QueryRow(ctx, `SELECT n.uuid::text FROM allocations a JOIN nodes n ON n.id = a.node_id
				WHERE a.uuid = $1`, a.UUID).Scan(&n))
			return n
		}())
		agree(t, ir, vpool, "kill")
		st, raw = apiCall(t, http.MethodDelete, victim.APIURL+"/v1/allocations/"+a.UUID, nil)
		require.Equal(t, http.StatusNoContent, st, "%s", raw)
	})

	// metalloc's extensions in this mode: an allocation group placed by
	// topology (every member made in Ironic on one rack before the group
	// is active), Prefer: wait, the event stream, the fleet summary.
	t.Run("extensions", func(t *testing.T) {
		var specs []devstack.IronicNode
		for k := 1; k <= 4; k++ {
			specs = append(specs, devstack.IronicNode{Name: fmt.Sprintf("ext-%d", k), ResourceClass: "ext",
				Extra: map[string]any{"row": "r1", "rack": fmt.Sprintf("k%d", (k+1)/2)}})
		}
		nodes, err := ir.EnrollAvailable(ctx, specs, 4)
		require.NoError(t, err)
		waitFree(t, pool, "ext", 4)
		rack := map[string]string{nodes[0]: "k1", nodes[1]: "k1", nodes[2]: "k2", nodes[3]: "k2"}
		st, raw := apiCall(t, http.MethodPut, api+"/v1/topology",
			map[string]any{"levels": []map[string]string{{"name": "row", "source": "extra.row"}, {"name": "rack", "source": "extra.rack"}}})
		require.Equal(t, http.StatusOK, st, "%s", raw)

		stream := webtest.OpenSSE(t, api+"/v1/allocations/events", map[string]string{"X-OpenStack-Ironic-API-Version": "1.82"})
		defer stream.Close()
		require.Equal(t, http.StatusOK, stream.Resp.StatusCode)

		st, raw = apiCall(t, http.MethodPost, api+"/v1/allocation_groups",
			map[string]any{"count": 2, "resource_class": "ext", "required": "rack"}, "Prefer", "wait=60")
		require.Equal(t, http.StatusCreated, st, "%s", raw)
		var g struct {
			UUID      string   `json:"uuid"`
			State     string   `json:"state"`
			LastError *string  `json:"last_error"`
			Members   []string `json:"members"`
		}
		require.NoError(t, json.Unmarshal(raw, &g))
		require.Equal(t, "active", g.State, "%v", g.LastError)
		require.Len(t, g.Members, 2)
		racks := map[string]bool{}
		for _, m := range g.Members {
			var ia ironic.Allocation
			_, err := ir.Do(ctx, http.MethodGet, "/v1/allocations/"+m, nil, &ia)
			require.NoError(t, err)
			require.Equal(t, ironic.AllocationActive, ia.State)
			racks[rack[ia.Node()]] = true
		}
		require.Len(t, racks, 1, "the members in one rack, in Ironic")

		st, raw = apiCall(t, http.MethodPost, api+"/v1/allocations", map[string]any{"resource_class": "ext"}, "Prefer", "wait=60")
		require.Equal(t, http.StatusCreated, st, "%s", raw)
		var a allocDoc
		require.NoError(t, json.Unmarshal(raw, &a))
		require.Equal(t, "active", a.State, "Prefer: wait answers once Ironic has it active")
		var seen []string
		for !slices.Contains(seen, a.UUID+" active") {
			for _, ev := range stream.Next(t, 1) {
				seen = append(seen, fmt.Sprint(ev.Data["uuid"], " ", ev.Data["state"]))
			}
		}

		st, raw = apiCall(t, http.MethodGet, api+"/v1/ui/fleet", nil)
		require.Equal(t, http.StatusOK, st, "%s", raw)
		require.Contains(t, string(raw), `"ext"`)

		st, raw = apiCall(t, http.MethodDelete, api+"/v1/allocation_groups/"+g.UUID, nil)
		require.Equal(t, http.StatusNoContent, st, "%s", raw)
		st, raw = apiCall(t, http.MethodDelete, api+"/v1/allocations/"+a.UUID, nil)
		require.Equal(t, http.StatusNoContent, st, "%s", raw)
		waitFree(t, pool, "ext", 4)
		agree(t, ir, pool, "ext")
	})

	// Ironic stopped mid-run and started again: proxied requests answer
	// 503 meanwhile, allocations wait (none fails), nothing answers 500,
	// and once Ironic is back every allocation is active in both.
	t.Run("outage", func(t *testing.T) {
		enrollClass(t, ir, "outage", 8)
		waitFree(t, pool, "outage", 8)
		post := func() string {
			st, raw := apiCall(t, http.MethodPost, api+"/v1/allocations", map[string]any{"resource_class": "outage"})
			require.Equal(t, http.StatusCreated, st, "%s", raw)
			var a allocDoc
			require.NoError(t, json.Unmarshal(raw, &a))
			return a.UUID
		}
		var uuids []string
		for range 3 {
			uuids = append(uuids, post())
		}
		ir.StopAPI()
		st, raw := apiCall(t, http.MethodGet, api+"/v1/nodes", nil)
		require.Equal(t, http.StatusServiceUnavailable, st)
		require.Contains(t, string(raw), "error_message")
		for range 5 {
			uuids = append(uuids, post())
		}
		dbtest.WaitFor(t, time.Minute, "the conductors to find Ironic unavailable", func() bool {
			for _, c := range stack.Conductors {
				if metricValue(scrape(t, c.MetricsURL), "metalloc_ironic_unavailable") == "1" {
					return true
				}
			}
			return false
		})
		require.Zero(t, dbtest.Count(t, pool, `SELECT count(*) FROM allocations WHERE resource_class = 'outage' AND state = 'error'`),
			"allocations failed while Ironic was away")
		require.NoError(t, ir.StartAPI(ctx))
		dbtest.WaitFor(t, 3*time.Minute, "every allocation active once Ironic is back", func() bool {
			return dbtest.Count(t, pool, `SELECT count(*) FROM allocations WHERE resource_class = 'outage' AND state = 'active'`) == len(uuids)
		})
		agree(t, ir, pool, "outage")
		for _, p := range append([]*devstack.Process{stack.API}, stack.Conductors...) {
			raw, err := os.ReadFile(p.LogPath)
			require.NoError(t, err)
			require.NotContains(t, string(raw), `"status":500`, "%s answered 500", p.Name)
		}
	})
}

// deref is *s, or "" for nil.
func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// takeDirectly allocates each of nodes directly in Ironic (as its other
// clients would: metalloc does not know), 8 at a time, and waits until
// each is active; their uuids.
func takeDirectly(t *testing.T, ir *devstack.Ironic, rc string, nodes []string) []string {
	t.Helper()
	ctx := context.Background()
	out := make([]string, len(nodes))
	errs := make([]error, len(nodes))
	sem := make(chan struct{}, 8)
	var wg sync.WaitGroup
	for k, node := range nodes {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			var a ironic.Allocation
			if _, err := ir.Do(ctx, http.MethodPost, "/v1/allocations",
				map[string]any{"resource_class": rc, "candidate_nodes": []string{node}}, &a); err != nil {
				errs[k] = err
				return
			}
			for deadline := time.Now().Add(time.Minute); a.State != ironic.AllocationActive; time.Sleep(50 * time.Millisecond) {
				if _, err := ir.Do(ctx, http.MethodGet, "/v1/allocations/"+a.UUID, nil, &a); err != nil || a.State == ironic.AllocationError ||
					time.Now().After(deadline) {
					errs[k] = fmt.Errorf("direct allocation on %s: %v %s %s", node, err, a.State, a.Reason())
					return
				}
			}
			out[k] = a.UUID
		}()
	}
	wg.Wait()
	require.NoError(t, errors.Join(errs...))
	return out
}

// activeIn counts the allocations uuids that Ironic has active.
func activeIn(t *testing.T, ir *devstack.Ironic, uuids []string) int {
	t.Helper()
	n := 0
	for _, u := range uuids {
		var a ironic.Allocation
		if _, err := ir.Do(context.Background(), http.MethodGet, "/v1/allocations/"+u, nil, &a); err == nil && a.State == ironic.AllocationActive {
			n++
		}
	}
	return n
}

// allocateQuietly is allocate for goroutines other than the test's: it
// fails nothing itself, it returns what went wrong (a 500 included).
func allocateQuietly(base string, body map[string]any) (allocDoc, error) {
	hc := &http.Client{Timeout: time.Minute}
	do := func(method, url string, body any, out any) (int, error) {
		var rd io.Reader
		if body != nil {
			raw, err := json.Marshal(body)
			if err != nil {
				return 0, err
			}
			rd = bytes.NewReader(raw)
		}
		req, err := http.NewRequest(method, url, rd)
		if err != nil {
			return 0, err
		}
		req.Header.Set("X-OpenStack-Ironic-API-Version", "1.82")
		req.Header.Set("Content-Type", "application/json")
		resp, err := hc.Do(req)
		if err != nil {
			return 0, err
		}
		defer resp.Body.Close()
		raw, err := io.ReadAll(resp.Body)
		if err != nil {
			return resp.StatusCode, err
		}
		if resp.StatusCode >= 300 {
			return resp.StatusCode, fmt.Errorf("%s %s: %d %s", method, url, resp.StatusCode, raw)
		}
		return resp.StatusCode, json.Unmarshal(raw, out)
	}
	var a allocDoc
	if _, err := do(http.MethodPost, base+"/v1/allocations", body, &a); err != nil {
		return a, err
	}
	for deadline := time.Now().Add(2 * time.Minute); a.State == "allocating"; {
		if time.Now().After(deadline) {
			return a, fmt.Errorf("allocation %s still allocating after 2 minutes", a.UUID)
		}
		time.Sleep(50 * time.Millisecond)
		if _, err := do(http.MethodGet, base+"/v1/allocations/"+a.UUID, nil, &a); err != nil {
			return a, err
		}
	}
	return a, nil
}
