package db_test

import (
	"os"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/metalloc/metalloc/db"
)

// TestProcessMemory: the benchmark's memory readings come from
// /proc/PID/status; a Go test process has a peak resident size and no
// huge-page mappings, and a pid that does not exist reads as 0.
func TestProcessMemory(t *testing.T) {
	t.Parallel()
	require.Positive(t, db.PeakMemory(os.Getpid()))
	require.Zero(t, db.HugePagesMemory(os.Getpid()))
	require.Zero(t, db.PeakMemory(-1))
	require.Zero(t, db.HugePagesMemory(-1))
}
