package e2e

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/metalloc/metalloc/db/dbtest"
	"github.com/metalloc/metalloc/devstack"
	"github.com/metalloc/metalloc/ironic"
)

// leaseDoc is a lease as GET /v1/leases/{ident} shows it.
type leaseDoc struct {
	UUID         string  `json:"uuid"`
	State        string  `json:"state"`
	StatusReason *string `json:"status_reason"`
	Reservations []struct {
		Nodes []string `json:"nodes"`
	} `json:"reservations"`
}

// nodes are the lease's nodes, all reservations together.
func (l leaseDoc) nodes() []string {
	var out []string
	for _, r := range l.Reservations {
		out = append(out, r.Nodes...)
	}
	return out
}

// getLease reads lease ident through metalloc-api.
func getLease(t *testing.T, api, ident string) leaseDoc {
	t.Helper()
	st, raw := apiCall(t, http.MethodGet, api+"/v1/leases/"+ident, nil)
	require.Equal(t, http.StatusOK, st, "%s", raw)
	var l leaseDoc
	require.NoError(t, json.Unmarshal(raw, &l))
	return l
}

// waitLeaseState waits until lease ident is in state.
func waitLeaseState(t *testing.T, api, ident, state string) leaseDoc {
	t.Helper()
	var l leaseDoc
	dbtest.WaitFor(t, 3*time.Minute, "lease "+ident+" "+state, func() bool {
		l = getLease(t, api, ident)
		return l.State == state
	})
	return l
}

// startLabLease creates lease name for project lab, count nodes of
// class leased from now for ten minutes, on_start onStart, and waits
// until it is active.
func startLabLease(t *testing.T, api, name, onStart string, count int) leaseDoc {
	t.Helper()
	end := time.Now().UTC().Add(10 * time.Minute).Truncate(time.Second).Format(time.RFC3339)
	st, raw := apiCall(t, http.MethodPost, api+"/v1/leases", map[string]any{
		"name": name, "project_id": "lab", "end_time": end, "on_start": onStart,
		"reservations": []map[string]any{{"resource_class": "leased", "count": count}}})
	require.Equal(t, http.StatusCreated, st, "%s", raw)
	l := waitLeaseState(t, api, name, "active")
	require.Len(t, l.nodes(), count)
	return l
}

// endLeaseSoon moves lease ident's end_time to a few seconds from now.
func endLeaseSoon(t *testing.T, api, ident string) {
	t.Helper()
	end := time.Now().UTC().Add(3 * time.Second).Truncate(time.Second).Format(time.RFC3339)
	st, raw := apiCall(t, http.MethodPatch, api+"/v1/leases/"+ident,
		[]map[string]any{{"op": "replace", "path": "/end_time", "value": end}})
	require.Equal(t, http.StatusOK, st, "%s", raw)
}

// ironicNode is what these tests read of a node in Ironic itself.
type ironicNode struct {
	ProvisionState string  `json:"provision_state"`
	InstanceUUID   *string `json:"instance_uuid"`
	AllocationUUID *string `json:"allocation_uuid"`
	Lessee         *string `json:"lessee"`
	Protected      bool    `json:"protected"`
}

func readIronicNode(t *testing.T, ir *devstack.Ironic, node string) ironicNode {
	t.Helper()
	var n ironicNode
	st, err := ir.Do(context.Background(), http.MethodGet, "/v1/nodes/"+node, nil, &n)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, st)
	return n
}

// deployThroughMetalloc deploys node with the openstack CLI pointed at
// metalloc (proxied to Ironic) and checks it is active in Ironic.
func deployThroughMetalloc(t *testing.T, cli func(...string) string, ir *devstack.Ironic, node string) {
	t.Helper()
	cli("baremetal", "node", "set", node, "--instance-info", "image_source=http://images.example/lease.qcow2")
	cli("baremetal", "node", "deploy", node, "--wait", "180")
	require.Equal(t, "active", readIronicNode(t, ir, node).ProvisionState)
}

