package freeport

import (
	"net"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestPickAvoidsEphemeralPorts: ports come from below the kernel's
// ephemeral range, bind, and are not handed out twice.
func TestPickAvoidsEphemeralPorts(t *testing.T) {
	start := ephemeralStart()
	if start-lowest < minSpan {
		t.Skipf("ephemeral range starts at %d: Pick falls back to the kernel's ports", start)
	}
	seen := map[int]bool{}
	for range 200 {
		port, err := Pick()
		require.NoError(t, err)
		require.GreaterOrEqual(t, port, lowest)
		require.Less(t, port, start, "below the ephemeral range")
		require.False(t, seen[port], "port %d handed out twice", port)
		seen[port] = true
	}
	port, err := Pick()
	require.NoError(t, err)
	l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port))
	require.NoError(t, err, "the port picked is free")
	l.Close()
}
