package conductor

import (
	"context"
	"errors"

	"go.uber.org/zap"

	"github.com/metalloc/metalloc/allocation"
	"github.com/metalloc/metalloc/db"
)

// Backend is how a conductor gets a node for each allocation it owns: the
// database backend (reserve straight in PostgreSQL) or the placement backend
// (claim through the Placement API with Selection objects). The claim loop
// knows nothing else of them.
type Backend interface {
	// Claim takes up to n unowned allocating rows for conductor me. It
	// returns the rows it already reserved (only ID, UUID and CreatedAt need
	// be set) and the claimed rows that still need Process. An error
	// wrapping allocation.ErrClaimedUnread means rows were claimed but not
	// read back: reserved is valid, and the rest must be resumed (Owned).
	Claim(ctx context.Context, me int64, n int) (reserved, rest []allocation.Claimed, err error)
	// Process reserves a node for owned row c or moves it to error, with the
	// contract of allocation.Allocator.Process: Reserved, Failed, or Lost
	// (no longer me's, nothing written); an error only when the database or
	// Placement is unreachable or ctx ends, the row staying owned.
	Process(ctx context.Context, me int64, c allocation.Claimed) (allocation.Outcome, error)
}

// databaseBackend claims and reserves in one transaction
// (allocation.Allocator.ClaimReserve, the fast path); rows with no free node
// at that moment go through Process. When the fast path fails as a whole
// for another reason than an outage (a constraint race on one row rolls the
// batch back), the batch is claimed only (Rows.Claim) and every row goes
// through Process, which fails the offending row with a reason instead of
// letting it block the batch at every attempt.
type databaseBackend struct {
	*allocation.Allocator
	rows *Rows
	log  *zap.Logger
}

func (b databaseBackend) Claim(ctx context.Context, me int64, n int) (reserved, rest []allocation.Claimed, err error) {
	reserved, rest, err = b.ClaimReserve(ctx, me, n)
	if err == nil || errors.Is(err, allocation.ErrClaimedUnread) || db.IsUnavailable(err) || ctx.Err() != nil {
		return reserved, rest, err
	}
	b.log.Warn("batch reservation failed; claiming the batch for the slow path", zap.Error(err))
	rest, err = b.rows.Claim(ctx, me, n)
	return nil, rest, err
}

// placementBackend, with metalloc-placement on the same database (mode
// local), claims and reserves in one transaction that also writes the
// Placement allocations (PlacementAllocator.ClaimReserveLocal), as the
// database backend does. Otherwise, and for the rows that fast path left
// (candidate_nodes, nothing free at that moment, a class or trait
// Placement does not know), it reserves through Placement with one
// candidates query per kind of request (PlacementAllocator.ClaimBatch:
// selections in-process in one transaction in mode local, concurrent HTTP
// claims otherwise); the rows still left go through Process. A fast path
// that fails as a whole for another reason than an outage falls back to
// claiming the batch (Rows.Claim) for ClaimBatch.
type placementBackend struct {
	*allocation.PlacementAllocator
	rows *Rows
	log  *zap.Logger
}

func (b placementBackend) Claim(ctx context.Context, me int64, n int) (reserved, rest []allocation.Claimed, err error) {
	var rows []allocation.Claimed
	fast := b.Local(ctx)
	if fast {
		reserved, rows, err = b.ClaimReserveLocal(ctx, me, n)
		if err != nil && !errors.Is(err, allocation.ErrClaimedUnread) && !db.IsUnavailable(err) && ctx.Err() == nil {
			b.log.Warn("batch reservation through local Placement failed; claiming the batch for the slow path", zap.Error(err))
			fast = false
		} else if err != nil {
			return reserved, rows, err
		}
	}
	if !fast {
		rows, err = b.rows.Claim(ctx, me, n)
		if err != nil {
			return nil, rows, err
		}
	}
	if len(rows) == 0 {
		return reserved, nil, nil
	}
	more, rest := b.ClaimBatch(ctx, me, rows)
	return append(reserved, more...), rest, nil
}
