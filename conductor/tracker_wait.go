package conductor

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// ErrMirrorStalled is WaitMirrored's error when the node change log did not
// shrink for its stall period: no live resource tracker reads it (a
// conductor that died less than 10 minutes ago still counts as registered),
// or Placement is unreachable. The nodes are mirrored once a tracker runs.
var ErrMirrorStalled = errors.New("the resource tracker has not mirrored the node changes into Placement")

// mirrorWaitPoll is how often WaitMirrored reads the log.
const mirrorWaitPoll = 100 * time.Millisecond

// WaitMirrored waits until the running resource trackers (the conductors
// of the placement backend) have mirrored into Placement every node change
// logged so far: every entry of placement_node_changes up to the newest
// at the call (migration 00027). After `metalloc-manage node import`, the
// imported nodes are then allocatable through the placement backend: a
// burst right after an import does not wait for the tracker, or walk nodes
// Placement does not know yet.
//
// It returns at once with waited false when no tracker is registered (no
// conductor runs the placement backend: nothing is logged, and a tracker
// starting later mirrors every node in its first, full pass) or nothing is
// logged. progress, when set, is called with the entries left (about one
// per node changed) after each read, every mirrorWaitPoll. It returns
// ErrMirrorStalled when the entries left did not shrink for stall, and
// ctx's error when ctx ends.
func WaitMirrored(ctx context.Context, pool *pgxpool.Pool, stall time.Duration, progress func(left int64)) (waited bool, err error) {
	q := New(pool)
	head, err := q.NodeChangesHead(ctx)
	if err != nil {
		return false, fmt.Errorf("reading the node change log: %w", err)
	}
	if !head.Tracked || head.LastSeq == 0 {
		return false, nil
	}
	best, since := int64(-1), time.Now()
	for {
		oldest, err := q.NodeChangesOldest(ctx, head.LastSeq)
		if err != nil {
			return true, fmt.Errorf("reading the node change log: %w", err)
		}
		left := int64(0)
		if oldest > 0 {
			left = head.LastSeq - oldest + 1
		}
		if progress != nil {
			progress(left)
		}
		switch {
		case left == 0:
			return true, nil
		case best < 0 || left < best:
			best, since = left, time.Now()
		case time.Since(since) >= stall:
			return true, fmt.Errorf("%w: %d entries of the node change log left, none mirrored for %s",
				ErrMirrorStalled, left, stall)
		}
		select {
		case <-ctx.Done():
			return true, ctx.Err()
		case <-time.After(mirrorWaitPoll):
		}
	}
}
