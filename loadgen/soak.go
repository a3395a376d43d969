package loadgen

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
)

// SoakOptions configures Soak. Zero values take the defaults noted.
type SoakOptions struct {
	// Load is the enrolment and client set-up (APIURL, Nodes default 2000,
	// Classes, Concurrency default 8, Log, Progress).
	Load Options
	// Duration of the steady traffic (default 30m).
	Duration time.Duration
	// Rate is the total allocation requests per second aimed at (default 40).
	Rate float64
	// KillEvery is how often a conductor is SIGKILLed and restarted
	// (default 3m; 0 after defaults: never).
	KillEvery time.Duration
	// SampleEvery is how often every process's RSS and goroutines are
	// sampled (default 30s).
	SampleEvery time.Duration
	// KillConductor SIGKILLs one conductor and starts a replacement; it
	// returns a description of what it did.
	KillConductor func(ctx context.Context) (string, error)
	// RestartDatabase restarts PostgreSQL once, at half time (nil: never).
	RestartDatabase func(ctx context.Context) error
	// Processes lists the running processes to sample (name, pid and
	// metrics URL each), asked at every sample.
	Processes func() []SoakProcess
	// Check reads the database at the end: how many of the acknowledged
	// allocations (uuids) that the soak did not delete are missing, and how
	// many nodes are double-booked or otherwise break the invariants.
	Check func(ctx context.Context, kept []string) (lost, broken int, err error)
}

// SoakProcess is one process Soak samples.
type SoakProcess struct {
	Name       string
	PID        int
	MetricsURL string
}

// SoakSample is one process's resource use at one moment.
type SoakSample struct {
	At         time.Time
	RSSKiB     int64
	Goroutines int64
}

// SoakResult is what Soak saw.
type SoakResult struct {
	Requests, Created, Deleted, Active, Errored int64
	// Statuses counts every HTTP status clients got.
	Statuses map[int]int64
	// Unexpected5xx counts 5xx answers other than 503 during the database
	// restart (a 503 while PostgreSQL restarts is the documented answer;
	// clients retry it).
	Unexpected5xx int64
	// Lost and Broken are Check's counts.
	Lost, Broken int
	// Samples per process, in time order; Events, what was done when.
	Samples map[string][]SoakSample
	Events  []string
}

