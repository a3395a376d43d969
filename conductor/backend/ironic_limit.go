package backend

import (
	"context"
	"math"
	"sync"
	"time"
)

// The adaptive limit on allocations in flight in Ironic (issue 44).
//
// Ironic answers POST /v1/allocations at once (201, state allocating) and
// hands the allocation to one of its conductors (an RPC cast); the work,
// and the queue when there is too much of it, is there: its conductors'
// workers, the node locks, its database. Past some concurrency (the
// knee) that queue grows and, as its conductors congest, Ironic settles
// fewer allocations per second, not just later: with 2 metalloc
// conductors and 64 clients, 10-11/s against 16-18/s with 16 clients
// (Ironic 21.4, 2 conductors, uWSGI API). A cap on HTTP requests in
// flight does not bound that queue (an allocation waiting between two
// reads holds no request), so the limit counts allocations in Ironic:
// a slot is taken before the POST and given back once the allocation is
// seen settled (or the attempt ends otherwise).
//
// The latency sample is Ironic's own settle time of the slot's
// allocation: its updated_at minus its created_at as Ironic shows it
// once settled (Allocation.InIronic), the time it spent in Ironic's RPC
// queue and conductor. That is where the queue builds, and nothing else
// is in it: the POST's and the reads' round trips and the pauses between
// reads (Ironic.poll), which the first measure of this limit, the
// "confirm latency" (from sending the POST to the read that finds the
// allocation settled), contained, grow with the load of the machine and
// the API, not with what is in flight, and add a constant that mutes the
// ratio the rule reads (bench ironic at 16 clients: the limits' sum at
// 8-22 where Ironic settled most with 4). Ironic on MySQL keeps whole
// seconds: until a timestamp with a fraction of a second is seen
// (Ironic.fineClock), the sample is the confirm latency. Samples are
// taken only from the plain path (201, then reads until settled); a 409
// that follows a copy already there, a refusal of the request itself,
// or an end of the context give none; an unreachable Ironic, a timeout
// or a 5xx is a drop.
//
// The rule is TCP Vegas's: keep a few allocations, between
// limitQueueLow and limitQueueHigh per conductor, waiting in Ironic
// beyond its time without a queue, with BBR's periodic probe of that
// time. Once per window (about one round trip: as many samples as the
// limit, at least limitMinWindow, from requests sent after the last
// change; those sent before saw the old limit), the window's queue is
// estimated by Little's law: its rate (the slots held over the slot
// time, their means over the window's samples) times what each sample
// waited beyond the baseline, the least window mean of the last
// limitHorizon windows. With q that estimate:
//
//   - q > limitQueueHigh (a queue in Ironic): the limit is multiplied by
//     limitQueueHigh/q, kept within [0.5, 0.9];
//   - the window never found the limit reached (the load, not the
//     limit, bounded what was in flight, and the samples say nothing
//     about more): it decays towards one above the most in flight, by
//     limitDecay at most;
//   - q between the two: the limit holds;
//   - q < limitQueueLow, and the window found the limit reached: it
//     grows by 1 (by sqrt(limit) at the start, after a drop or a rebase,
//     until the first decrease: quickly up to the knee, gently near it);
//   - a drop (Ironic unreachable, timed out, 5xx): it is halved at once,
//     and the drops of the requests then in flight are ignored, so that
//     a burst of failures halves it once.
//
// A queue bound in allocations, not a ratio of latencies, because of
// what Ironic is: bench ironic (2,000 nodes, runs of a whole minute,
// 2026-12-03) found its rate growing with what is in flight up to about
// 16 in all (fixed limits of 1, 2, 4, 8 and 16 per conductor: 9.9, 10.6,
// 14.2, 15.5 and 12.5/s with 256 clients) while its own settle time grew
// from the first (76, 118, 222, 456 ms, then 1.76 s). Part of an
// allocation's time in a slot is outside Ironic's queue (the POST's
// round trip, the pauses between reads), and Ironic's conductors share
// their time with its periodic tasks (its power-state sync of every
// node each minute), so a few more allocations in flight still gain
// rate where the latency has doubled: the first rule, which shrank the
// limit once the latency passed 1.25× the baseline, held the limits' sum
// at 4.6-7.9 and the rate at 63-89 % of the best fixed limit's. A queue of
// 1-3 allocations per conductor is where the measured Ironic does best
// (8 per conductor: 2.9 waiting each); on an Ironic that congests
// earlier it costs up to that many allocations past its knee
// (TestIronicLimitSmallKnee).
//
// The baseline is only right if some window ran without a queue: one
// that started above the knee (a congested Ironic, another conductor's
// load, a restart at a high limit) would take the queue for the
// baseline and never see r rise, and the sawtooth near the knee, always
// a little above it, would let the baseline creep up. So every
// limitProbeEvery windows, one window runs at half of what was in
// flight (the limit, or the last window's peak when the load kept below
// it: a probe at half a limit the load never reaches would lower
// nothing; a probe, as BBR's ProbeRTT). Its mean joins the horizon, so
// the baseline is at most Ironic's time with half as much in flight,
// and the limit then resumes where it was: if the probe found a queue,
// the next window's estimate shows it, and the rule cuts. A probe that
// finds the latency above limitRebase × the baseline shows that Ironic
// got slower without a queue: the baseline is restarted from it (a
// rebase), else the old minimum would hold the limit at the floor for a
// whole horizon. A probe costs about half a window of throughput in
// limitProbeEvery.
//
// A probe does not go on halving while each half finds a lower latency.
// It did at first (a gain of 1.5× halved again, down to 1 in flight, the
// limit resuming at the level above the last probe that gained nothing),
// but Ironic's latency falls with every allocation fewer in flight, so
// every probe found a "queue" all the way down: bench ironic's trace of
// the limits (16 clients, 2026-12-03) showed each conductor's limit
// falling to 1-2 every 10-20 s and growing back by one a window, the
// rate falling from 14-18/s to 3-6/s meanwhile and the client p99 at
// 5.5 s against fixed 8's 2.7 s. Without that, in three rounds, the
// limits' tenth percentile (sum over 2 conductors) rose from 6.6-6.8
// to 12.2-16.2 and the p99 fell to 3.1-4.4 s, against fixed 8's
// 2.8-3.7 s (docs/benchmarks.md). Against an Ironic that congests past
// a small knee the cascade found the queue sooner
// (TestIronicLimitSmallKnee: 64 % of the best rate, 56 % without), at
// the price of the measured one's rate.
//
// The limit stays within [min(limitFloor, ceiling), ceiling] (a probe
// may go down to 1), ceiling being ironic.max_in_flight, and starts at
// ceiling/4 (at least the floor). With a fixed limit
// (ironic.adaptive_limit false) it stays at the ceiling and only
// measures.
//
// Each conductor has its own limit. The sum over conductors is bounded
// by conductors × ironic.max_in_flight; they all see the same Ironic, so
// the same latency, and, like TCP Vegas flows sharing a link, each keeps
// its own few allocations queued: together they hold Ironic a little
// past its knee (conductors × 1-3 allocations queued) and share it
// evenly. A limit shared through the database would cost a
// round trip per allocation and tie Ironic's pacing to the database's
// health, for no better signal.
const (
	// limitFloor is the least limit: one allocation sent while another
	// is read.
	limitFloor = 2
	// limitMinWindow is the fewest samples of a window.
	limitMinWindow = 4
	// limitHorizon is how many windows the baseline's minimum spans.
	limitHorizon = 24
	// limitProbeEvery is how many windows pass between probes.
	limitProbeEvery = 12
	// limitQueueLow and limitQueueHigh bound the allocations a
	// conductor keeps waiting in Ironic (the window's queue estimate):
	// below the first the limit grows, above the second it shrinks.
	limitQueueLow  = 1.0
	limitQueueHigh = 3.0
	// limitRebase is the ratio of a probe's mean to the baseline above
	// which the probe, gaining nothing, restarts the baseline.
	limitRebase = 1.25
	// limitDecay is the most a window whose load kept below the limit
	// lowers it (a factor).
	limitDecay = 0.9
)

