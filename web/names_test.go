package web

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestJoinSome: up to MaxEchoed items are all named; past that, the first
// MaxEchoed and a count of the rest.
func TestJoinSome(t *testing.T) {
	t.Parallel()
	var items []string
	for i := range 12 {
		items = append(items, fmt.Sprint(i))
	}
	require.Equal(t, "", JoinSome(nil))
	require.Equal(t, "0", JoinSome(items[:1]))
	require.Equal(t, "0, 1, 2, 3, 4, 5, 6, 7, 8, 9", JoinSome(items[:10]))
	require.Equal(t, "0, 1, 2, 3, 4, 5, 6, 7, 8, 9 and 1 more", JoinSome(items[:11]))
	require.Equal(t, "0, 1, 2, 3, 4, 5, 6, 7, 8, 9 and 2 more", JoinSome(items))
}
