package backend

import (
	"container/heap"
	"testing"
	"time"
)

// multiSim drives several limiters (conductors) against one server in
// virtual time with unbounded demand: the server's latency depends on
// what all of them have in flight.
type multiSim struct {
	ls  []*limiter
	srv *kneeServer
	now time.Duration
	q   simQueue
}

func (s *multiSim) fill() {
	for i, l := range s.ls {
		for l.TryAcquire() {
			rtt := s.srv.latency(s.q.Len() + 1)
			heap.Push(&s.q, simEvent{at: s.now + rtt, rtt: rtt, who: i})
		}
	}
}

// run settles n allocations and returns the rate and the mean of the
// limits' sum.
func (s *multiSim) run(n int) (rate, meanSum float64) {
	for _, l := range s.ls {
		l.clock = virtualClock(&s.now)
	}
	s.fill()
	start := s.now
	total := 0.0
	for range n {
		e := heap.Pop(&s.q).(simEvent)
		s.now = e.at
		s.ls[e.who].Release(e.rtt, e.rtt, sampleOK)
		for _, l := range s.ls {
			total += l.State().limit
		}
		s.fill()
	}
	return float64(n) / (s.now - start).Seconds(), total / float64(n)
}

// TestIronicLimitSharedByConductors: conductors' limits on one Ironic,
// each seeing the others' queue in its latency, hold their sum near the
// knee (at most 1.5×) and the rate at 75 % of the best or more, on the
// Ironic bench ironic measured (newIronicServer) and on servers that
// punish every allocation past a higher knee (slope 2); the limits do not
// ratchet each other up.
func TestIronicLimitSharedByConductors(t *testing.T) {
	for _, tc := range []struct {
		knee, conductors, ceiling int
	}{{0, 2, 16}, {24, 2, 64}, {40, 4, 64}} {
		srv := newIronicServer()
		if tc.knee > 0 {
			srv = newKneeServer(tc.knee)
		}
		s := &multiSim{srv: srv}
		for range tc.conductors {
			s.ls = append(s.ls, newLimiter(tc.ceiling, true, nil))
		}
		s.run(2000)
		rate, sum := s.run(6000)
		t.Logf("knee %d, %d conductors, ceiling %d: limits' sum %.1f, rate %.1f/s (best %.1f/s, %.0f %%)",
			srv.knee, tc.conductors, tc.ceiling, sum, rate, srv.best(), 100*rate/srv.best())
		if rate < 0.75*srv.best() || sum > 1.5*float64(srv.knee) {
			t.Errorf("knee %d, %d conductors: limits' sum %.1f at %.1f/s, want at most 1.5× the knee and at least 75 %% of the best %.1f/s",
				srv.knee, tc.conductors, sum, rate, srv.best())
		}
	}
}

// clientSim is multiSim with a closed loop of clients instead of
// unbounded demand: each client sends an allocation through conductor
// (client mod conductors), waits for a slot in that conductor's limit,
// and once it settles thinks for think (its poll) before the next: the
// load, not the limit, often bounds what is in flight (bench ironic's 16
// clients polling every 100 ms).
type clientSim struct {
	ls      []*limiter
	srv     *kneeServer
	think   time.Duration
	now     time.Duration
	q       simQueue // settles (who: conductor) and wake-ups (who: -1-client)
	waiting [][]int  // per conductor, the clients waiting for a slot
	inFl    int
	// busy, when set, is the server's extra work at a virtual time.
	busy func(time.Duration) int
	// route, when set, is the conductor of a client (else client mod
	// conductors).
	route func(client int) int
}

// conductor is the conductor client sends through.
func (s *clientSim) conductor(client int) int {
	if s.route != nil {
		return s.route(client)
	}
	return client % len(s.ls)
}

func (s *clientSim) send(client int) {
	c := s.conductor(client)
	if !s.ls[c].TryAcquire() {
		s.waiting[c] = append(s.waiting[c], client)
		return
	}
	s.inFl++
	rtt := s.srv.latency(s.inFl)
	heap.Push(&s.q, simEvent{at: s.now + rtt, rtt: rtt, who: c*100000 + client})
}

// newClientSim is a clientSim of two conductors (ceilings 16) and
// clients that think 100 ms, the first sends 1 ms apart.
func newClientSim(srv *kneeServer, clients int) *clientSim {
	return newClientSimWith(srv, clients, func() *limiter { return newLimiter(16, true, nil) })
}

// newClientSimWith is newClientSim with the conductors' limiters made by
// newL.
func newClientSimWith(srv *kneeServer, clients int, newL func() *limiter) *clientSim {
	s := &clientSim{srv: srv, think: 100 * time.Millisecond, waiting: make([][]int, 2)}
	for range 2 {
		l := newL()
		l.clock = virtualClock(&s.now)
		s.ls = append(s.ls, l)
	}
	for c := range clients {
		heap.Push(&s.q, simEvent{at: time.Duration(c) * time.Millisecond, who: -1 - c})
	}
	return s
}

// run settles n allocations; rate and mean limits' sum.
func (s *clientSim) run(n int) (rate, meanSum float64) {
	return s.runUntil(func(done int) bool { return done >= n })
}