// Soak enrols nodes, then for o.Duration keeps allocations flowing (create,
// wait until active, delete) while a conductor is SIGKILLed and restarted
// every o.KillEvery and PostgreSQL is restarted once; it samples every
// process and checks the database at the end.
func Soak(ctx context.Context, o SoakOptions) (SoakResult, error) {
	if o.Load.Nodes <= 0 {
		o.Load.Nodes = 2000
	}
	if o.Load.Concurrency <= 0 {
		o.Load.Concurrency = 8
	}
	o.Load.setDefaults()
	if o.Duration <= 0 {
		o.Duration = 30 * time.Minute
	}
	if o.Rate <= 0 {
		o.Rate = 40
	}
	if o.SampleEvery <= 0 {
		o.SampleEvery = 30 * time.Second
	}
	log := o.Load.Log
	c := &client{base: strings.TrimRight(o.Load.APIURL, "/"), http: &http.Client{Timeout: 30 * time.Second}}
	if _, err := enrollBy(ctx, c, o.Load); err != nil {
		return SoakResult{}, fmt.Errorf("enrolling: %w", err)
	}
	res := SoakResult{Statuses: map[int]int64{}, Samples: map[string][]SoakSample{}}
	var mu sync.Mutex
	var dbDown atomic.Bool
	event := func(f string, a ...any) {
		msg := time.Now().UTC().Format("15:04:05") + " " + fmt.Sprintf(f, a...)
		mu.Lock()
		res.Events = append(res.Events, msg)
		mu.Unlock()
		log.Info("soak: " + fmt.Sprintf(f, a...))
	}
	status := func(s int) {
		mu.Lock()
		defer mu.Unlock()
		res.Requests++
		res.Statuses[s]++
		if s >= 500 && !(s == http.StatusServiceUnavailable && dbDown.Load()) {
			res.Unexpected5xx++
		}
	}
	// do sends one request, retrying 503s during the database restart as a
	// client would.
	do := func(ctx context.Context, method, path string, body, out any) (int, error) {
		for {
			s, err := c.do(ctx, method, path, body, out)
			if s != 0 {
				status(s)
			}
			if s == http.StatusServiceUnavailable && ctx.Err() == nil {
				time.Sleep(100 * time.Millisecond)
				continue
			}
			return s, err
		}
	}

	runCtx, stop := context.WithTimeout(ctx, o.Duration)
	defer stop()
	var kept []string // acknowledged and not deleted by the soak
	var keptMu sync.Mutex
	var wg sync.WaitGroup
	perClient := time.Duration(float64(o.Load.Concurrency) / o.Rate * float64(time.Second))
	for w := range o.Load.Concurrency {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tick := time.NewTicker(perClient)
			defer tick.Stop()
			for i := 0; runCtx.Err() == nil; i++ {
				select {
				case <-runCtx.Done():
					return
				case <-tick.C:
				}
				var a allocDoc
				body := map[string]any{"resource_class": className((w + i) % o.Load.Classes)}
				if s, err := do(runCtx, "POST", "/v1/allocations", body, &a); s != http.StatusCreated {
					if runCtx.Err() == nil {
						log.Warn("soak: POST failed", zap.Int("status", s), zap.Error(err))
					}
					continue
				}
				atomic.AddInt64(&res.Created, 1)
				state := waitDone(runCtx, do, a.UUID)
				switch state {
				case "active":
					atomic.AddInt64(&res.Active, 1)
				case "error":
					atomic.AddInt64(&res.Errored, 1)
				default: // the run ended first: kept, checked at the end
					keptMu.Lock()
					kept = append(kept, a.UUID)
					keptMu.Unlock()
					continue
				}
				if s, _ := do(context.WithoutCancel(runCtx), "DELETE", "/v1/allocations/"+a.UUID, nil, nil); s == http.StatusNoContent {
					atomic.AddInt64(&res.Deleted, 1)
				} else {
					keptMu.Lock()
					kept = append(kept, a.UUID)
					keptMu.Unlock()
				}
			}
		}()
	}

	// Faults and samples.
	sample := func() {
		for _, p := range o.Processes() {
			s := SoakSample{At: time.Now(), RSSKiB: rssKiB(p.PID), Goroutines: goroutines(c.http, p.MetricsURL)}
			key := fmt.Sprintf("%s (pid %d)", p.Name, p.PID)
			mu.Lock()
			res.Samples[key] = append(res.Samples[key], s)
			mu.Unlock()
		}
	}
	sample()
	started := time.Now()
	sampleT := time.NewTicker(o.SampleEvery)
	defer sampleT.Stop()
	var killC <-chan time.Time
	if o.KillEvery > 0 {
		kt := time.NewTicker(o.KillEvery)
		defer kt.Stop()
		killC = kt.C
	}
	restartAt := time.After(o.Duration / 2)
	if o.RestartDatabase == nil {
		restartAt = nil
	}
loop:
	for {
		select {
		case <-runCtx.Done():
			break loop
		case <-sampleT.C:
			sample()
			mu.Lock()
			n, c5 := res.Requests, res.Unexpected5xx
			mu.Unlock()
			o.Load.Progress("soak", int(time.Since(started)/time.Second), int(o.Duration/time.Second))
			log.Info("soak: progress", zap.Duration("elapsed", time.Since(started).Round(time.Second)),
				zap.Int64("requests", n), zap.Int64("created", atomic.LoadInt64(&res.Created)),
				zap.Int64("unexpected_5xx", c5))
		case <-killC:
			what, err := o.KillConductor(runCtx)
			if err != nil {
				event("killing a conductor failed: %v", err)
				continue
			}
			event("%s", what)
		case <-restartAt:
			dbDown.Store(true)
			event("restarting PostgreSQL")
			err := o.RestartDatabase(runCtx)
			// Give the pools a moment to notice before 503s count again.
			time.Sleep(2 * time.Second)
			dbDown.Store(false)
			event("PostgreSQL restarted (err: %v)", err)
		}
	}
	wg.Wait()
	sample()
	lost, broken, err := o.Check(ctx, kept)
	if err != nil {
		return res, fmt.Errorf("checking the database: %w", err)
	}
	res.Lost, res.Broken = lost, broken
	return res, nil
}