// Leases in front of the real Ironic (two metalloc conductors, Ironic's
// two conductors, fake-hardware), driven through metalloc's API and the
// openstack CLI pointed at metalloc:
//
//   - on_start allocate: the lease starts; its allocations are made in
//     Ironic as any other (active in both systems on the lease's nodes,
//     owned by the project; the nodes lent to it in Ironic); the project
//     deploys one node through metalloc (`openstack baremetal node deploy
//     --wait`); the lease ends: the deployed node is undeployed through
//     Ironic and available again, every allocation gone from both systems,
//     the lessee cleared in both, the nodes free and back in the
//     reservable pool (a new lease takes them).
//   - on_start lessee: the nodes are lent to the project in Ironic; the
//     project's own allocation lands on its node (an admin's does not);
//     the project deploys it and Ironic protects it: Ironic refuses the
//     undeploy at the end, and the lease goes to error with Ironic's
//     reason, the node left as it is for an operator.
//   - kill: the conductor ending a lease is SIGKILLed after it asked
//     Ironic to undeploy; the other takes the lease over and ends it.
func TestIronicFrontLease(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ir := startIronic(t, devstack.IronicOptions{})
	stack, pool := ironicStack(t, ir, 2, "METALLOC_LOG_LEVEL=info")
	api := stack.APIURL
	cli := okCLI(t, api)
	all := enrollClass(t, ir, "leased", 3)
	waitFree(t, pool, "leased", 3)
	_, err := pool.Exec(ctx, `UPDATE nodes SET reservable = true WHERE resource_class = 'leased'`)
	require.NoError(t, err)

	t.Run("allocate", func(t *testing.T) {
		l := startLabLease(t, api, "ironic-allocate", "allocate", 2)
		nodes := l.nodes()

		// The lease's allocations, made in Ironic as any other.
		var allocs []string
		dbtest.WaitFor(t, 2*time.Minute, "the lease's allocations active", func() bool {
			return dbtest.Count(t, pool, `SELECT count(*) FROM allocations a JOIN nodes n ON n.id = a.node_id
				WHERE a.state = 'active' AND a.owner = 'lab' AND a.extra->>'lease_uuid' = $1`, l.UUID) == 2
		})
		rows, err := pool.Query(ctx, `SELECT a.uuid::text, n.uuid::text FROM allocations a JOIN nodes n ON n.id = a.node_id
			WHERE a.extra->>'lease_uuid' = $1`, l.UUID)
		require.NoError(t, err)
		for rows.Next() {
			var a, n string
			require.NoError(t, rows.Scan(&a, &n))
			require.Contains(t, nodes, n)
			var ia ironic.Allocation
			_, err := ir.Do(ctx, http.MethodGet, "/v1/allocations/"+a, nil, &ia)
			require.NoError(t, err)
			require.Equal(t, ironic.AllocationActive, ia.State)
			require.Equal(t, n, ia.Node())
			allocs = append(allocs, a)
		}
		require.NoError(t, rows.Err())
		for _, n := range nodes {
			require.Equal(t, "lab", deref(readIronicNode(t, ir, n).Lessee), "node %s lent to the project in Ironic", n)
		}

		// The project deploys one node through metalloc.
		deployThroughMetalloc(t, cli, ir, nodes[0])

		endLeaseSoon(t, api, "ironic-allocate")
		l = waitLeaseState(t, api, "ironic-allocate", "ended")
		require.Nil(t, l.StatusReason)
		for _, a := range allocs {
			dbtest.WaitFor(t, time.Minute, "allocation "+a+" gone from Ironic", func() bool {
				st, _ := ir.Do(ctx, http.MethodGet, "/v1/allocations/"+a, nil, nil)
				return st == http.StatusNotFound
			})
		}
		for _, n := range nodes {
			in := readIronicNode(t, ir, n)
			require.Equal(t, "available", in.ProvisionState, "node %s undeployed", n)
			require.Nil(t, in.InstanceUUID, "node %s", n)
			require.Nil(t, in.AllocationUUID, "node %s", n)
			require.Nil(t, in.Lessee, "node %s", n)
		}
		require.Zero(t, dbtest.Count(t, pool, `SELECT count(*) FROM allocations WHERE owner = 'lab'`))
		require.Zero(t, dbtest.Count(t, pool, `SELECT count(*) FROM nodes WHERE resource_class = 'leased'
			AND (lessee IS NOT NULL OR NOT reservable)`))
		require.Equal(t, 1, dbtest.Count(t, pool, `SELECT count(*) FROM allocation_events
			WHERE kind = 'lease.end' AND allocation_uuid = $1::uuid AND state = 'ended'`, l.UUID))
		waitFree(t, pool, "leased", 3)
		agree(t, ir, pool, "leased")

		// Back in the pool: a new lease may take all three.
		st, raw := apiCall(t, http.MethodPost, api+"/v1/leases", map[string]any{
			"project_id": "other", "start_time": time.Now().UTC().Add(time.Hour).Truncate(time.Second).Format(time.RFC3339),
			"end_time":     time.Now().UTC().Add(2 * time.Hour).Truncate(time.Second).Format(time.RFC3339),
			"reservations": []map[string]any{{"resource_class": "leased", "count": 3}}})
		require.Equal(t, http.StatusCreated, st, "%s", raw)
		var later leaseDoc
		require.NoError(t, json.Unmarshal(raw, &later))
		st, raw = apiCall(t, http.MethodDelete, api+"/v1/leases/"+later.UUID, nil)
		require.Equal(t, http.StatusNoContent, st, "%s", raw)
	})

	t.Run("lessee refused", func(t *testing.T) {
		l := startLabLease(t, api, "ironic-lessee", "lessee", 1)
		node := l.nodes()[0]
		require.Equal(t, "lab", deref(readIronicNode(t, ir, node).Lessee))
		dbtest.WaitFor(t, time.Minute, "the lessee in the mirror", func() bool {
			return dbtest.Count(t, pool, `SELECT count(*) FROM nodes WHERE uuid = $1 AND lessee = 'lab'`, node) == 1
		})

		// An admin's allocation takes no reservable node; the project's
		// lands on its leased node.
		admin, err := allocate(t, api, map[string]any{"resource_class": "leased"})
		require.NoError(t, err)
		require.Equal(t, "error", admin.State)
		mine, err := allocate(t, api, map[string]any{"resource_class": "leased", "owner": "lab"})
		require.NoError(t, err)
		require.Equal(t, "active", mine.State, "%s", deref(mine.LastError))
		require.Equal(t, node, *mine.NodeUUID)
		deployThroughMetalloc(t, cli, ir, node)

		// Ironic protects the node: it refuses the undeploy at the end.
		_, err = ir.Do(ctx, http.MethodPatch, "/v1/nodes/"+node,
			[]map[string]any{{"op": "replace", "path": "/protected", "value": true}}, nil)
		require.NoError(t, err)
		endLeaseSoon(t, api, "ironic-lessee")
		l = waitLeaseState(t, api, "ironic-lessee", "error")
		require.NotNil(t, l.StatusReason)
		require.Contains(t, *l.StatusReason, "could not be undeployed through Ironic")
		require.Contains(t, *l.StatusReason, "protected")
		in := readIronicNode(t, ir, node)
		require.Equal(t, "active", in.ProvisionState, "left as it is for an operator")
		require.True(t, in.Protected)
		require.Equal(t, 1, dbtest.Count(t, pool, `SELECT count(*) FROM allocation_events
			WHERE kind = 'lease.end' AND allocation_uuid = $1::uuid AND state = 'error'`, l.UUID))

		// The operator's way out: unprotect, undeploy, delete the admin's
		// failed allocation; the node is free in both again.
		_, err = ir.Do(ctx, http.MethodPatch, "/v1/nodes/"+node,
			[]map[string]any{{"op": "replace", "path": "/protected", "value": false}}, nil)
		require.NoError(t, err)
		cli("baremetal", "node", "undeploy", node, "--wait", "180")
		st, raw := apiCall(t, http.MethodDelete, api+"/v1/allocations/"+admin.UUID, nil)
		require.Equal(t, http.StatusNoContent, st, "%s", raw)
		dbtest.WaitFor(t, time.Minute, "the project's allocation gone after the undeploy", func() bool {
			return dbtest.Count(t, pool, `SELECT count(*) FROM allocations WHERE uuid = $1`, mine.UUID) == 0
		})
		require.True(t, slices.Contains(all, node))
	})

	// The conductor ending a lease is SIGKILLed once it has asked Ironic
	// to undeploy the lease's node: the other conductor takes the lease
	// over and ends it (the node undeployed once, free in both systems).
	t.Run("kill", func(t *testing.T) {
		l := startLabLease(t, api, "ironic-kill", "allocate", 1)
		node := l.nodes()[0]
		dbtest.WaitFor(t, 2*time.Minute, "the lease's allocation active", func() bool {
			return dbtest.Count(t, pool, `SELECT count(*) FROM allocations a JOIN nodes n ON n.id = a.node_id
				WHERE a.state = 'active' AND n.uuid = $1 AND a.extra->>'lease_uuid' = $2`, node, l.UUID) == 1
		})
		deployThroughMetalloc(t, cli, ir, node)

		// The earlier subtests' ends logged the same line: count from now.
		const undeploying = "lease ending: undeploying node through Ironic"
		before := make([]int, len(stack.Conductors))
		for i, p := range stack.Conductors {
			before[i] = logLines(t, []*devstack.Process{p}, undeploying)
		}
		endLeaseSoon(t, api, "ironic-kill")
		var victim *devstack.Process
		var others []*devstack.Process
		dbtest.WaitFor(t, 2*time.Minute, "a conductor undeploying the lease's node", func() bool {
			for i, p := range stack.Conductors {
				if logLines(t, []*devstack.Process{p}, undeploying) > before[i] {
					victim = p
					others = slices.Delete(slices.Clone(stack.Conductors), i, i+1)
					return true
				}
			}
			return false
		})
		require.NoError(t, victim.Signal(syscall.SIGKILL))
		require.Error(t, victim.Wait(30*time.Second))
		l = waitLeaseState(t, api, "ironic-kill", "ended")
		require.Positive(t, logLines(t, others, "lease taken over from a dead conductor"))
		dbtest.WaitFor(t, time.Minute, "the lease's allocation gone from both systems", func() bool {
			return dbtest.Count(t, pool, `SELECT count(*) FROM allocations WHERE extra->>'lease_uuid' = $1`, l.UUID) == 0
		})
		in := readIronicNode(t, ir, node)
		require.Equal(t, "available", in.ProvisionState)
		require.Nil(t, in.AllocationUUID)
		require.Nil(t, in.Lessee)
		require.Equal(t, 1, dbtest.Count(t, pool, `SELECT count(*) FROM allocation_events
			WHERE kind = 'lease.end' AND allocation_uuid = $1::uuid AND state = 'ended'`, l.UUID))
		agree(t, ir, pool, "leased")
	})
}