// runFor settles allocations for d of virtual time; rate and mean
// limits' sum.
func (s *clientSim) runFor(d time.Duration) (rate, meanSum float64) {
	end := s.now + d
	return s.runUntil(func(int) bool { return s.now >= end })
}

// runUntil settles allocations until enough(settled so far); rate and
// mean limits' sum. With s.busy set, the server's extra work follows it
// in virtual time.
func (s *clientSim) runUntil(enough func(done int) bool) (rate, meanSum float64) {
	start, total := s.now, 0.0
	done := 0
	for !enough(done) {
		e := heap.Pop(&s.q).(simEvent)
		s.now = e.at
		if s.busy != nil {
			s.srv.extra = s.busy(s.now)
		}
		if e.who < 0 {
			s.send(-1 - e.who)
			continue
		}
		c, client := e.who/100000, e.who%100000
		s.inFl--
		s.ls[c].Release(e.rtt, e.rtt, sampleOK)
		done++
		for _, l := range s.ls {
			total += l.State().limit
		}
		heap.Push(&s.q, simEvent{at: s.now + s.think, who: -1 - client})
		for len(s.waiting[c]) > 0 && s.ls[c].TryAcquire() {
			w := s.waiting[c][0]
			s.waiting[c] = s.waiting[c][1:]
			s.inFl++
			rtt := s.srv.latency(s.inFl)
			heap.Push(&s.q, simEvent{at: s.now + rtt, rtt: rtt, who: c*100000 + w})
		}
	}
	return float64(done) / (s.now - start).Seconds(), total / float64(max(done, 1))
}

// TestIronicLimitWithClients: with a closed loop of clients that think
// between allocations (too few of them to reach the limits, or many
// more), two conductors' limits follow the load and hold the Ironic bench
// ironic measured near its knee: the rate at 75 % of the best or more (or
// what the clients ask, when less), for 4, 16, 64 and 256 clients.
func TestIronicLimitWithClients(t *testing.T) {
	for _, clients := range []int{4, 16, 64, 256} {
		srv := newIronicServer()
		s := newClientSim(srv, clients)
		s.run(3000)
		rate, sum := s.run(10000)
		t.Logf("%d clients: limits' sum %.1f, rate %.1f/s (best %.1f/s, %.0f %%)", clients, sum, rate, srv.best(), 100*rate/srv.best())
		// A client asks at most once per round trip plus its thought.
		want := min(0.75*srv.best(), 0.75*float64(clients)/(srv.latency(1)+s.think).Seconds())
		if rate < want || sum > 1.5*float64(srv.knee)+2 {
			t.Errorf("%d clients: limits' sum %.1f at %.1f/s, want at most 1.5× the knee (+2) and at least %.1f/s", clients, sum, rate, want)
		}
	}
}

// TestIronicLimitSmallKnee: an Ironic that congests past a knee of 4 in
// flight in all (slope 2; bench ironic's Ironic peaks near 16): the
// conductors keep a small queue each (between limitQueueLow and
// limitQueueHigh allocations), so their limits' sum stays within the
// knee plus that, and the rate, though below the knee's, above half of
// it and at least a fixed limit at the ceiling's (66 % of the best and
// 1.25-1.33× the ceiling's, with the probes' cap; 56 % without it: the
// queue's price here, as probes no longer cascade; see the limiter's
// doc).
func TestIronicLimitSmallKnee(t *testing.T) {
	for _, clients := range []int{16, 64, 256} {
		srv := newKneeServer(4)
		srv.base = 100 * time.Millisecond
		s := newClientSim(srv, clients)
		s.run(3000)
		rate, sum := s.run(10000)
		fixed := newClientSimWith(newKneeServer(4), clients, func() *limiter { return newLimiter(16, false, nil) })
		fixed.srv.base = srv.base
		fixed.run(3000)
		fixedRate, _ := fixed.run(10000)
		bound := float64(srv.knee) + 2*(limitQueueHigh+2)
		t.Logf("%d clients: limits' sum %.1f, rate %.1f/s (best %.1f/s, %.0f %%; fixed at the ceiling %.1f/s)",
			clients, sum, rate, srv.best(), 100*rate/srv.best(), fixedRate)
		if rate < 0.5*srv.best() || rate < fixedRate || sum > bound {
			t.Errorf("%d clients: limits' sum %.1f at %.1f/s, want at most %.0f and at least half the best %.1f/s and the fixed ceiling's %.1f/s",
				clients, sum, rate, bound, srv.best(), fixedRate)
		}
	}
}

