package backend

import (
	"container/heap"
	"context"
	"math/rand/v2"
	"testing"
	"time"
)

// kneeServer is a simulated Ironic: an allocation sent while n are in
// flight (itself included) settles after base × (1 + gentle × n/knee)
// while n ≤ knee, and after base × (1 + gentle + slope × (n − knee)/knee)
// beyond, times up to 1 + noise (the polls' quantization); with slope >
// 1 + gentle its rate, n/latency, falls past the knee, as Ironic's
// conductors congest (issue 44). gentle > 0 is the Ironic bench ironic
// measured (2,000 nodes, whole minutes): its latency rises from the
// first allocations in flight while its rate still grows, up to about
// 16 in flight in all, and falls beyond. Deterministic (seeded).
type kneeServer struct {
	base  time.Duration
	knee  int
	slope float64
	// gentle is the latency's rise below the knee (0: flat).
	gentle float64
	noise  float64
	rng    *rand.Rand
	// extra is work of Ironic's own in flight beside the allocations (a
	// periodic task's workers): it counts towards the knee and the
	// slope, and each allocation shares the conductors with it.
	extra int
}

func newKneeServer(knee int) *kneeServer {
	return &kneeServer{base: 500 * time.Millisecond, knee: knee, slope: 2, noise: 0.15, rng: rand.New(rand.NewPCG(44, 1))}
}

func (s *kneeServer) latency(n int) time.Duration {
	return time.Duration(float64(s.base) * s.factor(n+s.extra) * (1 + s.noise*s.rng.Float64()))
}

// factor is the latency's factor over base with n in flight.
func (s *kneeServer) factor(n int) float64 {
	if n <= s.knee {
		return 1 + s.gentle*float64(n)/float64(s.knee)
	}
	return 1 + s.gentle + s.slope*float64(n-s.knee)/float64(s.knee)
}

// best is the server's best rate (allocations per second): at the knee.
func (s *kneeServer) best() float64 { return s.rate(s.knee) }

// rate is the server's rate with n in flight (allocations per second),
// its noise and extra work left out.
func (s *kneeServer) rate(n int) float64 {
	return float64(n) / (s.base.Seconds() * s.factor(n))
}

// newIronicServer is the Ironic bench ironic measured on 2 cores (2,000
// nodes, 2 Ironic conductors, whole minutes): a rate that grows with what
// is in flight up to about 16 in all (latency from 190 to 450 ms) and
// falls beyond (fixed limits per conductor of 1, 2, 4, 8, 16 gave 9.9,
// 10.6, 14.2, 15.5 and 12.5/s with 256 clients).
func newIronicServer() *kneeServer {
	s := newKneeServer(16)
	s.base, s.gentle, s.slope = 150*time.Millisecond, 2, 6
	return s
}

// simEvent is one allocation in flight: when it settles, its latency,
// and (multi-conductor simulations) whose it is.
type simEvent struct {
	at, rtt time.Duration
	who     int
}

type simQueue []simEvent

func (q simQueue) Len() int           { return len(q) }
func (q simQueue) Less(i, j int) bool { return q[i].at < q[j].at }
func (q simQueue) Swap(i, j int)      { q[i], q[j] = q[j], q[i] }
func (q *simQueue) Push(x any)        { *q = append(*q, x.(simEvent)) }
func (q *simQueue) Pop() any {
	old := *q
	e := old[len(old)-1]
	*q = old[:len(old)-1]
	return e
}

// sim drives a limiter against a server in virtual time with unbounded
// demand: every free slot is taken at once.
type sim struct {
	t   *testing.T
	l   *limiter
	srv *kneeServer
	now time.Duration
	q   simQueue
	// maxLimit and maxInFlight are the most seen.
	maxLimit    float64
	maxInFlight int
}

func newSim(t *testing.T, l *limiter, srv *kneeServer) *sim {
	s := &sim{t: t, l: l, srv: srv}
	l.clock = virtualClock(&s.now)
	return s
}

// virtualClock is a limiter's clock reading a simulation's virtual time.
func virtualClock(now *time.Duration) func() time.Time {
	return func() time.Time { return time.Unix(0, 0).Add(*now) }
}