// pausedBefore reports whether a conductor of procs logged its test pause
// (METALLOC_TEST_IRONIC_PAUSE) for allocation before its POST to Ironic.
func pausedBefore(t *testing.T, procs []*devstack.Process, allocation string) bool {
	t.Helper()
	for _, p := range procs {
		raw, err := os.ReadFile(p.LogPath)
		require.NoError(t, err)
		for _, line := range strings.Split(string(raw), "\n") {
			if strings.Contains(line, "test pause") && strings.Contains(line, allocation) {
				return true
			}
		}
	}
	return false
}

// A node Ironic refuses at a lease's start is replaced within that start
// (docs/leases.md "Failed nodes"): the conductor pauses before each POST
// to Ironic, and one of the lease's nodes is put in maintenance directly
// in Ironic while the start's allocation of it waits there, after
// metalloc last read it; Ironic refuses the allocation. The lease stays
// active and not flagged, the refused node leaves it for the third node
// (lease.node_replaced, "refused by Ironic"), which is lent to the
// project in Ironic and gets the allocation, active in both systems; the
// refused allocation is gone and the refused node no longer lent. Its end
// then frees everything as usual.
func TestIronicFrontLeaseRefusedNodeReplaced(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ir := startIronic(t, devstack.IronicOptions{})
	stack, pool := ironicStack(t, ir, 1, "METALLOC_LOG_LEVEL=info", "METALLOC_TEST_IRONIC_PAUSE=before_create:15s")
	api := stack.APIURL
	all := enrollClass(t, ir, "leased", 3)
	waitFree(t, pool, "leased", 3)
	_, err := pool.Exec(ctx, `UPDATE nodes SET reservable = true WHERE resource_class = 'leased'`)
	require.NoError(t, err)

	l := startLabLease(t, api, "ironic-refused", "allocate", 2)
	booked := l.nodes()
	var victim string
	dbtest.WaitFor(t, 2*time.Minute, "an allocation of the lease paused before its POST to Ironic", func() bool {
		for _, r := range dbtest.Strings(t, pool, `SELECT uuid::text || ' ' || candidate_nodes[1]::text FROM allocations
			WHERE extra->>'lease_uuid' = $1 ORDER BY id`, l.UUID) {
			a, n, _ := strings.Cut(r, " ")
			if pausedBefore(t, stack.Conductors, a) {
				victim = n
				return true
			}
		}
		return false
	})
	require.Contains(t, booked, victim)
	_, err = ir.Do(ctx, http.MethodPut, "/v1/nodes/"+victim+"/maintenance", map[string]any{"reason": "refused at the start"}, nil)
	require.NoError(t, err)
	spare := slices.DeleteFunc(slices.Clone(all), func(u string) bool { return slices.Contains(booked, u) })
	require.Len(t, spare, 1)

	dbtest.WaitFor(t, 3*time.Minute, "the lease's two allocations active, one on the replacement", func() bool {
		return dbtest.Count(t, pool, `SELECT count(*) FROM allocations a JOIN nodes n ON n.id = a.node_id
			WHERE a.state = 'active' AND a.owner = 'lab' AND a.extra->>'lease_uuid' = $1 AND n.uuid <> $2`, l.UUID, victim) == 2
	})
	l = getLease(t, api, "ironic-refused")
	require.Equal(t, "active", l.State)
	require.ElementsMatch(t, append(slices.DeleteFunc(slices.Clone(booked), func(u string) bool { return u == victim }), spare[0]), l.nodes())
	require.NotContains(t, l.nodes(), victim)
	require.Equal(t, 1, dbtest.Count(t, pool, `SELECT count(*) FROM leases WHERE uuid = $1 AND degraded_reason IS NULL`, l.UUID))
	require.Zero(t, dbtest.Count(t, pool, `SELECT count(*) FROM allocations WHERE extra->>'lease_uuid' = $1 AND state <> 'active'`, l.UUID),
		"the refused allocation deleted")
	require.Equal(t, 1, dbtest.Count(t, pool, `SELECT count(*) FROM allocation_events
		WHERE kind = 'lease.node_replaced' AND allocation_uuid = $1::uuid AND last_error LIKE '%refused by Ironic%'`, l.UUID))
	require.Equal(t, "lab", deref(readIronicNode(t, ir, spare[0]).Lessee), "the replacement lent in Ironic")
	require.Nil(t, readIronicNode(t, ir, victim).Lessee, "the refused node no longer lent")
	require.Positive(t, logLines(t, stack.Conductors, "refused node's allocation moved to its replacement"))

	endLeaseSoon(t, api, "ironic-refused")
	l = waitLeaseState(t, api, "ironic-refused", "ended")
	require.Nil(t, l.StatusReason)
	dbtest.WaitFor(t, time.Minute, "the lease's allocations gone", func() bool {
		return dbtest.Count(t, pool, `SELECT count(*) FROM allocations WHERE owner = 'lab'`) == 0
	})
	for _, n := range l.nodes() {
		require.Nil(t, readIronicNode(t, ir, n).Lessee, "node %s", n)
	}
}
