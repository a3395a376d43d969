package conductor

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"

	"github.com/metalloc/metalloc/conductor/backend"
)

// The worker loop and the claim gate without a database: a fake backend and
// fake rows, and the fake clock of testing/synctest (time.Now, timers and
// tickers in a bubble advance only when every goroutine of the bubble is
// blocked; synctest.Wait returns once they are). Each test states what the
// loop must do at which instant of that clock.

// fakeBackend is a backend.Backend whose claims answer from a script: the
// i-th Claim gets batches[i] rows (or err), later ones none.
type fakeBackend struct {
	mu      sync.Mutex
	batches []int
	errs    []error
	claims  []time.Duration // when each Claim ran, since start
	start   time.Time
	rest    bool // claimed rows come back unreserved (to Process)
	// process, when set, runs in Process (default: Reserved at once).
	process   func(ctx context.Context, c *backend.Claimed) (backend.Outcome, error)
	processed atomic.Int32
}

func (f *fakeBackend) Claim(ctx context.Context, me int64, n int) (reserved, rest []backend.Claimed, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	i := len(f.claims)
	f.claims = append(f.claims, time.Since(f.start))
	if i < len(f.errs) && f.errs[i] != nil {
		return nil, nil, f.errs[i]
	}
	got := 0
	if i < len(f.batches) {
		got = min(f.batches[i], n)
	}
	rows := make([]backend.Claimed, got)
	for k := range rows {
		rows[k] = backend.Claimed{ID: int64(1000*i + k + 1), UUID: uuid.New(), CreatedAt: time.Now()}
	}
	if f.rest {
		return nil, rows, nil
	}
	return rows, nil, nil
}

func (f *fakeBackend) Process(ctx context.Context, me int64, c *backend.Claimed) (backend.Outcome, error) {
	f.processed.Add(1)
	if f.process != nil {
		return f.process(ctx, c)
	}
	return backend.Reserved, nil
}

// claimTimes is when each claim ran so far.
func (f *fakeBackend) claimTimes() []time.Duration {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]time.Duration(nil), f.claims...)
}

// fakeRows is a rowStore with nothing to resume, take over or release
// unless told; it counts the resumes.
type fakeRows struct {
	owned   []backend.Claimed
	resumes atomic.Int32
}

func (r *fakeRows) Owned(context.Context, int64) ([]backend.Claimed, error) {
	r.resumes.Add(1)
	return r.owned, nil
}
func (r *fakeRows) OwnedGroups(context.Context, int64) ([]backend.ClaimedGroup, error) {
	return nil, nil
}
func (r *fakeRows) ClaimGroups(context.Context, int64, int) ([]backend.ClaimedGroup, error) {
	return nil, nil
}
func (r *fakeRows) DeadOwners(context.Context, int64) ([]DeadOwner, error) { return nil, nil }
func (r *fakeRows) TakeOver(context.Context, int64, DeadOwner, int) ([]backend.Claimed, int, error) {
	return nil, 0, nil
}
func (r *fakeRows) TakeOverGroups(context.Context, int64, DeadOwner, int) ([]backend.ClaimedGroup, int, error) {
	return nil, 0, nil
}
func (r *fakeRows) Release(context.Context, int64) (int64, error) { return 0, nil }

// loopCfg is a one-worker configuration with round numbers.
func loopCfg() Config {
	return Config{Hostname: "unit", Workers: 1, ClaimBatch: 4, PollInterval: time.Second,
		ClaimDelay: 15 * time.Millisecond, ShutdownGrace: 30 * time.Second}.WithDefaults()
}

// startLoop runs the worker loop of a Service on fakes in the current
// bubble; stop ends it and waits for it.
func startLoop(t *testing.T, cfg Config, be *fakeBackend, rows *fakeRows) (svc *Service, wake chan struct{}, stop func()) {
	t.Helper()
	be.start = time.Now()
	svc = newService(cfg, rows, be, fakeGroups{}, zaptest.NewLogger(t))
	svc.signals = newTestSignals(64)
	svc.needResume.Store(true) // as Run does
	wake = make(chan struct{}, 1)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	procCtx, cancelProc := afterStop(ctx, cfg.ShutdownGrace)
	go func() { defer close(done); defer cancelProc(); svc.work(ctx, procCtx, wake) }()
	return svc, wake, func() { cancel(); <-done }
}

type fakeGroups struct{}

func (fakeGroups) Process(context.Context, int64, backend.ClaimedGroup) (backend.Outcome, error) {
	return backend.Reserved, nil
}

