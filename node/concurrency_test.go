package node_test

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/metalloc/metalloc/db/dbtest"
	"github.com/metalloc/metalloc/node"
)

// Concurrent changes of one node are serialised by its row lock: of many
// simultaneous deploy requests exactly one wins, the others see "active".
func TestConcurrentProvision(t *testing.T) {
	t.Parallel()
	e := setup(t)
	id := e.availableNode(map[string]any{})
	const n = 8
	statuses := make([]int, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			statuses[i] = e.do(http.MethodPut, "/v1/nodes/"+id+"/states/provision", "1.82", map[string]any{"target": "active"}).status
		})
	}
	wg.Wait()
	won := 0
	for _, s := range statuses {
		if s == http.StatusAccepted {
			won++
		} else {
			require.Equal(t, http.StatusBadRequest, s)
		}
	}
	require.Equal(t, 1, won)
	require.Equal(t, "active", e.state(id))
}

// A node being changed is invisible to a conductor's FOR UPDATE SKIP LOCKED
// candidate query until the change commits.
func TestChangeHoldsRowLock(t *testing.T) {
	t.Parallel()
	e := setup(t)
	ctx := t.Context()
	id := e.availableNode(map[string]any{})
	entered := make(chan struct{})
	release := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		_, err := e.store.Update(ctx, id, nil, nil, func(n *node.Node) error {
			close(entered)
			<-release
			n.Extra["k"] = "v"
			return nil
		})
		done <- err
	}()
	<-entered
	skip := func() int {
		var count int
		tx, err := e.pool.Begin(ctx)
		require.NoError(t, err)
		defer func() { _ = tx.Rollback(context.Background()) }()
		rows, err := tx.Query(ctx, `SELECT id FROM nodes WHERE uuid = $1 FOR UPDATE SKIP LOCKED`, id)
		require.NoError(t, err)
		for rows.Next() {
			count++
		}
		require.NoError(t, rows.Err())
		return count
	}
	require.Equal(t, 0, skip())
	close(release)
	require.NoError(t, <-done)
	require.Equal(t, 1, skip())
	require.Equal(t, "v", e.getNode(id)["extra"].(map[string]any)["k"])
}

func TestOtherHardwareTypes(t *testing.T) {
	t.Parallel()
	e := setup(t)
	// ipmi is in the registry: its interfaces are checked and defaulted.
	b := e.createNode(map[string]any{"driver": "ipmi", "boot_interface": "pxe", "raid_interface": "agent"})
	require.Equal(t, "ipmi", b["driver"])
	require.Equal(t, "pxe", b["boot_interface"])
	require.Equal(t, "agent", b["raid_interface"])
	require.Equal(t, "direct", b["deploy_interface"])
	require.Equal(t, "ipmitool", b["power_interface"])
	require.Equal(t, "flat", b["network_interface"])
	// Types the registry does not know are accepted when no conductor
	// check is configured; their interfaces are kept as given.
	b = e.createNode(map[string]any{"driver": "idrac", "power_interface": "idrac-redfish"})
	require.Equal(t, "idrac-redfish", b["power_interface"])
	require.Nil(t, b["deploy_interface"])

	// Interfaces a type does not offer, and unknown ones, are Ironic's 400s.
	var ne *node.Error
	n := node.Node{Driver: "ipmi", Interfaces: map[string]string{"power_interface": "fake"}}
	require.ErrorAs(t, node.FakeDriver{}.Validate(t.Context(), &n), &ne)
	require.Equal(t, "power interface implementation 'fake' is not supported by hardware type IPMIHardware.", ne.Message)
	n = node.Node{Driver: "fake-hardware", Interfaces: map[string]string{"raid_interface": "nope"}}
	require.ErrorAs(t, node.FakeDriver{}.Validate(t.Context(), &n), &ne)
	require.Equal(t, "Could not find the following interface in the 'ironic.hardware.interfaces.raid' entrypoint: nope. Valid interfaces are ['fake', 'no-raid', 'agent'].", ne.Message)
	// fake-hardware takes any enabled implementation, as in Ironic.
	n = node.Node{Driver: "fake-hardware", Interfaces: map[string]string{"power_interface": "ipmitool"}}
	require.NoError(t, node.FakeDriver{}.Validate(t.Context(), &n))

	// With a conductor check, a driver no live conductor of the group
	// serves is refused as Ironic does.
	drv := node.FakeDriver{Registered: func(_ context.Context, name, group string) (bool, error) {
		return name == node.FakeHardware && group == "", nil
	}}
	n = node.Node{Driver: "nope"}
	require.ErrorAs(t, drv.Validate(t.Context(), &n), &ne)
	require.Equal(t, node.KindInvalid, ne.Kind)
	require.Equal(t, `No valid host was found. Reason: No conductor service registered which supports driver nope for conductor group "".`, ne.Message)
	n = node.Node{Driver: node.FakeHardware, ConductorGroup: "g1"}
	require.ErrorAs(t, drv.Validate(t.Context(), &n), &ne)
	require.Contains(t, ne.Message, `for conductor group "g1".`)
	n = node.Node{Driver: node.FakeHardware}
	require.NoError(t, drv.Validate(t.Context(), &n))
	require.Equal(t, "noop", n.Interfaces["network_interface"])
}

