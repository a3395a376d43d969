package allocation

import (
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
)

// TestPollMarks: an allocation answered allocating is polled within the
// window and not after it; one answered otherwise is forgotten; past
// pollMarksPrune entries the old ones are pruned.
func TestPollMarks(t *testing.T) {
	t.Parallel()
	p := newPollMarks(time.Second)
	now := time.Unix(1000, 0)
	u := uuid.New()
	require.False(t, p.polling(u, now))
	p.answered(u, true, now)
	require.True(t, p.polling(u, now.Add(999*time.Millisecond)))
	require.False(t, p.polling(u, now.Add(time.Second)))
	p.answered(u, false, now)
	require.False(t, p.polling(u, now))
	require.Empty(t, p.at)

	for range pollMarksPrune {
		p.answered(uuid.New(), true, now)
	}
	later := now.Add(2 * time.Second)
	p.answered(u, true, later)
	require.Len(t, p.at, 1, "the old marks pruned")
	require.True(t, p.polling(u, later))
}
