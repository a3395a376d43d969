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
// a little above it, would let the baseline creep up. So once per probe
// period, one window runs at half of what was in flight (the limit, or
// the last window's peak when the load kept below it: a probe at half a
// limit the load never reaches would lower nothing; a probe, as BBR's
// ProbeRTT). Its mean joins the baseline's minimum (beside the horizon's
// windows, the last limitProbeKeep probes'), so the baseline is at most
// Ironic's time with half as much in flight, and the limit then resumes
// where it was: if the probe found a queue, the next window's estimate
// shows it, and the rule cuts. A probe that finds the latency above
// limitRebase × the baseline shows that Ironic got slower without a
// queue: the baseline is restarted from it (a rebase), else the old
// minimum would hold the limit at the floor for a whole horizon.
//
// The conductors probe together. Each conductor's probe halved only its
// own allocations while the others kept theirs in Ironic, so its
// baseline was Ironic's time at three quarters of the load (2
// conductors), never without a queue: on an Ironic whose knee is at 4
// in flight in all (bench ironic, 2026-12-04) the limits' sum held
// 12-15, Ironic took 134-245 ms per allocation where 32-52 ms would
// do, for no more rate. So the probe period is the wall clock's: every
// conductor starts its probe at its first sample in each period (a
// power of two seconds from the Unix epoch, about limitProbeSlots slot
// times within [limitProbeMin, limitProbeMax], moved only when the slot
// time has moved by half a period or more, so that conductors whose slot
// times differ a little keep the same period; where they differ more,
// the longer period's boundaries are still the shorter's: pace), leaving
// the window under way unfinished, and its window counts only the
// samples of its second round of allocations (those sent once every
// conductor's allocations from before the period's start have settled).
// Starting at the next window's end instead, up to a window late, the
// conductors' counted samples often missed the others' probe, and the
// limits' sum stayed at 9-12 (bench ironic, 2026-12-05). Conductors'
// clocks agree within milliseconds (NTP); a conductor samples tens of
// times a second under load. A probe costs about a slot time's half
// rate per period where more in flight gains rate, nothing where it
// does not.
//
// A probe also tells whether the upper half of what was in flight gained
// anything, which Ironic's latency alone cannot: on the Ironic measured
// first, more in flight gained rate while its latency doubled; on the
// one measured later, the rate was flat from 4 in flight in all, and a
// queue of 1-3 allocations per conductor beyond its knee only added
// latency. Since every conductor halves at once, each one's share of
// Ironic stays, and its rate (by Little's law, the slots held over the
// latency sample: sampleRate) moves as Ironic's. The rate around the probe (the mean of
// the windows before and after it, so that a change of Ironic's pace,
// such as its periodic power-state sync, is not taken for the probe's
// effect) under (1 + limitGain) × the probe's says the upper half
// gained less than limitGain: a cap is set at limitCapCut × the limit,
// and the rule grows the limit no higher until a later probe shows a
// gain of twice that, each such probe raising the cap by limitCapRise
// (it is lifted at the ceiling; a window's rate is noisy, so a gain
// between the two leaves the cap where it is). On an Ironic flat from
// its knee K the cap settles between K and 2K in all (a probe at half
// of less than 2K gains), where the queue rule alone held K + 2-6 per
// conductor.
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
	// limitProbeMin and limitProbeMax bound the probes' period, a power
	// of two seconds from the Unix epoch near limitProbeSlots times the
	// running mean of the slot time (pace).
	limitProbeMin   = 2 * time.Second
	limitProbeMax   = 32 * time.Second
	limitProbeSlots = 16
	// limitPaceWeight is the weight of a window's mean slot time in the
	// running mean the probe period follows.
	limitPaceWeight = 0.1
	// limitProbeKeep is how many probe means the baseline's minimum spans
	// beside the horizon's windows.
	limitProbeKeep = 3
	// limitGain is the least gain in rate the upper half of what was in
	// flight must show in a probe (the rate around it over the probe's,
	// less 1); below it the cap is set at limitCapCut × the limit, above
	// twice it the cap rises by limitCapRise (between, it stays: a
	// window's rate is noisy).
	limitGain    = 0.15
	limitCapCut  = 0.75
	limitCapRise = 1.25
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
	// capped is the cap the probes set (0: none).
	capped float64
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
	// probes are the last limitProbeKeep probe means (a ring, nextProbe
	// the index of the next).
	probes    []time.Duration
	nextProbe int
	// probed is the clock's time at the last probe's start; probing is
	// true during one, restore is the limit it resumes at.
	probed  time.Time
	probing bool
	restore float64
	// slot is the running mean of the windows' slot times, period the
	// probe period it gives (pace); rate is the last window's rate
	// (allocations per second: sampleRate), probeRate the last probe's,
	// judging true from its end to the next window's, which judges it
	// (judge).
	slot      time.Duration
	period    time.Duration
	rate      float64
	probeRate float64
	judging   bool
	// capped is the cap the probes set on the limit's growth (0: none).
	capped float64
	// clock is the time now (time.Now; the simulations' virtual time).
	clock func() time.Time
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
	l := &limiter{adaptive: adaptive, ceiling: ceiling, floor: min(limitFloor, ceiling), fast: true, report: report, clock: time.Now}
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
	if l.adaptive && kind != sampleDrop && !l.probing && !l.judging && l.probeDue(l.clock()) && max(l.peak, held) >= 2 {
		l.probe(max(l.peak, held))
	} else if l.adaptive {
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
	peak := l.peak
	reached := peak >= l.allowed()
	q := l.queue(mean)
	l.lastQueue = q
	l.pace(l.slotSum / time.Duration(l.n))
	r := l.sampleRate()
	if l.judging {
		l.judge((l.rate + r) / 2)
	}
	l.rate = r
	if l.capped > 0 && l.limit > l.capped {
		// The last probe found the upper half gained nothing.
		l.set(l.capped)
		return
	}
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
		l.grow(l.limit + math.Sqrt(l.limit))
	default:
		l.grow(l.limit + 1)
	}
}

