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
	s.fill()
	start := s.now
	total := 0.0
	for range n {
		e := heap.Pop(&s.q).(simEvent)
		s.now = e.at
		s.ls[e.who].Release(e.rtt, sampleOK)
		for _, l := range s.ls {
			total += l.State().limit
		}
		s.fill()
	}
	return float64(n) / (s.now - start).Seconds(), total / float64(n)
}

// TestIronicLimitSharedByConductors: conductors' limits on one Ironic,
// each seeing the others' queue in its latency, hold their sum near the
// knee (at most 1.5×) and the rate at 75 % of the best or more, on a
// server that punishes every allocation past its knee (slope 2), from a
// knee at the conductors' floors together (bench ironic on 2 cores:
// Ironic settled most with 2-4 allocations in flight in all) to a high
// one; the limits do not ratchet each other up.
func TestIronicLimitSharedByConductors(t *testing.T) {
	for _, tc := range []struct {
		knee, conductors, ceiling int
	}{{4, 2, 16}, {8, 2, 16}, {24, 2, 64}, {40, 4, 64}} {
		srv := newKneeServer(tc.knee)
		s := &multiSim{srv: srv}
		for range tc.conductors {
			s.ls = append(s.ls, newLimiter(tc.ceiling, true, nil))
		}
		s.run(2000)
		rate, sum := s.run(6000)
		t.Logf("knee %d, %d conductors, ceiling %d: limits' sum %.1f, rate %.1f/s (best %.1f/s, %.0f %%)",
			tc.knee, tc.conductors, tc.ceiling, sum, rate, srv.best(), 100*rate/srv.best())
		if rate < 0.75*srv.best() || sum > 1.5*float64(tc.knee) {
			t.Errorf("knee %d, %d conductors: limits' sum %.1f at %.1f/s, want at most 1.5× the knee and at least 75 %% of the best %.1f/s",
				tc.knee, tc.conductors, sum, rate, srv.best())
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
}

func (s *clientSim) send(client int) {
	c := client % len(s.ls)
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
	s := &clientSim{srv: srv, think: 100 * time.Millisecond, waiting: make([][]int, 2)}
	for range 2 {
		s.ls = append(s.ls, newLimiter(16, true, nil))
	}
	for c := range clients {
		heap.Push(&s.q, simEvent{at: time.Duration(c) * time.Millisecond, who: -1 - c})
	}
	return s
}

// run settles n allocations; rate and mean limits' sum.
func (s *clientSim) run(n int) (rate, meanSum float64) {
	start, total := s.now, 0.0
	for done := 0; done < n; {
		e := heap.Pop(&s.q).(simEvent)
		s.now = e.at
		if e.who < 0 {
			s.send(-1 - e.who)
			continue
		}
		c, client := e.who/100000, e.who%100000
		s.inFl--
		s.ls[c].Release(e.rtt, sampleOK)
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
	return float64(n) / (s.now - start).Seconds(), total / float64(n)
}

// TestIronicLimitWithClients: with a closed loop of clients that think
// between allocations (too few of them to reach the limits, or many
// more), two conductors' limits follow the load and hold Ironic near its
// knee: the rate at 75 % of the best or more (or what the clients ask,
// when less), for 4, 16, 64 and 256 clients.
func TestIronicLimitWithClients(t *testing.T) {
	for _, clients := range []int{4, 16, 64, 256} {
		srv := newKneeServer(4)
		srv.base = 100 * time.Millisecond
		s := newClientSim(srv, clients)
		s.run(3000)
		rate, sum := s.run(10000)
		t.Logf("%d clients: limits' sum %.1f, rate %.1f/s (best %.1f/s, %.0f %%)", clients, sum, rate, srv.best(), 100*rate/srv.best())
		// A client asks at most once per round trip plus its thought.
		want := min(0.75*srv.best(), 0.75*float64(clients)/(srv.base+s.think).Seconds())
		if rate < want || sum > 1.5*float64(srv.knee)+2 {
			t.Errorf("%d clients: limits' sum %.1f at %.1f/s, want at most 1.5× the knee (+2) and at least %.1f/s", clients, sum, rate, want)
		}
	}
}

// TestIronicLimitQueueFromTheFloors: an Ironic whose latency grows with
// every allocation in flight from fewer than the conductors' floors
// together (bench ironic on 2 cores: Ironic settled most with 2-4 in
// flight in all, 94 ms at 2.2, 226 ms at 4.6, 485 ms at 8), with 16 to
// 256 clients: the conductors' limits stay near their floors, the best
// they can do there, and the rate at 90 % of the floors' or more.
func TestIronicLimitQueueFromTheFloors(t *testing.T) {
	for _, clients := range []int{16, 64, 256} {
		srv := newKneeServer(2)
		srv.base, srv.slope = 100*time.Millisecond, 1.3
		s := newClientSim(srv, clients)
		s.run(3000)
		rate, sum := s.run(10000)
		floors := srv.rate(2 * limitFloor)
		t.Logf("%d clients: limits' sum %.1f, rate %.1f/s (at the floors %.1f/s, %.0f %%)", clients, sum, rate, floors, 100*rate/floors)
		if rate < 0.9*floors || sum > 2*limitFloor+2 {
			t.Errorf("%d clients: limits' sum %.1f at %.1f/s, want at most the floors (%d) + 2 and at least 90 %% of %.1f/s",
				clients, sum, rate, 2*limitFloor, floors)
		}
	}
}
