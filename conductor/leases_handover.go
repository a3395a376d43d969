package conductor

import (
	"context"
	"errors"
	"time"
)

// Back-to-back leases: admission lets lease B book a node from the second
// lease A's window ends ([a, t) and [t, b) do not overlap), so at t the end
// of A and the start of B are due together, made by any conductors in any
// order. A start that found one of its nodes still held (not free) while
// a lease whose end_time has come still books it rolls back and is made
// again at the next leasePoll, once that end has released the node
// (awaitEnds): B then gets its allocations, a poll or two late, rather
// than none. After leaseHandoverGrace past its start_time a start no
// longer waits (an end that cannot be made must not hold it back): the
// nodes still held get no allocation and are named in status_reason.
const leaseHandoverGrace = 5 * time.Second

// errAwaitEnd rolls a start back to wait for the end of the lease before
// it on one of its nodes (moveLease: not an error).
var errAwaitEnd = errors.New("a node of the lease is still held by a lease whose end is due")

// awaitEnds is errAwaitEnd when lease id, whose start found nodes not
// free, should wait for ends due on them (LeaseNodesAwaitingEnd), else
// nil.
func (c *Service) awaitEnds(ctx context.Context, q *Queries, id int64) error {
	n, err := q.LeaseNodesAwaitingEnd(ctx, LeaseNodesAwaitingEndParams{LeaseID: id, GraceSeconds: leaseHandoverGrace.Seconds()})
	if err != nil {
		return err
	}
	if n > 0 {
		return errAwaitEnd
	}
	return nil
}