// probe starts a probe, the window under way left unfinished (mu held):
// it halves what was in flight, the limit or, when the load kept below
// it, the most held (peak): a probe at half a limit the load never
// reaches would change nothing and find no queue. Release starts it at
// the first sample in a new probe period, so that every conductor halves
// within a sample of the period's start (once the window after the last
// probe has judged it: judge); the first round of the probe's
// own allocations is not counted either, so that what is counted comes
// once every conductor's allocations sent before the period's start
// have settled.
func (l *limiter) probe(peak int) {
	l.probed, l.probing, l.restore = l.clock(), true, min(l.limit, float64(peak))
	l.change(l.restore / 2)
	l.skip += l.allowed()
}

// grow raises the limit to v, within the cap (mu held).
func (l *limiter) grow(v float64) {
	if l.capped > 0 {
		v = min(v, l.capped)
	}
	if v <= l.limit {
		l.restart()
		return
	}
	l.set(v)
}

// probeDue reports whether now is in a later probe period than the last
// probe's start (mu held): periods are powers of two seconds from the
// Unix epoch, so every conductor's boundaries are those of the longest.
func (l *limiter) probeDue(now time.Time) bool {
	p := max(l.period, limitProbeMin)
	return now.UnixNano()/int64(p) != l.probed.UnixNano()/int64(p)
}

// pace follows the slot time with a window's mean slot time (a running
// mean, weight limitPaceWeight) and moves the probe period with it, a
// power of two seconds within [limitProbeMin, limitProbeMax]: doubled
// once limitProbeSlots slot times pass 1.5 periods, halved once they
// fall under a third of one, so that conductors whose slot times differ
// a little keep the same period (mu held).
func (l *limiter) pace(slot time.Duration) {
	if l.slot == 0 {
		l.slot = slot
	} else {
		l.slot += time.Duration(limitPaceWeight * float64(slot-l.slot))
	}
	want := limitProbeSlots * l.slot
	if l.period == 0 {
		l.period = limitProbeMin
		for l.period < limitProbeMax && l.period < want {
			l.period *= 2
		}
		return
	}
	switch {
	case want > l.period*3/2 && l.period < limitProbeMax:
		l.period *= 2
	case want < l.period/3 && l.period > limitProbeMin:
		l.period /= 2
	}
}