// waitDone polls allocation u until it is active or error, or ctx ends
// ("").
func waitDone(ctx context.Context, do func(context.Context, string, string, any, any) (int, error), u string) string {
	for ctx.Err() == nil {
		var a allocDoc
		if s, _ := do(ctx, "GET", "/v1/allocations/"+u, nil, &a); s == http.StatusOK && (a.State == "active" || a.State == "error") {
			return a.State
		}
		select {
		case <-ctx.Done():
		case <-time.After(20 * time.Millisecond):
		}
	}
	return ""
}

// rssKiB is a process's resident set (VmRSS), 0 when it cannot be read.
func rssKiB(pid int) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmRSS:" {
			n, _ := strconv.ParseInt(f[1], 10, 64)
			return n
		}
	}
	return 0
}

// goroutines reads go_goroutines from a Prometheus endpoint, -1 when it
// cannot.
func goroutines(hc *http.Client, url string) int64 {
	if url == "" {
		return -1
	}
	resp, err := hc.Get(url)
	if err != nil {
		return -1
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "go_goroutines "); ok {
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			if err == nil {
				return int64(f)
			}
		}
	}
	return -1
}

// Report is the soak's summary: counts, events, and first and last sample
// of every process, with PASS or FAIL.
func (r SoakResult) Report() (string, bool) {
	var b strings.Builder
	pass := r.Lost == 0 && r.Broken == 0 && r.Unexpected5xx == 0
	fmt.Fprintf(&b, "requests %d, allocations created %d (active %d, error %d), deleted %d\n",
		r.Requests, r.Created, r.Active, r.Errored, r.Deleted)
	codes := make([]int, 0, len(r.Statuses))
	for s := range r.Statuses {
		codes = append(codes, s)
	}
	sort.Ints(codes)
	for _, s := range codes {
		fmt.Fprintf(&b, "  HTTP %d: %d\n", s, r.Statuses[s])
	}
	fmt.Fprintf(&b, "lost %d, double-booked or broken %d, unexpected 5xx %d (503 during the PostgreSQL restart excluded)\n",
		r.Lost, r.Broken, r.Unexpected5xx)
	b.WriteString("events:\n")
	for _, e := range r.Events {
		fmt.Fprintf(&b, "  %s\n", e)
	}
	b.WriteString("process                                   first sample → last sample (RSS MiB, goroutines; at 0/25/50/75/100% of its samples)\n")
	names := make([]string, 0, len(r.Samples))
	for n := range r.Samples {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		s := r.Samples[n]
		first, last := s[0], s[len(s)-1]
		var rss, gr []string
		for _, q := range []int{0, 1, 2, 3, 4} {
			x := s[q*(len(s)-1)/4]
			rss = append(rss, fmt.Sprintf("%.1f", float64(x.RSSKiB)/1024))
			gr = append(gr, strconv.FormatInt(x.Goroutines, 10))
		}
		fmt.Fprintf(&b, "  %-40s %s → %s: RSS %s, goroutines %s (%d samples)\n", n,
			first.At.UTC().Format("15:04:05"), last.At.UTC().Format("15:04:05"),
			strings.Join(rss, " "), strings.Join(gr, " "), len(s))
	}
	if pass {
		b.WriteString("PASS\n")
	} else {
		b.WriteString("FAIL\n")
	}
	return b.String(), pass
}

// errNoConductor is KillConductor's error when none is running.
var errNoConductor = errors.New("no conductor to kill")

// PickConductor returns a random index in [0, n), or errNoConductor.
func PickConductor(n int) (int, error) {
	if n == 0 {
		return 0, errNoConductor
	}
	return rand.IntN(n), nil
}
