package conductor

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/metalloc/metalloc/db/dbtest"
)

// TestWaitMirrored: with no resource tracker registered nothing is waited
// for; with a tracker running, WaitMirrored returns once every node of a
// bulk insert (one statement, as an import's chunk) has its provider in
// Placement; with a tracker registered that mirrors nothing, it stops
// waiting after its stall period with ErrMirrorStalled.
func TestWaitMirrored(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("no tracker", func(t *testing.T) {
		t.Parallel()
		e := newTrackerEnv(t, "local")
		dbtest.Nodes(t, e.pool, 20, "gold")
		waited, err := WaitMirrored(ctx, e.pool, time.Second, nil)
		require.NoError(t, err)
		require.False(t, waited)
	})

	t.Run("tracker running", func(t *testing.T) {
		t.Parallel()
		e := newTrackerEnv(t, "local")
		tr := e.tracker(t, TrackerConfig{SyncSchedule: SyncOff, SyncDelay: 20 * time.Millisecond})
		passes := make(chan SyncStats, 1000)
		tr.OnSync = func(st SyncStats, err error) {
			if err == nil {
				passes <- st
			}
		}
		runCtx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- tr.Run(runCtx) }()
		defer func() { cancel(); require.NoError(t, <-done) }()
		<-passes // the start-up pass registered the tracker

		dbtest.Nodes(t, e.pool, 1200, "gold")
		var reads atomic.Int64
		waited, err := WaitMirrored(ctx, e.pool, 30*time.Second, func(int64) { reads.Add(1) })
		require.NoError(t, err)
		require.True(t, waited)
		require.Positive(t, reads.Load())
		var providers, nodes int
		require.NoError(t, e.pool.QueryRow(ctx, `
			SELECT (SELECT count(*) FROM placement.resource_providers rp JOIN nodes n ON n.uuid = rp.uuid),
			       (SELECT count(*) FROM nodes)`).Scan(&providers, &nodes))
		require.Equal(t, 1200, nodes)
		require.Equal(t, nodes, providers, "every node has its provider when WaitMirrored returns")
	})

	t.Run("tracker registered, not mirroring", func(t *testing.T) {
		t.Parallel()
		e := newTrackerEnv(t, "local")
		e.exec(t, `INSERT INTO placement_trackers (id, hostname) VALUES (gen_random_uuid(), 'gone')`)
		dbtest.Nodes(t, e.pool, 5, "gold")
		waited, err := WaitMirrored(ctx, e.pool, 300*time.Millisecond, nil)
		require.True(t, waited)
		require.ErrorIs(t, err, ErrMirrorStalled)
	})
}
