package conductor

import (
	"context"

	"github.com/metalloc/metalloc/allocation"
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
// at that moment go through Process.
type databaseBackend struct{ *allocation.Allocator }

func (b databaseBackend) Claim(ctx context.Context, me int64, n int) (reserved, rest []allocation.Claimed, err error) {
	return b.ClaimReserve(ctx, me, n)
}

// placementBackend claims rows (Rows.Claim) and processes each through
// Placement: every node is claimed in Placement before the database.
type placementBackend struct {
	*allocation.PlacementAllocator
	rows *Rows
}

func (b placementBackend) Claim(ctx context.Context, me int64, n int) (reserved, rest []allocation.Claimed, err error) {
	rest, err = b.rows.Claim(ctx, me, n)
	return nil, rest, err
}
