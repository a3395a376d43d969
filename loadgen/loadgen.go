// Package loadgen is metalloc's allocation load benchmark
// (`metalloc-manage bench allocations`): it enrolls nodes through the Ironic
// API, fires allocations at a fixed concurrency, waits for every one to
// finish, and reports throughput, POST-to-active latency percentiles and a
// double-booking count, all measured through the public API.
package loadgen

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"go.uber.org/zap"
)

// Options sizes the benchmark.
type Options struct {
	// APIURL is metalloc-api's base URL.
	APIURL string
	// Nodes to enroll (default 10000), Allocations to create (default 5000),
	// Concurrency of both phases (default 32).
	Nodes, Allocations, Concurrency int
	// Classes is how many resource classes the nodes are spread over (default 4).
	Classes int
	// Timeout bounds the wait for all allocations to finish (default 5m).
	Timeout time.Duration
	// AfterEnroll, when set, runs between enrollment and the allocations
	// (the bench command vacuums the tables the enrollment churned, as an
	// operator does after a bulk import).
	AfterEnroll func(context.Context) error
	// Timeline prints mean and max latency per tenth of the run, in send
	// order, to show where slow allocations happen.
	Timeline bool
	// Mode is how the clients learn allocations finished: "poll"
	// (default: POST, and the bench polls the list until nothing is
	// allocating) or "wait" (every POST carries the Prefer: wait
	// extension and is answered with the finished allocation, one round
	// trip; see waitActive).
	Mode string
	// Progress, when set, is called as work completes (phase, done, total).
	Progress func(phase string, done, total int)
	Log      *zap.Logger
}

// Result is what the benchmark measured.
type Result struct {
	Allocations, Active, Error int
	// Duration is from the first POST to the last allocation's activation.
	Duration time.Duration
	// PerSecond is Allocations / Duration.
	PerSecond float64
	// P50, P95, P99, Max: POST sent to allocation finished (active or error).
	P50, P95, P99, Max time.Duration
	// DoubleBooked counts nodes held by more than one active allocation, plus
	// active allocations whose node does not name them back. Must be 0.
	DoubleBooked int
	// PostErrors counts POSTs that did not answer 201.
	PostErrors int
}

// String formats r for people.
func (r Result) String() string {
	return fmt.Sprintf("allocations: %d (active %d, error %d, POST failures %d)\n"+
		"throughput:  %.0f allocations/s over %s\n"+
		"POST-to-active latency: p50 %s  p95 %s  p99 %s  max %s\n"+
		"double-booked: %d",
		r.Allocations, r.Active, r.Error, r.PostErrors, r.PerSecond, r.Duration.Round(time.Millisecond),
		r.P50.Round(time.Microsecond*100), r.P95.Round(time.Microsecond*100), r.P99.Round(time.Microsecond*100),
		r.Max.Round(time.Microsecond*100), r.DoubleBooked)
}

const apiVersion = "1.82"

var traitPool = []string{"CUSTOM_NVME", "CUSTOM_25GBE", "CUSTOM_RAID", "HW_CPU_X86_AVX2"}

type client struct {
	base string
	http *http.Client
}

func (c *client) do(ctx context.Context, method, path string, body any, out any) (int, error) {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return 0, err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, rd)
	if err != nil {
		return 0, err
	}
	req.Header.Set("X-OpenStack-Ironic-API-Version", apiVersion)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return resp.StatusCode, err
	}
	if resp.StatusCode >= 300 {
		return resp.StatusCode, fmt.Errorf("%s %s: %d %s", method, path, resp.StatusCode, strings.TrimSpace(string(data)))
	}
	if out != nil && len(data) > 0 {
		return resp.StatusCode, json.Unmarshal(data, out)
	}
	return resp.StatusCode, nil
}

// Run executes the benchmark.
func Run(ctx context.Context, o Options) (Result, error) {
	if o.Nodes <= 0 {
		o.Nodes = 10000
	}
	if o.Allocations <= 0 {
		o.Allocations = 5000
	}
	if o.Concurrency <= 0 {
		o.Concurrency = 32
	}
	if o.Classes <= 0 {
		o.Classes = 4
	}
	if o.Timeout <= 0 {
		o.Timeout = 5 * time.Minute
	}
	if o.Log == nil {
		o.Log = zap.NewNop()
	}
	if o.Progress == nil {
		o.Progress = func(string, int, int) {}
	}
	c := &client{base: strings.TrimRight(o.APIURL, "/"), http: &http.Client{
		Timeout:   30 * time.Second,
		Transport: &http.Transport{MaxIdleConnsPerHost: o.Concurrency * 2, MaxIdleConns: o.Concurrency * 2},
	}}
	if err := enroll(ctx, c, o); err != nil {
		return Result{}, err
	}
	if o.AfterEnroll != nil {
		if err := o.AfterEnroll(ctx); err != nil {
			return Result{}, err
		}
	}
	return allocate(ctx, c, o)
}