func (s *sim) fill() {
	for s.l.TryAcquire() {
		st := s.l.State()
		s.maxInFlight = max(s.maxInFlight, st.inFlight)
		rtt := s.srv.latency(st.inFlight)
		heap.Push(&s.q, simEvent{at: s.now + rtt, rtt: rtt})
	}
}

// run settles n allocations (outcome kind, sampleOK normally) and returns
// the rate (per second of virtual time) and the mean limit over them.
func (s *sim) run(n int, kind sampleKind) (rate, meanLimit float64) {
	s.fill()
	start := s.now
	sum := 0.0
	for range n {
		e := heap.Pop(&s.q).(simEvent)
		s.now = e.at
		s.l.Release(e.rtt, e.rtt, kind)
		st := s.l.State()
		if st.limit > s.maxLimit {
			s.maxLimit = st.limit
		}
		sum += st.limit
		s.fill()
	}
	return float64(n) / (s.now - start).Seconds(), sum / float64(n)
}

// converged runs warm-up allocations, then measures: the limit's mean
// must be near the knee and the rate near the server's best.
func (s *sim) converged(what string, warmup int) (rate, meanLimit float64) {
	s.t.Helper()
	s.run(warmup, sampleOK)
	rate, meanLimit = s.run(3000, sampleOK)
	knee := float64(s.srv.knee)
	s.t.Logf("%s: mean limit %.1f (knee %d), rate %.1f/s (best %.1f/s)", what, meanLimit, s.srv.knee, rate, s.srv.best())
	if meanLimit < 0.75*knee || meanLimit > 1.4*knee {
		s.t.Errorf("%s: mean limit %.1f, want near the knee %d (0.75-1.4×)", what, meanLimit, s.srv.knee)
	}
	if rate < 0.8*s.srv.best() {
		s.t.Errorf("%s: rate %.1f/s, want at least 80%% of the best %.1f/s", what, rate, s.srv.best())
	}
	return rate, meanLimit
}

// TestIronicLimitConvergesToKnee: from below (start 16, knee 40) and from
// above (start at the ceiling 64, knee 12) the limit settles near the
// knee and the rate near the server's best, where a fixed limit at the
// ceiling congests the server (issue 44's 64 clients: a lower rate).
func TestIronicLimitConvergesToKnee(t *testing.T) {
	s := newSim(t, newLimiter(64, true, nil), newKneeServer(40))
	if got := s.l.State().limit; got != 16 {
		t.Fatalf("initial limit %.1f, want 16 (a quarter of the ceiling)", got)
	}
	s.converged("from below", 1000)

	srv := newKneeServer(12)
	l := newLimiter(64, true, nil)
	l.limit = 64
	s = newSim(t, l, srv)
	rate, _ := s.converged("from above", 1000)

	fixed := newSim(t, newLimiter(64, false, nil), newKneeServer(12))
	fixedRate, fixedLimit := fixed.run(3000, sampleOK)
	t.Logf("fixed at the ceiling: limit %.0f, rate %.1f/s", fixedLimit, fixedRate)
	if fixedLimit != 64 || rate < 1.4*fixedRate {
		t.Errorf("fixed limit %.0f at rate %.1f/s, adaptive %.1f/s: want the fixed one at 64 and congested (adaptive at least 1.4× its rate)",
			fixedLimit, fixedRate, rate)
	}
}

// TestIronicLimitCeiling: a server whose knee is past the ceiling gets
// the ceiling, never more (limit and slots), and a load below the limit
// does not raise it.
func TestIronicLimitCeiling(t *testing.T) {
	s := newSim(t, newLimiter(8, true, nil), newKneeServer(40))
	s.run(2000, sampleOK)
	if s.maxLimit > 8 || s.maxInFlight > 8 {
		t.Errorf("limit reached %.1f, in flight %d: want at most the ceiling 8", s.maxLimit, s.maxInFlight)
	}
	if got := s.l.State().limit; got != 8 {
		t.Errorf("limit %.1f, want the ceiling 8 (the knee is beyond)", got)
	}

	// Three allocations at a time with a limit of 4: the samples say
	// nothing about more; the limit follows the load, within one above
	// it (a probe halves what is in flight, then it resumes), and never
	// climbs.
	l := newLimiter(16, true, nil)
	most := 0.0
	for range 50 {
		held := 0
		for range 3 {
			if l.TryAcquire() {
				held++
			}
		}
		if held == 0 {
			t.Fatal("no slot at all")
		}
		for range held {
			l.Release(100*time.Millisecond, 100*time.Millisecond, sampleOK)
		}
		most = max(most, l.State().limit)
	}
	if got := l.State().limit; got < 3 || most > 5 {
		t.Errorf("limit %.1f (at most %.1f) after a load of 3, want 3-5 (one above the load)", got, most)
	}
}