func TestClaimGateAdmitsAtMostMaxAndLosesNoClaim(t *testing.T) {
	t.Parallel()
	g := newClaimGate(2)
	require.True(t, g.enter())
	require.True(t, g.enter())
	require.False(t, g.enter(), "a third claimer is refused")
	require.True(t, g.leave(), "the first to leave claims again for the refused one")
	require.False(t, g.leave(), "one claim again is enough")
	require.True(t, g.enter())
	require.False(t, g.leave())

	// Racing workers that behave as the loop does (a leave that says again
	// enters again): never more than max inside, and no refused claim is
	// lost: the last refusal is followed by a claim that starts after it
	// (the refused worker relies on it to take its rows).
	const workers, rounds = 8, 2000
	g = newClaimGate(2)
	var inside, most atomic.Int32
	var seq, lastRefusal, lastEntry atomic.Int64
	raise := func(v *atomic.Int64, n int64) {
		for m := v.Load(); n > m && !v.CompareAndSwap(m, n); m = v.Load() {
		}
	}
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range rounds {
				for again := true; again; {
					if !g.enter() {
						raise(&lastRefusal, seq.Add(1))
						break
					}
					raise(&lastEntry, seq.Add(1))
					n := inside.Add(1)
					for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
					}
					inside.Add(-1)
					again = g.leave()
				}
			}
		}()
	}
	wg.Wait()
	require.LessOrEqual(t, most.Load(), int32(2))
	require.Greater(t, lastEntry.Load(), lastRefusal.Load(), "the last refused claim was never taken up")
	require.False(t, g.pending.Load(), "a pending claim was left behind")
}

// A full batch is claimed again at once; a short one waits for the poll
// tick; a notification claims after ClaimDelay.
func TestWorkerLoopClaimsAgainWaitsAndWakes(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		cfg := loopCfg()
		be := &fakeBackend{batches: []int{4, 4, 2}}
		_, wake, stop := startLoop(t, cfg, be, &fakeRows{})
		defer stop()
		synctest.Wait()
		require.Equal(t, []time.Duration{0, 0, 0}, be.claimTimes(), "two full batches, then a short one, at once")

		time.Sleep(cfg.PollInterval - time.Millisecond)
		synctest.Wait()
		require.Len(t, be.claimTimes(), 3, "nothing before the poll tick")
		time.Sleep(time.Millisecond)
		synctest.Wait()
		require.Equal(t, cfg.PollInterval, be.claimTimes()[3], "the poll tick claims")

		at := time.Since(be.start)
		wake <- struct{}{}
		synctest.Wait()
		require.Len(t, be.claimTimes(), 4, "a notification waits ClaimDelay for the burst")
		time.Sleep(cfg.ClaimDelay)
		synctest.Wait()
		require.Equal(t, at+cfg.ClaimDelay, be.claimTimes()[4])
	})
}

// While the database is unavailable the worker backs off, doubling from
// 100 ms; the first answer resets the backoff and asks for a resume.
func TestWorkerLoopBacksOffWhileTheDatabaseIsDown(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		down := fmt.Errorf("claiming: %w", syscall.ECONNREFUSED)
		be := &fakeBackend{errs: []error{down, down, down, down, nil}}
		rows := &fakeRows{}
		svc, _, stop := startLoop(t, loopCfg(), be, rows)
		defer stop()
		time.Sleep(1600 * time.Millisecond)
		synctest.Wait()
		ms := time.Millisecond
		require.Equal(t, []time.Duration{0, 100 * ms, 300 * ms, 700 * ms, 1500 * ms}, be.claimTimes()[:5])
		require.False(t, svc.dbDown.Load())
		require.EqualValues(t, 2, rows.resumes.Load(), "resumed at start and once the database answered")
	})
}

// Rows claimed but not reserved are processed by the claiming worker, one
// by one, each signalled; queued rows (resumed, taken over) too.
func TestWorkerLoopProcessesTheRest(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		be := &fakeBackend{batches: []int{3}, rest: true}
		queued := backend.Claimed{ID: 7, UUID: uuid.New()}
		svc, _, stop := startLoop(t, loopCfg(), be, &fakeRows{owned: []backend.Claimed{queued}})
		defer stop()
		synctest.Wait()
		require.EqualValues(t, 4, be.processed.Load())
		require.Equal(t, 3, <-svc.signals.claimed)
		seen := map[uuid.UUID]bool{}
		for range 4 {
			seen[<-svc.signals.reserving] = true
		}
		require.True(t, seen[queued.UUID], "the resumed row was processed")
	})
}