// sampleKind is what one slot's end says about Ironic.
type sampleKind int

const (
	// sampleNone: no latency to learn from (a 409 followed, a refusal, the
	// context's end).
	sampleNone sampleKind = iota
	// sampleOK: the allocation was created and seen settled; the sample
	// is its latency (Ironic's own settle time, or the confirm latency).
	sampleOK
	// sampleDrop: Ironic unreachable, timed out or answering 5xx.
	sampleDrop
)

// limitState is a limiter's state for metrics.
type limitState struct {
	// limit is the current limit (allocations); inFlight the slots taken,
	// waiting the callers waiting for one.
	limit             float64
	inFlight, waiting int
	// baseline is the sample without a queue the limit compares with (0
	// before the first window).
	baseline time.Duration
	// queue is the last window's estimate of the allocations waiting in
	// Ironic beyond the baseline (queue()).
	queue float64
}

// limiter is the adaptive limit on allocations in flight in Ironic (the
// rule above). Its zero value is not usable: newLimiter.
type limiter struct {
	mu       sync.Mutex
	adaptive bool
	floor    int
	ceiling  int
	limit    float64
	inFlight int
	waiters  []*limitWaiter
	// skip counts the releases still to ignore after a change: the
	// requests then in flight were sent under the old limit.
	skip int
	// The current window: samples, their sum, the sum of their slots'
	// times and of the slots held at each sample's end, and the most
	// slots held.
	n       int
	sum     time.Duration
	slotSum time.Duration
	heldSum int
	peak    int
	// lastQueue is the last window's queue estimate.
	lastQueue float64
	// means are the last limitHorizon window means (a ring, next the
	// index of the next).
	means []time.Duration
	next  int
	// dropped is true from a halving for a drop to the next change: the
	// drops of the requests then in flight are ignored.
	dropped bool
	// fast is true until the first decrease, and again after a drop or a
	// rebase: growth by sqrt(limit).
	fast bool
	// windows counts the windows since the last probe; probing is true
	// during one, restore is the limit it resumes at.
	windows int
	probing bool
	restore float64
	// report, when set, is told every change of state (metrics); called
	// with mu held.
	report func(limitState)
}

