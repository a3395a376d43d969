package cli

import (
	"os"
	"runtime/debug"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestSetGCPercent: without GOGC in the environment the target given
// applies; with it, Go's own reading of the variable stands.
func TestSetGCPercent(t *testing.T) {
	orig := debug.SetGCPercent(100)
	t.Cleanup(func() { debug.SetGCPercent(orig) })

	t.Setenv("GOGC", "") // restored after the test
	require.NoError(t, os.Unsetenv("GOGC"))
	require.Equal(t, ServerGCPercent, SetGCPercent(ServerGCPercent))
	require.Equal(t, ServerGCPercent, gcPercent(), "the runtime's target")

	// The runtime reads GOGC when the process starts; here it is set by hand.
	t.Setenv("GOGC", "150")
	debug.SetGCPercent(150)
	require.Equal(t, 150, SetGCPercent(ServerGCPercent))
	require.Equal(t, 150, gcPercent(), "left as the environment says")

	t.Setenv("GOGC", "off")
	debug.SetGCPercent(-1)
	require.Equal(t, -1, SetGCPercent(ServerGCPercent))
}