// parallel runs fn(i) for i in [0, n) on o.Concurrency goroutines, stopping
// at the first error.
func parallel(ctx context.Context, n, workers int, progress func(int), fn func(context.Context, int) error) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var next, done atomic.Int64
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				if err := fn(ctx, i); err != nil {
					cancel(err)
					return
				}
				progress(int(done.Add(1)))
			}
		}()
	}
	wg.Wait()
	return context.Cause(ctx)
}

func className(i int) string { return fmt.Sprintf("bench-%d", i) }

// enroll creates o.Nodes nodes across o.Classes resource classes, each with
// one or two traits, and drives them to available with a known power state.
func enroll(ctx context.Context, c *client, o Options) error {
	o.Log.Info("enrolling nodes", zap.Int("nodes", o.Nodes))
	return parallel(ctx, o.Nodes, o.Concurrency, func(d int) {
		if d%500 == 0 || d == o.Nodes {
			o.Progress("enroll", d, o.Nodes)
		}
	}, func(ctx context.Context, i int) error {
		var n struct {
			UUID string `json:"uuid"`
		}
		body := map[string]any{
			"name": fmt.Sprintf("bench-node-%d", i), "driver": "fake-hardware",
			"resource_class": className(i % o.Classes),
		}
		if _, err := c.do(ctx, "POST", "/v1/nodes", body, &n); err != nil {
			return err
		}
		// Traits spread evenly inside every class: a quarter of each class
		// has each trait, a third of the nodes a second one.
		k := i / o.Classes
		traits := []string{traitPool[k%len(traitPool)]}
		if k%3 == 0 {
			traits = append(traits, traitPool[(k+1)%len(traitPool)])
		}
		steps := []struct {
			method, path string
			body         any
		}{
			{"PUT", "/v1/nodes/" + n.UUID + "/traits", map[string]any{"traits": traits}},
			{"PUT", "/v1/nodes/" + n.UUID + "/states/provision", map[string]any{"target": "manage"}},
			{"PUT", "/v1/nodes/" + n.UUID + "/states/power", map[string]any{"target": "power off"}},
			{"PUT", "/v1/nodes/" + n.UUID + "/states/provision", map[string]any{"target": "provide"}},
		}
		for _, s := range steps {
			if _, err := c.do(ctx, s.method, s.path, s.body, nil); err != nil {
				return err
			}
		}
		return nil
	})
}

type allocDoc struct {
	UUID      string  `json:"uuid"`
	State     string  `json:"state"`
	NodeUUID  *string `json:"node_uuid"`
	UpdatedAt *string `json:"updated_at"`
	LastError *string `json:"last_error"`
}