// limitWaiter is one Acquire waiting for a slot; granted when the slot
// is its own (ch closed).
type limitWaiter struct {
	ch      chan struct{}
	granted bool
}

// newLimiter returns a limiter with the given ceiling (at least 1);
// adaptive false keeps the limit at the ceiling.
func newLimiter(ceiling int, adaptive bool, report func(limitState)) *limiter {
	ceiling = max(ceiling, 1)
	l := &limiter{adaptive: adaptive, ceiling: ceiling, floor: min(limitFloor, ceiling), fast: true, report: report}
	l.limit = float64(ceiling)
	if adaptive {
		l.limit = float64(max(ceiling/4, l.floor))
	}
	l.changed()
	return l
}

// allowed is the whole number of slots the limit gives.
func (l *limiter) allowed() int { return max(int(l.limit), 1) }

// Acquire takes a slot, waiting in turn while the limit is reached; it
// returns ctx's error if ctx ends first (then no slot is held).
func (l *limiter) Acquire(ctx context.Context) error {
	l.mu.Lock()
	if len(l.waiters) == 0 && l.inFlight < l.allowed() {
		l.take()
		l.changed()
		l.mu.Unlock()
		return nil
	}
	w := &limitWaiter{ch: make(chan struct{})}
	l.waiters = append(l.waiters, w)
	l.changed()
	l.mu.Unlock()
	select {
	case <-w.ch:
		return nil
	case <-ctx.Done():
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if w.granted {
		// Granted as ctx ended: the slot goes to the next.
		l.inFlight--
	} else {
		for i, o := range l.waiters {
			if o == w {
				l.waiters = append(l.waiters[:i], l.waiters[i+1:]...)
				break
			}
		}
	}
	l.wake()
	l.changed()
	return ctx.Err()
}

// TryAcquire takes a slot if one is free now and nobody waits.
func (l *limiter) TryAcquire() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.waiters) > 0 || l.inFlight >= l.allowed() {
		return false
	}
	l.take()
	l.changed()
	return true
}

// take holds one more slot (mu held).
func (l *limiter) take() {
	l.inFlight++
	l.peak = max(l.peak, l.inFlight)
}

// Release gives back a slot taken by Acquire, with what its span says
// (kind) and, for sampleOK, its latency sample rtt and the slot's own
// time (Acquire to Release; at least rtt).
func (l *limiter) Release(rtt, slot time.Duration, kind sampleKind) {
	l.mu.Lock()
	defer l.mu.Unlock()
	held := l.inFlight
	l.inFlight--
	skipped := l.skip > 0
	if skipped {
		l.skip--
	}
	if l.adaptive {
		switch {
		case kind == sampleDrop && !(skipped && l.dropped):
			// Requests sent before a halving for a drop fail alike: one
			// halving for the lot.
			if l.probing {
				l.limit, l.probing = l.restore, false
			}
			l.fast = true
			l.set(l.limit / 2)
			l.dropped = true
		case kind == sampleOK && !skipped:
			l.n++
			l.sum += rtt
			l.slotSum += max(slot, rtt)
			l.heldSum += held
			if l.n >= max(l.allowed(), limitMinWindow) {
				l.endWindow()
			}
		}
	}
	l.wake()
	l.changed()
}

