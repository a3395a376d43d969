package loadgen

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestTallyDuration: a run's rate counts only the allocations it created,
// and with Options.Duration only those seen finished within the window,
// over the window; a run that ends sooner keeps its own span.
func TestTallyDuration(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 12, 3, 14, 0, 0, 0, time.UTC)
	s := func(d int) time.Time { return t0.Add(time.Duration(d) * time.Second) }
	// Four created (sent at 0, 10, 20, 50 s; seen at 5, 30, 60, 61 s), one
	// POST failed at 30 s, six never sent (the window had passed).
	uuids := []string{"a", "b", "c", "", "d"}
	sent := []time.Time{s(0), s(10), s(20), s(30), s(50)}
	seen := []time.Time{s(5), s(30), s(60), {}, s(61)}
	post := []time.Duration{time.Second, time.Second, time.Second, 2 * time.Second, time.Second}
	for range 6 {
		uuids, sent, seen, post = append(uuids, ""), append(sent, time.Time{}), append(seen, time.Time{}), append(post, 0)
	}
	state := func(i int) string { return "active" }
	server := func(i int) (time.Duration, bool) { return 0, false }

	var r Result
	r.tally(Options{}, uuids, sent, seen, post, state, server)
	require.Equal(t, Rate{4, 61 * time.Second}, r.Allocate)
	require.Equal(t, 4, r.Active)
	require.Equal(t, 2*time.Second, r.Post.Max)
	require.Equal(t, time.Second, r.Post.P50, "the unsent allocation has no POST time")

	r = Result{}
	r.tally(Options{Duration: time.Minute}, uuids, sent, seen, post, state, server)
	require.Equal(t, Rate{3, time.Minute}, r.Allocate, "seen at 61 s is past the 60 s window")

	r = Result{}
	r.tally(Options{Duration: 2 * time.Minute}, uuids, sent, seen, post, state, server)
	require.Equal(t, Rate{4, 61 * time.Second}, r.Allocate, "a run shorter than the window keeps its span")
}

// TestParallelEnough: a worker whose slot answers errEnough (the time is
// up) stops without failing the phase; the slots after it stay undone,
// and the last progress line says how many were done, not the total.
func TestParallelEnough(t *testing.T) {
	t.Parallel()
	var last [2]int
	o := Options{Concurrency: 4, Timeout: time.Minute, Progress: func(_ string, done, total int) { last = [2]int{done, total} }}
	ran := make([]bool, 100)
	_, err := parallel(context.Background(), o, "allocate", 100, func(_ context.Context, i int) error {
		if i >= 10 {
			return errEnough
		}
		ran[i] = true
		return nil
	})
	require.NoError(t, err)
	require.Equal(t, [2]int{10, 100}, last)
	for i, r := range ran {
		require.Equal(t, i < 10, r, "slot %d", i)
	}
}
