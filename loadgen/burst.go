package loadgen

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"go.uber.org/zap"
)

// burst runs the allocation phase of ModeBurst: Options.Concurrency
// clients POST Options.Allocations allocations as fast as the API answers
// (no Prefer: wait, no waiting between them), and one event stream (GET
// /v1/allocations/events, opened before the first POST) tells when each
// one finished: a client is done when the stream has shown every
// allocation it created leave allocating. Throughput is from the first
// POST sent to the last allocation seen finished; the client latency of
// an allocation is from its POST sent to its event read off the stream.
// The stream is one connection; its cost on the API (numbering and
// reading the events) is counted in Result.Work.
func burst(ctx context.Context, c *client, o Options, r *Result) ([]string, error) {
	n := o.Allocations
	o.Log.Info("creating allocations in a burst", zap.Int("allocations", n), zap.Int("concurrency", o.Concurrency))
	uuids := make([]string, n)
	index := make(map[string]int, n)
	for i := range n {
		uuids[i] = uuid.NewString()
		index[uuids[i]] = i
	}
	sent := make([]time.Time, n)
	seen := make([]time.Time, n)
	post := make([]time.Duration, n)
	states := make([]string, n)

	ctx, cancel := context.WithTimeoutCause(ctx, o.Timeout, fmt.Errorf("burst: not done after %s", o.Timeout))
	defer cancel()
	var mu sync.Mutex
	finished := 0                  // allocations seen finished (under mu)
	allSeen := make(chan struct{}) // closed when finished reaches want
	want := -1                     // allocations to wait for, once every POST answered (under mu)
	markSeen := func(i int, state string, at time.Time) {
		mu.Lock()
		defer mu.Unlock()
		if !seen[i].IsZero() || uuids[i] == "" {
			return
		}
		seen[i], states[i] = at, state
		finished++
		if finished == want {
			close(allSeen)
		}
	}
	ready := make(chan struct{})
	streamDone := make(chan error, 1)
	go func() {
		streamDone <- follow(ctx, c, ready, func(e streamEvent) {
			if e.Kind != "updated" && e.Kind != "deleted" {
				return
			}
			if e.State == "allocating" {
				return
			}
			if i, ok := index[e.UUID]; ok {
				markSeen(i, e.State, e.read)
			}
		})
	}()
	select {
	case <-ready:
	case err := <-streamDone:
		return nil, fmt.Errorf("opening the event stream: %w", err)
	case <-ctx.Done():
		return nil, context.Cause(ctx)
	}

	var postErrors atomic.Int64
	_, err := parallel(ctx, o, "allocate", n, func(ctx context.Context, i int) error {
		body := allocationBody(o, uuids[i], i)
		sent[i] = time.Now()
		_, err := c.do(ctx, "POST", "/v1/allocations", body, nil)
		post[i] = time.Since(sent[i])
		if err != nil {
			postErrors.Add(1)
			o.Log.Warn("POST failed", zap.Error(err))
			mu.Lock()
			uuids[i] = ""
			mu.Unlock()
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	mu.Lock()
	want = n - int(postErrors.Load())
	// A failed POST's allocation may still have been stored (and be seen):
	// count only the ones answered 201.
	finished = 0
	for i := range n {
		if uuids[i] != "" && !seen[i].IsZero() {
			finished++
		}
	}
	if finished == want {
		close(allSeen)
	}
	mu.Unlock()
	o.Log.Info("every POST answered; waiting for the allocations to finish", zap.Int("allocations", want))
	tick := time.NewTicker(2 * time.Second)
	defer tick.Stop()
wait:
	for {
		select {
		case <-allSeen:
			break wait
		case err := <-streamDone:
			return nil, fmt.Errorf("event stream: %w", err)
		case <-ctx.Done():
			return nil, context.Cause(ctx)
		case <-tick.C:
			mu.Lock()
			o.Progress("finish", finished, want)
			mu.Unlock()
		}
	}
	cancel()
	<-streamDone

	r.Allocations, r.PostErrors = n, int(postErrors.Load())
	created, err := serverTimes(context.WithoutCancel(ctx), c)
	if err != nil {
		return nil, err
	}
	r.tally(o, uuids, sent, seen, post, func(i int) string { return states[i] }, func(i int) (time.Duration, bool) {
		d, ok := created[uuids[i]]
		return d, ok
	})
	return uuids, nil
}

// serverTimes lists every allocation and returns updated_at - created_at
// of those that have an updated_at.
func serverTimes(ctx context.Context, c *client) (map[string]time.Duration, error) {
	all, err := listAll(ctx, c, "/v1/allocations?fields=uuid,created_at,updated_at&limit=1000", "allocations")
	if err != nil {
		return nil, err
	}
	out := make(map[string]time.Duration, len(all))
	for _, raw := range all {
		var a allocDoc
		if err := json.Unmarshal(raw, &a); err != nil {
			return nil, err
		}
		if d, ok := a.serverLatency(); ok {
			out[a.UUID] = d
		}
	}
	return out, nil
}

// streamEvent is one event of GET /v1/allocations/events as a client reads
// it; read is when the client read it.
type streamEvent struct {
	ID    int64
	Kind  string
	UUID  string `json:"uuid"`
	State string `json:"state"`
	read  time.Time
}

// follow reads the allocation event stream until ctx ends, calling fn for
// every event, and closes ready once the stream is open (every change
// committed after that is delivered). A broken stream is reopened from the
// last event read (Last-Event-ID); a reset (events lost to pruning) is an
// error. It returns nil when ctx ends.
func follow(ctx context.Context, c *client, ready chan<- struct{}, fn func(streamEvent)) error {
	var last int64 = -1
	opened := false
	for attempt := 0; ; attempt++ {
		err := followOnce(ctx, c, &last, func() {
			if !opened {
				opened = true
				close(ready)
			}
		}, fn)
		if ctx.Err() != nil {
			return nil
		}
		if attempt >= 10 || errors.Is(err, errReset) {
			return err
		}
		time.Sleep(100 * time.Millisecond)
	}
}

var errReset = errors.New("the event stream was reset (events pruned before they were read)")

func followOnce(ctx context.Context, c *client, last *int64, open func(), fn func(streamEvent)) error {
	req, err := http.NewRequestWithContext(ctx, "GET", c.base+"/v1/allocations/events", nil)
	if err != nil {
		return err
	}
	req.Header.Set("X-OpenStack-Ironic-API-Version", apiVersion)
	req.Header.Set("Accept", "text/event-stream")
	if *last >= 0 {
		req.Header.Set("Last-Event-ID", strconv.FormatInt(*last, 10))
	}
	// The client's 30 s timeout would cut the stream: no timeout here.
	resp, err := (&http.Client{Transport: c.http.Transport}).Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET /v1/allocations/events: %d", resp.StatusCode)
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	var e streamEvent
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "":
			if e.Kind == "reset" {
				return errReset
			}
			if e.Kind != "" {
				e.read = time.Now()
				*last = e.ID
				fn(e)
			}
			e = streamEvent{}
		case strings.HasPrefix(line, ":"):
			// The opening comment: from here on nothing is missed.
			open()
		case strings.HasPrefix(line, "id: "):
			e.ID, _ = strconv.ParseInt(line[4:], 10, 64)
		case strings.HasPrefix(line, "event: "):
			e.Kind = line[7:]
		case strings.HasPrefix(line, "data: "):
			if err := json.Unmarshal([]byte(line[6:]), &e); err != nil {
				return fmt.Errorf("event %d: %w", e.ID, err)
			}
		}
	}
	if err := sc.Err(); err != nil {
		return err
	}
	return errors.New("the event stream ended")
}