// endWindow applies the rule to the window just filled (mu held).
func (l *limiter) endWindow() {
	mean := l.sum / time.Duration(l.n)
	if l.probing {
		l.endProbe(mean)
		return
	}
	l.push(mean)
	q := l.queue(mean)
	l.lastQueue = q
	peak := l.peak
	reached := peak >= l.allowed()
	switch {
	case q > limitQueueHigh:
		l.fast = false
		l.set(l.limit * min(max(limitQueueHigh/q, 0.5), 0.9))
	case !reached:
		// The load, not the limit, bounded what was in flight: the limit
		// decays towards one above the most the window held (as TCP's
		// window does while the application sends less, RFC 7661), so
		// that it binds again when the load comes back and its probes
		// lower what is in flight. A limit far above the load would
		// neither hold Ironic at its knee then nor let a probe find the
		// queue (bench ironic, 16 clients: a limit of 14 over 5.6 in
		// flight, at 76 % of the best fixed limit's rate).
		if v := max(float64(l.peak+1), l.limit*limitDecay); v < l.limit {
			l.set(v)
		} else {
			l.restart()
		}
	case q >= limitQueueLow:
		// Between the two: Ironic is kept busy with a small queue; the
		// limit holds.
		l.restart()
	case l.fast:
		l.set(l.limit + math.Sqrt(l.limit))
	default:
		l.set(l.limit + 1)
	}
	// A probe halves what was in flight, the limit or, when the load kept
	// below it, the window's peak: a probe at half a limit the load never
	// reaches would change nothing and find no queue.
	if l.windows++; l.windows >= limitProbeEvery && peak >= 2 {
		l.windows, l.probing, l.restore = 0, true, min(l.limit, float64(peak))
		l.change(l.restore / 2)
	}
}

// endProbe ends a probe window of mean (mu held): the mean joins the
// horizon, after a rebase if Ironic got slower, and the limit resumes.
func (l *limiter) endProbe(mean time.Duration) {
	if float64(mean) > float64(l.baseline())*limitRebase {
		l.means, l.next, l.fast = nil, 0, true
	}
	l.push(mean)
	l.probing = false
	l.set(l.restore)
}

// push adds a window mean to the horizon (mu held).
func (l *limiter) push(mean time.Duration) {
	if len(l.means) < limitHorizon {
		l.means = append(l.means, mean)
	} else {
		l.means[l.next] = mean
		l.next = (l.next + 1) % limitHorizon
	}
}

// set changes the limit to v, within its bounds (mu held; change).
func (l *limiter) set(v float64) {
	l.change(min(max(v, float64(l.floor)), float64(l.ceiling)))
}

// change sets the limit to v and starts a window after the requests now
// in flight (mu held).
func (l *limiter) change(v float64) {
	l.limit = max(v, 1)
	l.skip, l.dropped = l.inFlight, false
	l.n, l.sum, l.slotSum, l.heldSum, l.peak = 0, 0, 0, 0, 0
}

// restart starts a window at the same limit, with the requests now in
// flight (mu held).
func (l *limiter) restart() {
	l.n, l.sum, l.slotSum, l.heldSum, l.peak = 0, 0, 0, 0, l.inFlight
}

// queue is the window's estimate of this limiter's allocations waiting
// in Ironic, its mean sample being mean (mu held): by Little's law the
// window's rate is the slots held over the slot time (their means), and
// each allocation waited mean − baseline beyond Ironic's time without a
// queue.
func (l *limiter) queue(mean time.Duration) float64 {
	if l.n == 0 || l.slotSum <= 0 {
		return 0
	}
	held := float64(l.heldSum) / float64(l.n)
	rate := held / (l.slotSum / time.Duration(l.n)).Seconds()
	return rate * max(mean-l.baseline(), 0).Seconds()
}

// baseline is the least window mean of the horizon (0 before the first).
func (l *limiter) baseline() time.Duration {
	var b time.Duration
	for i, m := range l.means {
		if i == 0 || m < b {
			b = m
		}
	}
	return b
}

// wake grants free slots to the waiters in turn (mu held).
func (l *limiter) wake() {
	for len(l.waiters) > 0 && l.inFlight < l.allowed() {
		w := l.waiters[0]
		l.waiters = l.waiters[1:]
		w.granted = true
		l.take()
		close(w.ch)
	}
}

// State is the limiter's state now.
func (l *limiter) State() limitState {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.state()
}

func (l *limiter) state() limitState {
	return limitState{limit: l.limit, inFlight: l.inFlight, waiting: len(l.waiters), baseline: l.baseline(), queue: l.lastQueue}
}

// changed reports the state (mu held).
func (l *limiter) changed() {
	if l.report != nil {
		l.report(l.state())
	}
}
