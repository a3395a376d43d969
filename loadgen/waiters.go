package loadgen

import (
	"bufio"
	"cmp"
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// WaitersOptions sizes the waiter benchmark (`metalloc-manage bench
// waiters`): N clients each hold one request open on metalloc-api, a
// Prefer: wait GET of an allocating allocation (Mode "wait") or an event
// stream (Mode "stream"), and the API's own /metrics tell what they cost.
type WaitersOptions struct {
	// APIURL is metalloc-api's base URL; its /metrics is scraped.
	APIURL string
	// N is how many waiters (or streams) to open (default 10000).
	N int
	// Mode is "wait" (default) or "stream".
	Mode string
	// Wait is the Prefer: wait asked (default 60 s; the server caps it).
	Wait time.Duration
	// Release, called once all N are open and measured, makes the
	// allocations leave allocating (wait: all of them; stream: at least
	// one), so that the benchmark can time the fan-out.
	Release func(context.Context) error
	// Progress, when set, reports the phases.
	Progress func(phase string, done, total int)
}

// WaitersResult is what the waiter benchmark measured on the API process.
type WaitersResult struct {
	N    int
	Mode string
	// Before and After are the API's figures with no waiter and with N.
	Before, After APIMemory
	// Answered is how many of the N got their answer (wait: an allocation
	// no longer allocating; stream: an event) after Release, and
	// FanOut how long after Release the last one came.
	Answered int
	FanOut   time.Duration
	// Retried is how many opens were sent again: answered 503 (the API's
	// database pool exhausted by the burst) or closed unanswered.
	Retried int
}

// APIMemory is a scrape of metalloc-api's /metrics: resident set, Go heap
// in use, goroutine stacks, goroutines.
type APIMemory struct {
	RSS, HeapInuse, StackInuse, Goroutines float64
}

// String formats r for people.
func (r WaitersResult) String() string {
	per := func(a, b float64) string {
		return fmt.Sprintf("%.1f KiB/%s", (b-a)/float64(r.N)/1024, r.Mode)
	}
	return fmt.Sprintf("%d %s requests open on metalloc-api:\n"+
		"  RSS        %7.1f MiB -> %7.1f MiB  (%s)\n"+
		"  heap inuse %7.1f MiB -> %7.1f MiB  (%s)\n"+
		"  stacks     %7.1f MiB -> %7.1f MiB  (%s)\n"+
		"  goroutines %7.0f     -> %7.0f      (%.2f/%s)\n"+
		"opens retried (503 or closed): %d\n"+
		"release: %d of %d answered, the last %s after the release",
		r.N, r.Mode,
		r.Before.RSS/(1<<20), r.After.RSS/(1<<20), per(r.Before.RSS, r.After.RSS),
		r.Before.HeapInuse/(1<<20), r.After.HeapInuse/(1<<20), per(r.Before.HeapInuse, r.After.HeapInuse),
		r.Before.StackInuse/(1<<20), r.After.StackInuse/(1<<20), per(r.Before.StackInuse, r.After.StackInuse),
		r.Before.Goroutines, r.After.Goroutines, (r.After.Goroutines-r.Before.Goroutines)/float64(r.N), r.Mode,
		r.Retried, r.Answered, r.N, r.FanOut.Round(time.Millisecond))
}

// RunWaiters creates N allocations through the API (they must stay
// allocating: run it without conductors), opens N waiters or streams,
// measures the API's memory, calls Release and times the answers.
func RunWaiters(ctx context.Context, o WaitersOptions) (WaitersResult, error) {
	if o.N <= 0 {
		o.N = 10000
	}
	if o.Mode == "" {
		o.Mode = "wait"
	}
	if o.Wait <= 0 {
		o.Wait = time.Minute
	}
	if o.Progress == nil {
		o.Progress = func(string, int, int) {}
	}
	res := WaitersResult{N: o.N, Mode: o.Mode}
	tr := &http.Transport{MaxIdleConnsPerHost: o.N + 64, IdleConnTimeout: 5 * time.Minute}
	defer tr.CloseIdleConnections()
	c := &client{base: o.APIURL, http: &http.Client{Transport: tr}}

	var uuids []string
	if o.Mode == "wait" {
		uuids = make([]string, o.N)
		var done atomic.Int64
		var firstErr error
		var mu sync.Mutex
		var wg sync.WaitGroup
		sem := make(chan struct{}, 32)
		for i := range o.N {
			sem <- struct{}{}
			wg.Go(func() {
				defer func() { <-sem }()
				var a struct{ UUID string }
				if _, err := c.do(ctx, "POST", "/v1/allocations", map[string]any{"resource_class": "waiters-bench"}, &a); err != nil {
					mu.Lock()
					firstErr = cmp.Or(firstErr, err)
					mu.Unlock()
					return
				}
				uuids[i] = a.UUID
				if n := done.Add(1); n%1000 == 0 {
					o.Progress("create", int(n), o.N)
				}
			})
		}
		wg.Wait()
		if firstErr != nil {
			return res, firstErr
		}
	}
	var err error
	if res.Before, err = scrapeMemory(ctx, o.APIURL); err != nil {
		return res, err
	}

	// Open the N requests, 500 every 100 ms, each on its own connection.
	openCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	var answered atomic.Int64
	var last atomic.Int64 // unix nanoseconds of the latest answer
	var wg sync.WaitGroup
	errs := make(chan error, o.N)
	for i := range o.N {
		wg.Go(func() {
			if err := openOne(openCtx, c, o, uuids, i); err != nil {
				if openCtx.Err() == nil {
					errs <- err
				}
				return
			}
			answered.Add(1)
			last.Store(time.Now().UnixNano())
		})
		if i%500 == 499 {
			time.Sleep(100 * time.Millisecond)
		}
	}
	gauge := "metalloc_allocation_waiters"
	if o.Mode == "stream" {
		gauge = "metalloc_allocation_event_streams"
	}
	deadline := time.Now().Add(2 * time.Minute)
	for {
		v, err := scrapeValue(ctx, o.APIURL, gauge)
		if err != nil {
			return res, err
		}
		o.Progress("open", int(v), o.N)
		if int(v) >= o.N {
			break
		}
		select {
		case err := <-errs:
			return res, fmt.Errorf("opening: %w", err)
		default:
		}
		if n := answered.Load(); n > 0 {
			// Nothing may answer before the release: these would
			// never count as open (the wait for them used to run
			// into its deadline).
			return res, fmt.Errorf("%d of %d %s requests were answered before the release: something else changes "+
				"allocations on this database (a live conductor?)", n, o.N, o.Mode)
		}
		if time.Now().After(deadline) {
			return res, fmt.Errorf("only %v of %d %s requests open after 2 minutes", v, o.N, o.Mode)
		}
		time.Sleep(500 * time.Millisecond)
	}
	time.Sleep(2 * time.Second) // let the API settle (GC) before measuring
	if res.After, err = scrapeMemory(ctx, o.APIURL); err != nil {
		return res, err
	}

	released := time.Now()
	if o.Release != nil {
		if err := o.Release(ctx); err != nil {
			return res, err
		}
	}
	allDone := make(chan struct{})
	go func() { wg.Wait(); close(allDone) }()
	select {
	case <-allDone:
	case <-time.After(o.Wait + 30*time.Second):
	}
	cancel()
	<-allDone
	res.Answered = int(answered.Load())
	res.Retried = int(retried.Load())
	if l := last.Load(); l > 0 {
		res.FanOut = time.Unix(0, l).Sub(released)
	}
	return res, nil
}

// retried counts the opens sent again (503 or connection closed).
var retried atomic.Int64

// openOne holds request i open until its answer (wait) or first event
// (stream).
func openOne(ctx context.Context, c *client, o WaitersOptions, uuids []string, i int) error {
	path := "/v1/allocations/events"
	if o.Mode == "wait" {
		path = "/v1/allocations/" + uuids[i]
	}
	req, err := http.NewRequestWithContext(ctx, "GET", c.base+path, nil)
	if err != nil {
		return err
	}
	req.Header.Set("X-OpenStack-Ironic-API-Version", apiVersion)
	if o.Mode == "wait" {
		req.Header.Set("Prefer", "wait="+strconv.Itoa(int(o.Wait/time.Second)))
	} else {
		req.Header.Set("Accept", "text/event-stream")
	}
	resp, err := c.http.Do(req)
	// A burst of opens can exhaust the API's database pool (503) or keep
	// it from reading a new connection's request within its 10 s (the
	// connection is closed): retry shortly, as a client would.
	for try := 0; try < 20 && ctx.Err() == nil && (err != nil || resp.StatusCode == http.StatusServiceUnavailable); try++ {
		if err == nil {
			resp.Body.Close()
		}
		retried.Add(1)
		time.Sleep(200 * time.Millisecond)
		resp, err = c.http.Do(req)
	}
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		return fmt.Errorf("GET %s: %d %s", path, resp.StatusCode, b)
	}
	if o.Mode == "wait" {
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			return err
		}
		if strings.Contains(string(b), `"state":"allocating"`) {
			return fmt.Errorf("%s still allocating", uuids[i])
		}
		return nil
	}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if strings.HasPrefix(sc.Text(), "event: ") {
			return nil
		}
	}
	return fmt.Errorf("stream ended: %v", sc.Err())
}

func scrapeMemory(ctx context.Context, api string) (APIMemory, error) {
	text, err := scrape(ctx, api)
	if err != nil {
		return APIMemory{}, err
	}
	return APIMemory{
		RSS: metric(text, "process_resident_memory_bytes"), HeapInuse: metric(text, "go_memstats_heap_inuse_bytes"),
		StackInuse: metric(text, "go_memstats_stack_inuse_bytes"), Goroutines: metric(text, "go_goroutines"),
	}, nil
}

func scrapeValue(ctx context.Context, api, name string) (float64, error) {
	text, err := scrape(ctx, api)
	return metric(text, name), err
}

func scrape(ctx context.Context, api string) (string, error) {
	req, err := http.NewRequestWithContext(ctx, "GET", api+"/metrics", nil)
	if err != nil {
		return "", err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return string(b), err
}

// metric is the value of the sample line named exactly name (0 if none).
func metric(text, name string) float64 {
	for line := range strings.SplitSeq(text, "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			f, _ := strconv.ParseFloat(strings.TrimSpace(v), 64)
			return f
		}
	}
	return 0
}