// A claim statement that claimed rows but could not read them back asks for
// a resume, which the next round runs.
func TestWorkerLoopResumesUnreadClaims(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		be := &fakeBackend{errs: []error{nil, fmt.Errorf("%w: reading: boom", backend.ErrClaimedUnread)},
			batches: []int{4, 0, 0}}
		rows := &fakeRows{}
		cfg := loopCfg()
		_, _, stop := startLoop(t, cfg, be, rows)
		defer stop()
		synctest.Wait()
		require.EqualValues(t, 1, rows.resumes.Load(), "at start")
		require.Len(t, be.claimTimes(), 2, "a full batch, then the unread one")
		time.Sleep(cfg.PollInterval)
		synctest.Wait()
		require.EqualValues(t, 2, rows.resumes.Load(), "the next round resumes the unread rows")
		require.Len(t, be.claimTimes(), 3)
	})
}

// On stop, a row being processed gets ShutdownGrace; then its context
// ends and the loop returns.
func TestWorkerLoopStopGivesInFlightRowsTheGrace(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		cfg := loopCfg()
		var cancelledAt time.Duration
		be := &fakeBackend{batches: []int{1}, rest: true}
		be.process = func(ctx context.Context, c *backend.Claimed) (backend.Outcome, error) {
			<-ctx.Done()
			cancelledAt = time.Since(be.start)
			return backend.Lost, ctx.Err()
		}
		_, _, stop := startLoop(t, cfg, be, &fakeRows{})
		synctest.Wait()
		time.Sleep(time.Second)
		stop()
		require.Equal(t, time.Second+cfg.ShutdownGrace, cancelledAt)
	})
}

// Rows that wait for a locked node (Process said Waiting) hold no worker:
// one worker starts every row of its batches at once, they wait together,
// each is processed again when its Retry is up, and once the nodes are
// free every one is done at the same instant. The waiting rows stay in
// flight meanwhile (a resume does not queue them twice).
func TestWorkerLoopParksWaitingRows(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		const retry = 100 * time.Millisecond
		be := &fakeBackend{batches: []int{4, 4}, rest: true}
		var mu sync.Mutex
		calls := map[uuid.UUID][]time.Duration{}
		var free atomic.Bool
		be.process = func(ctx context.Context, c *backend.Claimed) (backend.Outcome, error) {
			mu.Lock()
			calls[c.UUID] = append(calls[c.UUID], time.Since(be.start))
			mu.Unlock()
			if free.Load() {
				return backend.Reserved, nil
			}
			if !c.Wait.Waiting() {
				c.Wait.Since = time.Now()
			}
			c.Wait.Retry = retry
			return backend.Waiting, nil
		}
		svc, _, stop := startLoop(t, loopCfg(), be, &fakeRows{})
		defer stop()
		synctest.Wait()
		require.Len(t, svc.signals.waiting, 8, "every row of both batches waits")
		require.Len(t, svc.signals.reserving, 8)
		times := func() map[uuid.UUID][]time.Duration {
			mu.Lock()
			defer mu.Unlock()
			out := map[uuid.UUID][]time.Duration{}
			for u, ts := range calls {
				out[u] = slices.Clone(ts)
			}
			return out
		}
		for u, ts := range times() {
			require.Equal(t, []time.Duration{0}, ts, "row %s", u)
		}
		inflight := func() (n int) {
			svc.inflight.Range(func(any, any) bool { n++; return true })
			return n
		}
		require.Equal(t, 8, inflight())

		time.Sleep(retry)
		synctest.Wait()
		for u, ts := range times() {
			require.Equal(t, []time.Duration{0, retry}, ts, "row %s", u)
		}
		require.Len(t, svc.signals.waiting, 8, "a row signals the start of its wait once")
		require.Len(t, svc.signals.reserving, 8, "and the start of its processing once")

		free.Store(true)
		time.Sleep(retry)
		synctest.Wait()
		for u, ts := range times() {
			require.Equal(t, []time.Duration{0, retry, 2 * retry}, ts, "row %s", u)
		}
		require.Zero(t, inflight())
	})
}

// On stop, the rows waiting for a locked node are left owned and
// unfinished for Release: their waits end, and nothing processes them.
func TestWorkerLoopStopLeavesWaitingRows(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		be := &fakeBackend{batches: []int{3}, rest: true}
		be.process = func(ctx context.Context, c *backend.Claimed) (backend.Outcome, error) {
			c.Wait.Since, c.Wait.Retry = time.Now(), time.Second
			return backend.Waiting, nil
		}
		svc, _, stop := startLoop(t, loopCfg(), be, &fakeRows{})
		synctest.Wait()
		require.EqualValues(t, 3, be.processed.Load())
		stop()
		time.Sleep(time.Minute)
		synctest.Wait()
		require.EqualValues(t, 3, be.processed.Load(), "a waiting row was processed after the stop")
		n := 0
		svc.inflight.Range(func(any, any) bool { n++; return true })
		require.Zero(t, n)
	})
}