// TestLockedNodeDoesNotStarveThePool: fifty changes of a node whose row
// lock someone holds for long do not take the pool from everyone else.
// Only one of them waits on a connection (the others wait for their turn
// without one), each gives up after node.LockWait with Ironic's NodeLocked
// (409, naming the holder) while the lock is held, and meanwhile a thousand requests on other
// nodes, reads and changes, all succeed: none gets the 503 of a pool
// exhausted past its acquire timeout.
func TestLockedNodeDoesNotStarveThePool(t *testing.T) {
	t.Parallel()
	e := setup(t) // the pool: 10 connections, 5 s acquire timeout
	ctx := t.Context()
	locked := e.createNode(map[string]any{"name": "locked"})["uuid"].(string)
	var others []string
	for i := range 20 {
		others = append(others, e.createNode(map[string]any{"name": fmt.Sprintf("other-%d", i)})["uuid"].(string))
	}

	// Someone (a conductor, say) holds the node's row lock.
	cfg := e.pool.Config().ConnConfig.Copy()
	cfg.RuntimeParams["application_name"] = "metalloc-conductor holder-1"
	holder, err := pgx.ConnectConfig(ctx, cfg)
	require.NoError(t, err)
	defer holder.Close(context.Background())
	tx, err := holder.Begin(ctx)
	require.NoError(t, err)
	_, err = tx.Exec(ctx, `SELECT 1 FROM nodes WHERE uuid = $1 FOR UPDATE`, locked)
	require.NoError(t, err)

	const blockedN = 50
	blocked := make(chan response, blockedN)
	var wg sync.WaitGroup
	for i := range blockedN {
		wg.Go(func() {
			blocked <- e.do(http.MethodPatch, "/v1/nodes/"+locked, "1.82", []op{{"op": "add", "path": fmt.Sprintf("/extra/k%d", i), "value": i}})
		})
	}
	dbtest.WaitFor(t, 30*time.Second, "a change waiting for the lock", func() bool {
		return dbtest.Count(t, e.pool, `SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND datname = current_database()`) > 0
	})

	const unrelatedN, clients = 1000, 20
	statuses := make(chan int, unrelatedN)
	work := make(chan int, unrelatedN)
	for i := range unrelatedN {
		work <- i
	}
	close(work)
	var uw sync.WaitGroup
	for range clients {
		uw.Go(func() {
			for i := range work {
				id := others[i%len(others)]
				if i%2 == 0 {
					statuses <- e.do(http.MethodGet, "/v1/nodes/"+id, "1.82", nil).status
				} else {
					statuses <- e.do(http.MethodPatch, "/v1/nodes/"+id, "1.82", []op{{"op": "add", "path": "/extra/n", "value": i}}).status
				}
			}
		})
	}
	uw.Wait()
	close(statuses)
	counts := map[int]int{}
	for s := range statuses {
		counts[s]++
	}
	require.Equal(t, map[int]int{http.StatusOK: unrelatedN}, counts, "requests on other nodes while one is locked")

	// The lock is still held: every blocked change gives up, with the
	// holder's host in Ironic's message.
	for range blockedN {
		select {
		case r := <-blocked:
			require.Equal(t, http.StatusConflict, r.status, "%s", r.raw)
			require.Equal(t, "Node "+locked+" is locked by host holder-1, please retry after the current operation is completed.", r.fault(t))
		case <-time.After(2 * time.Minute):
			t.Fatal("changes of the locked node kept waiting")
		}
	}
	wg.Wait()
	require.NoError(t, tx.Rollback(ctx))
	e.must(http.StatusOK, http.MethodPatch, "/v1/nodes/"+locked, "1.82", []op{{"op": "add", "path": "/extra/after", "value": 1}})
}