func allocate(ctx context.Context, c *client, o Options) (Result, error) {
	o.Log.Info("creating allocations", zap.Int("allocations", o.Allocations), zap.Int("concurrency", o.Concurrency))
	sent := make([]time.Time, o.Allocations)
	answered := make([]time.Duration, o.Allocations)
	uuids := make([]string, o.Allocations)
	var postErrors atomic.Int64
	start := time.Now()
	err := parallel(ctx, o.Allocations, o.Concurrency, func(d int) {
		if d%500 == 0 || d == o.Allocations {
			o.Progress("allocate", d, o.Allocations)
		}
	}, func(ctx context.Context, i int) error {
		uuids[i] = uuid.NewString()
		body := map[string]any{"uuid": uuids[i], "resource_class": className(rand.IntN(o.Classes))}
		if i%2 == 0 {
			body["traits"] = []string{traitPool[rand.IntN(len(traitPool))]}
		}
		sent[i] = time.Now()
		if o.Mode == "wait" {
			if err := waitActive(ctx, c, body); err != nil {
				postErrors.Add(1)
				o.Log.Warn("POST failed", zap.Error(err))
			}
		} else if _, err := c.do(ctx, "POST", "/v1/allocations", body, nil); err != nil {
			postErrors.Add(1)
			o.Log.Warn("POST failed", zap.Error(err))
		}
		answered[i] = time.Since(sent[i])
		return nil
	})
	if err != nil {
		return Result{}, err
	}
	o.Log.Info("all POSTs answered; waiting for the conductors", zap.Duration("took", time.Since(start)))
	deadline := time.Now().Add(o.Timeout)
	for {
		var page struct {
			Allocations []allocDoc `json:"allocations"`
		}
		if _, err := c.do(ctx, "GET", "/v1/allocations?state=allocating&limit=1&fields=uuid", nil, &page); err != nil {
			return Result{}, err
		}
		if len(page.Allocations) == 0 {
			break
		}
		if time.Now().After(deadline) {
			return Result{}, fmt.Errorf("allocations still allocating after %s", o.Timeout)
		}
		time.Sleep(20 * time.Millisecond)
	}
	all, err := listAll(ctx, c, "/v1/allocations?fields=uuid,state,node_uuid,updated_at,last_error&limit=1000", "allocations")
	if err != nil {
		return Result{}, err
	}
	byUUID := map[string]allocDoc{}
	for _, raw := range all {
		var a allocDoc
		if err := json.Unmarshal(raw, &a); err != nil {
			return Result{}, err
		}
		byUUID[a.UUID] = a
	}
	r := Result{Allocations: o.Allocations, PostErrors: int(postErrors.Load())}
	var lat []time.Duration
	var last time.Time
	held := map[string]int{}
	for i, u := range uuids {
		a, ok := byUUID[u]
		if !ok {
			continue
		}
		switch a.State {
		case "active":
			r.Active++
			held[*a.NodeUUID]++
		case "error":
			r.Error++
		}
		if a.UpdatedAt != nil {
			t, err := time.Parse("2006-01-02T15:04:05.999999-07:00", *a.UpdatedAt)
			if err == nil {
				lat = append(lat, t.Sub(sent[i]))
				if t.After(last) {
					last = t
				}
			}
		}
	}
	for _, n := range held {
		if n > 1 {
			r.DoubleBooked++
		}
	}
	nodes, err := listAll(ctx, c, "/v1/nodes?fields=uuid,allocation_uuid&limit=1000", "nodes")
	if err != nil {
		return Result{}, err
	}
	nodeAlloc := map[string]string{}
	for _, raw := range nodes {
		var n struct {
			UUID           string  `json:"uuid"`
			AllocationUUID *string `json:"allocation_uuid"`
		}
		if err := json.Unmarshal(raw, &n); err != nil {
			return Result{}, err
		}
		if n.AllocationUUID != nil {
			nodeAlloc[n.UUID] = *n.AllocationUUID
		}
	}
	for _, a := range byUUID {
		if a.State == "active" && nodeAlloc[*a.NodeUUID] != a.UUID {
			r.DoubleBooked++
		}
	}
	if o.Timeline {
		// Latency by send order, in tenths of the run: where the tail is.
		type sl struct {
			t    time.Time
			d, p time.Duration
		}
		var all []sl
		for i, u := range uuids {
			if a, ok := byUUID[u]; ok && a.UpdatedAt != nil {
				t, _ := time.Parse("2006-01-02T15:04:05.999999-07:00", *a.UpdatedAt)
				all = append(all, sl{sent[i], t.Sub(sent[i]), answered[i]})
			}
		}
		sort.Slice(all, func(i, j int) bool { return all[i].t.Before(all[j].t) })
		for k := 0; k < 10; k++ {
			part := all[k*len(all)/10 : (k+1)*len(all)/10]
			var mx, sum, psum, pmx time.Duration
			for _, x := range part {
				mx, pmx = max(mx, x.d), max(pmx, x.p)
				sum += x.d
				psum += x.p
			}
			n := time.Duration(len(part))
			fmt.Printf("tenth %d: POST-to-active mean %s max %s; POST answered mean %s max %s\n", k+1,
				(sum / n).Round(time.Millisecond), mx.Round(time.Millisecond),
				(psum / n).Round(time.Millisecond), pmx.Round(time.Millisecond))
		}
	}
	if len(lat) > 0 {
		sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
		pct := func(p float64) time.Duration { return lat[min(len(lat)-1, int(p*float64(len(lat))))] }
		r.P50, r.P95, r.P99, r.Max = pct(0.50), pct(0.95), pct(0.99), lat[len(lat)-1]
	}
	r.Duration = last.Sub(slices.MinFunc(sent, func(a, b time.Time) int { return a.Compare(b) }))
	if r.Duration > 0 {
		r.PerSecond = float64(o.Allocations) / r.Duration.Seconds()
	}
	return r, nil
}

// waitActive POSTs the allocation body with Prefer: wait=25 (below the
// client's 30 s timeout): metalloc-api answers once the allocation left
// allocating, so the client needs no polling. An answer still allocating
// is an error.
func waitActive(ctx context.Context, c *client, body map[string]any) error {
	b, err := json.Marshal(body)
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, "POST", c.base+"/v1/allocations", bytes.NewReader(b))
	if err != nil {
		return err
	}
	req.Header.Set("X-OpenStack-Ironic-API-Version", apiVersion)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Prefer", "wait=25")
	resp, err := c.http.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	var a allocDoc
	data, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusCreated {
		return fmt.Errorf("POST /v1/allocations: %d %s", resp.StatusCode, strings.TrimSpace(string(data)))
	}
	if err := json.Unmarshal(data, &a); err != nil {
		return err
	}
	if a.State == "allocating" {
		return fmt.Errorf("allocation %s still allocating after the wait (Preference-Applied: %q)", a.UUID, resp.Header.Get("Preference-Applied"))
	}
	return nil
}

// listAll follows `next` links and returns every item of collection key.
func listAll(ctx context.Context, c *client, path, key string) ([]json.RawMessage, error) {
	var out []json.RawMessage
	for path != "" {
		var page map[string]json.RawMessage
		if _, err := c.do(ctx, "GET", path, nil, &page); err != nil {
			return nil, err
		}
		var items []json.RawMessage
		if err := json.Unmarshal(page[key], &items); err != nil {
			return nil, err
		}
		out = append(out, items...)
		path = ""
		if raw, ok := page["next"]; ok {
			var next string
			if err := json.Unmarshal(raw, &next); err != nil {
				return nil, err
			}
			path = strings.TrimPrefix(next, c.base)
		}
	}
	return out, nil
}