// TestIronicLimitDropsAndRecovers: a failure (Ironic unreachable, a
// timeout, a 5xx) halves the limit once for the requests then in flight,
// an outage takes it to the floor, and it comes back near the knee once
// Ironic answers again.
func TestIronicLimitDropsAndRecovers(t *testing.T) {
	srv := newKneeServer(16)
	s := newSim(t, newLimiter(64, true, nil), srv)
	s.converged("before", 1000)
	// The limit a drop halves: during a probe, the level it resumes at.
	s.l.mu.Lock()
	before := s.l.limit
	if s.l.probing {
		before = s.l.restore
	}
	s.l.mu.Unlock()
	// Every allocation in flight fails: one halving, not one per failure.
	s.run(1, sampleDrop)
	after := s.l.State()
	if want := max(before/2, limitFloor); after.limit != want {
		t.Errorf("after a burst of failures: limit %.1f, want %.1f (half of %.1f)", after.limit, want, before)
	}
	for range after.inFlight - 1 {
		s.run(1, sampleDrop)
	}
	if got := s.l.State().limit; got != after.limit {
		t.Errorf("failures of requests sent before the cut: limit %.1f, want %.1f (halved once)", got, after.limit)
	}
	// An outage: failures keep coming.
	s.run(200, sampleDrop)
	if got := s.l.State().limit; got != limitFloor {
		t.Errorf("after an outage: limit %.1f, want the floor %d", got, limitFloor)
	}
	s.converged("after the outage", 500)
}

// TestIronicLimitBaselineMoves: the baseline follows Ironic when its
// latency without a queue changes: slower (it had been measured faster,
// the limit must not stay at the floor) or faster.
func TestIronicLimitBaselineMoves(t *testing.T) {
	srv := newKneeServer(16)
	s := newSim(t, newLimiter(64, true, nil), srv)
	s.converged("at 500 ms", 1000)
	srv.base *= 3
	s.converged("at 1.5 s", 1500)
	if b := s.l.State().baseline; b < srv.base || b > srv.base*12/10 {
		t.Errorf("baseline %s, want about %s", b, srv.base)
	}
	srv.base /= 6
	s.converged("at 250 ms", 1500)
	if b := s.l.State().baseline; b < srv.base || b > srv.base*12/10 {
		t.Errorf("baseline %s, want about %s", b, srv.base)
	}
}

// TestIronicLimitAcquire: waiters get slots in turn as slots are
// released; one whose context ends holds none; a fixed limit stays at
// the ceiling whatever the samples.
func TestIronicLimitAcquire(t *testing.T) {
	var seen []limitState
	l := newLimiter(1, false, func(s limitState) { seen = append(seen, s) })
	ctx := context.Background()
	if err := l.Acquire(ctx); err != nil {
		t.Fatal(err)
	}
	got := make(chan int, 2)
	for i := range 2 {
		go func() {
			if err := l.Acquire(ctx); err != nil {
				t.Error(err)
			}
			got <- i
			l.Release(time.Second, time.Second, sampleOK)
		}()
		for l.State().waiting != i+1 { // each waits before the next comes
			time.Sleep(time.Millisecond)
		}
	}
	canceled, cancel := context.WithCancel(ctx)
	cancel()
	if err := l.Acquire(canceled); err == nil {
		t.Error("Acquire with an ended context: want its error")
	}
	l.Release(time.Minute, time.Minute, sampleDrop)
	if a, b := <-got, <-got; a != 0 || b != 1 {
		t.Errorf("waiters served %d then %d, want in turn", a, b)
	}
	st := l.State()
	if st.inFlight != 0 || st.waiting != 0 || st.limit != 1 {
		t.Errorf("at the end %+v, want nothing in flight or waiting and the fixed limit 1", st)
	}
	if len(seen) == 0 || seen[len(seen)-1] != st {
		t.Errorf("reported %v, want the states up to %+v", seen, st)
	}
}
