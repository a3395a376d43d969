package ironic

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestAllocationInIronic: Ironic's own settle time from its timestamps,
// as PostgreSQL (microseconds) and MySQL (whole seconds) keep them, with
// or without an offset; nothing from a missing or unreadable timestamp,
// nor from clocks that put the change before the creation.
func TestAllocationInIronic(t *testing.T) {
	s := func(v string) *string { return &v }
	for _, c := range []struct {
		created, updated *string
		took             time.Duration
		fine, ok         bool
	}{
		{s("2026-12-03T08:40:00.123456+00:00"), s("2026-12-03T08:40:00.223456+00:00"), 100 * time.Millisecond, true, true},
		{s("2026-12-03T08:40:00.5"), s("2026-12-03T08:40:01.25"), 750 * time.Millisecond, true, true},
		{s("2026-12-03T08:40:00+00:00"), s("2026-12-03T08:40:02+00:00"), 2 * time.Second, false, true},
		{s("2026-12-03T08:40:00.123456+00:00"), nil, 0, false, false},
		{s("yesterday"), s("2026-12-03T08:40:02+00:00"), 0, false, false},
		{s("2026-12-03T08:40:02.1+00:00"), s("2026-12-03T08:40:01.9+00:00"), 0, false, false},
	} {
		took, fine, ok := Allocation{CreatedAt: c.created, UpdatedAt: c.updated}.InIronic()
		require.Equal(t, []any{c.took, c.fine, c.ok}, []any{took, fine, ok}, "%v %v", c.created, c.updated)
	}
}
