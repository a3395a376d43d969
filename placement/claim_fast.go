package placement

import (
	"bytes"
	"context"
	"errors"
	"slices"
	"sort"

	"github.com/jackc/pgx/v5"
)

// errSlowPath tells writeAllocations to run the general transaction: the
// pipelined claim met a case it leaves to it (an existing consumer, an
// unknown provider, a missing inventory, a capacity or constraint
// violation, a transient error), and rolled back.
var errSlowPath = errors.New("placement: claim needs the general path")

// fastClaimable reports whether claims fit the pipelined claim: every
// consumer is expected to be new (from 1.28 a null consumer_generation;
// before, an existing consumer is found by the insert and sent back to the
// general path) and gets allocations.
func fastClaimable(claims []claim) bool {
	for _, cl := range claims {
		if len(cl.resources) == 0 || cl.generation != nil {
			return false
		}
	}
	return len(claims) > 0
}

// claimPipelined writes claims of new consumers in two round trips instead
// of the general path's six or more: BEGIN, the consumers' inserts, the
// lock of the named providers (in id order, as the general path locks
// them) and their inventories with current usage go in one pipeline; the
// check runs in Go; the allocation insert with the generation bumps and
// COMMIT go in a second. The usage is read by a statement that runs after
// the lock is held, so it sees every allocation committed before it, as
// the general path's does. Anything but the plain success rolls back and
// returns errSlowPath, and the general path then gives the exact answer.
func (h *Handler) claimPipelined(ctx context.Context, claims []claim) error {
	sort.Slice(claims, func(i, j int) bool {
		return bytes.Compare(claims[i].consumer[:], claims[j].consumer[:]) < 0
	})
	conn, err := h.pool.Acquire(ctx)
	if err != nil {
		return err
	}
	defer conn.Release()
	rollback := func() error {
		if _, err := conn.Exec(context.WithoutCancel(ctx), "ROLLBACK"); err != nil {
			// The connection's state is unknown: do not reuse it.
			_ = conn.Conn().Close(context.WithoutCancel(ctx))
			return err
		}
		return errSlowPath
	}

	b := &pgx.Batch{}
	b.Queue("BEGIN")
	p := queueClaims(b, claims, nil, nil)
	if err := conn.SendBatch(ctx, b).Close(); err != nil {
		if rerr := rollback(); !errors.Is(rerr, errSlowPath) {
			return err
		}
		return errSlowPath
	}
	if !p.complete() {
		return rollback()
	}
	ins, missing, err := evalClaims(claims, p.consumers, p.byUUID, p.invs)
	if missing != nil || err != nil {
		return rollback()
	}
	// The named providers, in id order (the lock's).
	for _, id := range p.byUUID {
		ins.BumpIds = append(ins.BumpIds, id)
	}
	slices.Sort(ins.BumpIds)

	b = &pgx.Batch{}
	queueInsertAllocations(b, ins.BumpIds, ins)
	b.Queue("COMMIT")
	if err := conn.SendBatch(ctx, b).Close(); err != nil {
		if rerr := rollback(); !errors.Is(rerr, errSlowPath) {
			return err
		}
		return errSlowPath
	}
	return nil
}
