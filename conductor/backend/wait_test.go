package backend

import (
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
)

// The rows of one kind wait for one probe at a time: the kind's wait
// doubles while its nodes stay locked, and a probe that got a node lets
// every row try.
func TestLockedKindsOneProbeAtATime(t *testing.T) {
	t.Parallel()
	ms := time.Millisecond
	l := newLockedKinds(5*ms, 20*ms)
	t0 := time.Unix(1000, 0)
	_, _, ok := l.wait("k", t0)
	require.False(t, ok, "an unknown kind: the row tries")
	require.Equal(t, 5*ms, l.locked("k", 3, t0))
	left, fit, ok := l.wait("k", t0.Add(ms))
	require.True(t, ok)
	require.Equal(t, 4*ms, left)
	require.EqualValues(t, 3, fit)
	_, _, ok = l.wait("k", t0.Add(5*ms))
	require.False(t, ok, "due: this row probes")
	left, _, ok = l.wait("k", t0.Add(5*ms))
	require.True(t, ok, "the others wait for the probe")
	require.Equal(t, 5*ms, left)
	require.Equal(t, 10*ms, l.locked("k", 2, t0.Add(6*ms)), "still locked: the wait doubles")
	require.Equal(t, 20*ms, l.locked("k", 2, t0.Add(16*ms)))
	require.Equal(t, 20*ms, l.locked("k", 2, t0.Add(36*ms)), "up to most")
	_, _, ok = l.wait("other", t0.Add(37*ms))
	require.False(t, ok, "kinds are apart")
	l.free("k")
	_, _, ok = l.wait("k", t0.Add(37*ms))
	require.False(t, ok, "a node was got: every row tries")

	// A kind whose rows have all ended is forgotten.
	l.locked("old", 1, t0)
	l.locked("new", 1, t0.Add(2*staleKind))
	require.NotContains(t, l.kinds, "old")
}

// A row waits no longer than its limit: Retry is cut to what is left, and
// once it is up waitFor says so.
func TestWaitForBoundsTheWait(t *testing.T) {
	t.Parallel()
	t0 := time.Unix(1000, 0)
	var c Claimed
	require.True(t, waitFor(&c, t0, 80*time.Millisecond, time.Second))
	require.Equal(t, t0, c.Wait.Since)
	require.Equal(t, 80*time.Millisecond, c.Wait.Retry)
	require.True(t, waitFor(&c, t0.Add(950*time.Millisecond), 80*time.Millisecond, time.Second))
	require.Equal(t, t0, c.Wait.Since, "the wait began at the first Waiting")
	require.Equal(t, 50*time.Millisecond, c.Wait.Retry)
	require.True(t, c.Wait.expired(t0.Add(time.Second), time.Second))
	require.False(t, waitFor(&c, t0.Add(time.Second), 80*time.Millisecond, time.Second))
}

// The kind is what decides which nodes fit, in any order.
func TestKindOf(t *testing.T) {
	t.Parallel()
	a, b := uuid.New(), uuid.New()
	owner := "p1"
	x := Claimed{ResourceClass: "gold", Traits: []string{"B", "A"}, CandidateNodes: []uuid.UUID{a, b}, Owner: &owner}
	y := Claimed{ResourceClass: "gold", Traits: []string{"A", "B"}, CandidateNodes: []uuid.UUID{b, a}, Owner: &owner,
		Name: &owner, UUID: uuid.New()}
	require.Equal(t, kindOf(&x), kindOf(&y))
	z := y
	z.Owner = nil
	require.NotEqual(t, kindOf(&x), kindOf(&z))
	z = y
	z.Traits = []string{"A"}
	require.NotEqual(t, kindOf(&x), kindOf(&z))
}