// windowRate is the window's rate by Little's law: the slots held over
// the slot time, their means (mu held; 0 without samples).
func (l *limiter) windowRate() float64 { return l.rateOver(l.slotSum) }

// rateOver is the window's slots held over the mean of sum, a sum over
// its samples (mu held; 0 without samples).
func (l *limiter) rateOver(sum time.Duration) float64 {
	if l.n == 0 || sum <= 0 {
		return 0
	}
	return float64(l.heldSum) / (sum / time.Duration(l.n)).Seconds() / float64(l.n)
}

// endProbe ends a probe window of mean (mu held): the mean joins the
// horizon, after a rebase if Ironic got slower, and the limit resumes.
func (l *limiter) endProbe(mean time.Duration) {
	if float64(mean) > float64(l.baseline())*limitRebase {
		l.means, l.next, l.probes, l.nextProbe, l.fast = nil, 0, nil, 0, true
	}
	if len(l.probes) < limitProbeKeep {
		l.probes = append(l.probes, mean)
	} else {
		l.probes[l.nextProbe] = mean
		l.nextProbe = (l.nextProbe + 1) % limitProbeKeep
	}
	l.probing = false
	l.pace(l.slotSum / time.Duration(l.n))
	l.probeRate = l.sampleRate()
	l.judging = l.probeRate > 0 && l.rate > 0
	l.set(l.restore)
}

// judge moves the cap from the last probe: full is the rate around it
// (the mean of the windows before and after), against the probe's at
// half of what was in flight (mu held).
func (l *limiter) judge(full float64) {
	l.judging = false
	switch {
	case full < l.probeRate*(1+limitGain):
		l.capped = max(l.restore*limitCapCut, float64(l.floor))
	case l.capped > 0 && full > l.probeRate*(1+2*limitGain):
		l.capped *= limitCapRise
		if l.capped >= float64(l.ceiling) {
			l.capped = 0
		}
	}
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

// sampleRate is the window's rate by Little's law over the latency
// sample instead of the slot time: the slots held over the samples'
// mean (mu held; 0 without samples). The probes compare it: a slot also
// holds the wait for metalloc's first read, paced by a settle estimate
// that lags what Ironic does (Ironic.poll), so right after a probe
// halves what is in flight the slots stay long while Ironic is already
// faster, and their rate showed a gain where Ironic's rate was flat
// (bench ironic, 2026-12-05: the caps rose at every probe).
func (l *limiter) sampleRate() float64 { return l.rateOver(l.sum) }

// queue is the window's estimate of this limiter's allocations waiting
// in Ironic, its mean sample being mean (mu held): by Little's law the
// window's rate is the slots held over the slot time (their means), and
// each allocation waited mean − baseline beyond Ironic's time without a
// queue.
func (l *limiter) queue(mean time.Duration) float64 {
	return l.windowRate() * max(mean-l.baseline(), 0).Seconds()
}

// baseline is the least window mean of the horizon and of the last
// probes (0 before the first).
func (l *limiter) baseline() time.Duration {
	var b time.Duration
	for _, ms := range [][]time.Duration{l.means, l.probes} {
		for _, m := range ms {
			if b == 0 || m < b {
				b = m
			}
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
	return limitState{limit: l.limit, inFlight: l.inFlight, waiting: len(l.waiters), baseline: l.baseline(), queue: l.lastQueue, capped: l.capped}
}

// changed reports the state (mu held).
func (l *limiter) changed() {
	if l.report != nil {
		l.report(l.state())
	}
}