// TestIronicLimitPeriodicTask: an Ironic whose conductors are busy with
// work of their own for half of every minute (its power-state sync of
// every node: bench ironic's rate fell from 12 to 2/s for half a minute
// each minute at 2 in flight per conductor), where more allocations in
// flight get a larger share of the conductors: over whole minutes the
// adaptive limits reach 85 % or more of the best fixed limit's rate,
// found by sweeping it per conductor, for 16, 64 and 256 clients, and
// with more clients never fall below their rate with 16 (95 % of it:
// the model's noise). The model is coarse (it gives 86-97 % as the
// queue's bounds or the probes' period move); issue 44's 90 % is shown
// on the real Ironic by bench ironic (docs/benchmarks.md).
func TestIronicLimitPeriodicTask(t *testing.T) {
	busy := func(now time.Duration) int {
		if now%time.Minute < 30*time.Second {
			return 16
		}
		return 0
	}
	rateOf := func(clients int, newL func() *limiter) (rate, sum float64) {
		s := newClientSimWith(newIronicServer(), clients, newL)
		s.busy = busy
		s.runFor(2 * time.Minute)
		return s.runFor(10 * time.Minute)
	}
	var at16 float64
	for _, clients := range []int{16, 64, 256} {
		best, bestK := 0.0, 0
		for _, k := range []int{1, 2, 4, 8, 16} {
			if r, _ := rateOf(clients, func() *limiter { return newLimiter(k, false, nil) }); r > best {
				best, bestK = r, k
			}
		}
		rate, sum := rateOf(clients, func() *limiter { return newLimiter(16, true, nil) })
		if clients == 16 {
			at16 = rate
		}
		t.Logf("%d clients: adaptive %.1f/s (limits' sum %.1f), best fixed %d per conductor %.1f/s (%.0f %%)",
			clients, rate, sum, bestK, best, 100*rate/best)
		if rate < 0.85*best {
			t.Errorf("%d clients: adaptive %.1f/s, want at least 85 %% of the best fixed limit's %.1f/s (%d per conductor)", clients, rate, best, bestK)
		}
		if rate < 0.95*at16 {
			t.Errorf("%d clients: adaptive %.1f/s, want no less than with 16 clients (%.1f/s)", clients, rate, at16)
		}
	}
}

// newOneServer is the Ironic bench ironic measured on the machine of
// 2026-12-04 (2,000 nodes, 2 Ironic conductors): one queue, its rate flat
// from 4 in flight in all and falling a little beyond (fixed limits per
// conductor of 2, 4, 8 and 16: 36-42/s, Ironic's own time growing in
// proportion to what was in flight, fixed 8 at 88-94 % of fixed 2).
func newOneServer() *kneeServer {
	s := newKneeServer(4)
	s.base, s.gentle, s.slope = 100*time.Millisecond, 0, 1.2
	return s
}

// TestIronicLimitOneServer: on an Ironic whose rate is flat past a knee
// of 4 in flight in all (newOneServer), two conductors' probes find
// that the upper half of what they keep in flight gains nothing and cap
// their limits: the limits' sum stays under twice the knee (+2) and the
// rate at 85 % of the best fixed limit's or more, for 16, 64 and 256
// clients. The queue rule alone holds the knee plus 1-3 allocations per
// conductor (more, with each conductor's probe blinded by the other's
// load: bench ironic, 2026-12-04).
func TestIronicLimitOneServer(t *testing.T) {
	for _, clients := range []int{16, 64, 256} {
		best, bestK := 0.0, 0
		for _, k := range []int{1, 2, 3, 4, 8} {
			s := newClientSimWith(newOneServer(), clients, func() *limiter { return newLimiter(k, false, nil) })
			s.runFor(time.Minute)
			if r, _ := s.runFor(5 * time.Minute); r > best {
				best, bestK = r, k
			}
		}
		s := newClientSim(newOneServer(), clients)
		s.runFor(time.Minute)
		capped := 0
		rate, sum := s.runUntil(func(int) bool {
			if s.ls[0].State().capped > 0 {
				capped++
			}
			return s.now >= 6*time.Minute
		})
		t.Logf("%d clients: adaptive %.1f/s (limits' sum %.1f, capped in %d steps), best fixed %d per conductor %.1f/s (%.0f %%)",
			clients, rate, sum, capped, bestK, best, 100*rate/best)
		if rate < 0.85*best || sum > 2*float64(s.srv.knee)+2 || capped == 0 {
			t.Errorf("%d clients: limits' sum %.1f at %.1f/s, capped in %d steps: want at most %d, at least 85 %% of the best fixed limit's %.1f/s, and a cap",
				clients, sum, rate, capped, 2*s.srv.knee+2, best)
		}
	}
}

// TestIronicLimitProbesTogether: two conductors' probes overlap (each
// halves what it has in flight at the same time as the other, so that
// the baseline is Ironic's time with half the load, not three quarters
// of it), though one has twice the other's clients and its windows end
// at other times: of the time either probes, both do for at least half.
func TestIronicLimitProbesTogether(t *testing.T) {
	s := newClientSim(newIronicServer(), 12)
	s.route = func(client int) int { return min(client%3, 1) }
	s.runFor(time.Minute)
	var either, both time.Duration
	last := s.now
	s.runUntil(func(int) bool {
		a, b := s.ls[0].probing, s.ls[1].probing
		if a || b {
			either += s.now - last
		}
		if a && b {
			both += s.now - last
		}
		last = s.now
		return s.now >= 5*time.Minute
	})
	t.Logf("either probing %s, both %s", either, both)
	if either == 0 || both < either/2 {
		t.Errorf("either conductor probing for %s, both for %s: want both for at least half", either, both)
	}
}
