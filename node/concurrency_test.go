package node_test

import (
	"context"
	"net/http"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

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
	// Any hardware type is accepted by default; its interfaces are kept as
	// given and not defaulted.
	b := e.createNode(map[string]any{"driver": "ipmi", "power_interface": "ipmitool"})
	require.Equal(t, "ipmi", b["driver"])
	require.Equal(t, "ipmitool", b["power_interface"])
	require.Nil(t, b["deploy_interface"])

	// A restricted driver refuses other types as Ironic does.
	drv := node.FakeDriver{HardwareTypes: []string{node.FakeHardware}}
	n := node.Node{Driver: "nope"}
	err := drv.Validate(t.Context(), &n)
	var ne *node.Error
	require.ErrorAs(t, err, &ne)
	require.Equal(t, node.KindInvalid, ne.Kind)
	require.Equal(t, `No valid host was found. Reason: No conductor service registered which supports driver nope for conductor group "".`, ne.Message)
}
