package conductor

import (
	"context"
	"time"

	"go.uber.org/zap"

	"github.com/metalloc/metalloc/conductor/backend"
)

// groupKey is a group's key in Service.inflight (allocation ids are int64).
type groupKey int64

// groupBatch is how many groups one claim takes: one, as a group is
// processed at once by the worker that claimed it and may take a while.
const groupBatch = 1

// claimGroups claims unowned allocating groups (Rows.ClaimGroups) and
// processes them here, one by one. It returns how many it claimed. The
// claim runs to its end, even past the end of procCtx, as claim's (a stop
// waits for it; see work); the groups are processed on procCtx.
func (c *Service) claimGroups(procCtx context.Context) (int, error) {
	gs, err := c.rows.ClaimGroups(context.WithoutCancel(procCtx), c.id, groupBatch)
	if err != nil {
		return 0, err
	}
	for _, g := range gs {
		if c.trackGroup(g.ID) {
			c.processGroup(procCtx, g)
		}
	}
	return len(gs), nil
}

// trackGroup marks owned group id as in flight; false means it already is.
func (c *Service) trackGroup(id int64) bool {
	_, busy := c.inflight.LoadOrStore(groupKey(id), struct{}{})
	return !busy
}

// enqueueGroup hands owned group g to the workers unless it is in flight;
// with the queue full it stays owned and a later resume queues it.
func (c *Service) enqueueGroup(g backend.ClaimedGroup) {
	if !c.trackGroup(g.ID) {
		return
	}
	select {
	case c.groupQueue <- g:
	default:
		c.inflight.Delete(groupKey(g.ID))
		c.needResume.Store(true)
	}
}

// requeueOwnedGroups queues this conductor's allocating groups that are
// not in flight.
func (c *Service) requeueOwnedGroups(ctx context.Context) {
	owned, err := c.rows.OwnedGroups(ctx, c.id)
	if err != nil {
		if ctx.Err() == nil {
			c.log.Warn("listing owned allocation groups to resume", zap.Error(err))
			c.needResume.Store(true)
		}
		return
	}
	for _, g := range owned {
		if _, busy := c.inflight.Load(groupKey(g.ID)); !busy {
			c.log.Info("resuming allocation group", zap.Stringer("allocation_group", g.UUID))
			c.enqueueGroup(g)
		}
	}
}

// processGroup runs one owned group that trackGroup marked in flight, and
// clears the mark; a database outage leaves it owned and asks for a resume.
func (c *Service) processGroup(ctx context.Context, g backend.ClaimedGroup) {
	defer c.inflight.Delete(groupKey(g.ID))
	out, err := c.groups.Process(ctx, c.id, g)
	if err != nil {
		c.log.Warn("allocation group left for a retry", zap.Stringer("allocation_group", g.UUID), zap.Error(err))
		c.needResume.Store(true)
		return
	}
	c.log.Debug("allocation group processed", zap.Stringer("allocation_group", g.UUID), zap.Stringer("outcome", out),
		zap.Duration("since_created", time.Since(g.CreatedAt)))
}
