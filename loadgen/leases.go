package loadgen

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	"go.uber.org/zap"
)

// Issue 43's benchmark (`metalloc-manage bench leases`, make bench
// MODE=leases): a fleet of reservable nodes in racks, leases admitted
// through POST /v1/leases by concurrent clients, availability searches,
// and leases starting in the same second, all measured as a client sees
// them.

// Lease fleet shape (LeaseNodeFile): racks of LeaseRackSize nodes,
// LeaseRowRacks racks to a row; every fourth rack holds GPU nodes
// (LeaseGPUClass, half of those racks with CUSTOM_A100, half with
// CUSTOM_H100), the others CPU nodes (LeaseCPUClass, every other node
// with CUSTOM_NVME). Topology: row = extra.row, rack = extra.rack.
const (
	LeaseRackSize = 40
	LeaseRowRacks = 25
	LeaseGPUClass = "lease-gpu"
	LeaseCPUClass = "lease-cpu"
)

// LeaseNodeFile is the benchmark's fleet of nodes reservable nodes as a
// node file (`metalloc-manage node import`'s JSON format, with the
// metalloc field reservable set and extra.row, extra.rack naming each
// node's place), written entry by entry.
func LeaseNodeFile(nodes int) []byte {
	type entry struct {
		Name          string         `json:"name"`
		Driver        string         `json:"driver"`
		ResourceClass string         `json:"resource_class"`
		Traits        []string       `json:"traits"`
		Extra         map[string]any `json:"extra"`
		Reservable    bool           `json:"reservable"`
	}
	return nodeFile(nodes, 170, func(i int) any {
		rack := i / LeaseRackSize
		e := entry{Name: fmt.Sprintf("lease-node-%d", i), Driver: "fake-hardware", Reservable: true,
			Extra: map[string]any{"row": rack/LeaseRowRacks + 1, "rack": rack%LeaseRowRacks + 1}}
		if rack%4 == 0 {
			e.ResourceClass = LeaseGPUClass
			e.Traits = []string{"CUSTOM_A100"}
			if (rack/4)%2 == 1 {
				e.Traits = []string{"CUSTOM_H100"}
			}
		} else {
			e.ResourceClass = LeaseCPUClass
			e.Traits = []string{}
			if i%2 == 0 {
				e.Traits = []string{"CUSTOM_NVME"}
			}
		}
		return e
	})
}

// LeaseOptions sizes the lease benchmark. Zero values take the defaults
// noted.
type LeaseOptions struct {
	// APIURL is metalloc-api's base URL (nodes enrolled with
	// LeaseNodeFile, topology row, rack).
	APIURL string
	// Leases to admit (default 5000) over Days days (default 30) from
	// Concurrency clients (default 32).
	Leases, Days, Concurrency int
	// Rate, when above 0, paces the admissions: lease i is due at i/Rate
	// seconds after the first, sent by the next free client at that time
	// (or as soon as one is free), and its latency is counted from when it
	// was due, so that a queue behind a slow answer counts. 0: a closed
	// loop, each client sending its next as soon as its last is answered.
	Rate float64
	// Searches: availability requests of each form (earliest window,
	// calendar; default 300 each) from SearchConcurrency clients (default 4).
	Searches, SearchConcurrency int
	// Starts: leases made to start in the same second (default 100),
	// admitted StartLead before it (default 20s).
	Starts    int
	StartLead time.Duration
	// Timeout bounds each phase (default 10m).
	Timeout time.Duration
	// Seed makes the lease mix reproducible (0: random).
	Seed uint64
	// Phase, when set, is called before (begin true) and after each phase
	// (bench leases resets and logs pg_stat_statements there).
	Phase func(ctx context.Context, phase string, begin bool)
	// Work, when set, reads the system under test's cumulative work; the
	// result reports it per request of each phase.
	Work func(context.Context) (Work, error)
	// Progress, when set, is called every couple of seconds during a phase
	// and at its end.
	Progress func(phase string, done, total int)
	Log      *zap.Logger
}

func (o *LeaseOptions) setDefaults() {
	if o.Leases <= 0 {
		o.Leases = 5000
	}
	if o.Days <= 0 {
		o.Days = 30
	}
	if o.Concurrency <= 0 {
		o.Concurrency = 32
	}
	if o.Searches <= 0 {
		o.Searches = 300
	}
	if o.SearchConcurrency <= 0 {
		o.SearchConcurrency = 4
	}
	if o.Starts <= 0 {
		o.Starts = 100
	}
	if o.StartLead <= 0 {
		o.StartLead = 20 * time.Second
	}
	if o.Timeout <= 0 {
		o.Timeout = 10 * time.Minute
	}
	if o.Seed == 0 {
		o.Seed = rand.Uint64()
	}
	if o.Progress == nil {
		o.Progress = func(string, int, int) {}
	}
	if o.Log == nil {
		o.Log = zap.NewNop()
	}
}

// LeasePhase is what one phase of the lease benchmark measured.
type LeasePhase struct {
	// Name says what ran; Requests how many, Clients by how many clients.
	Name              string
	Requests, Clients int
	// Latency: request sent to its answer, as the client saw it.
	Latency Latency
	// Took: the phase from its first request to its last answer.
	Took time.Duration
	// Work: what the API, the conductors and the database did (zero
	// without LeaseOptions.Work).
	Work Work
	// Load: the machine's 1-minute load average at the start and the end.
	LoadBefore, LoadAfter float64
	// Notes: the phase's own counts, for people.
	Notes string
}

// LeaseResult is what the lease benchmark measured, all through the
// public API.
type LeaseResult struct {
	Admission, Earliest, Calendar LeasePhase
	// Admitted, Refused (409, does not fit), Contended (409, the pick
	// booked by concurrent admissions every attempt): the admission
	// phase's answers.
	Admitted, Refused, Contended int
	// Starts is the simultaneous start: Latency is from the start second
	// to each lease.start event read off the stream.
	Starts LeasePhase
	// StartSecond is the second the Starts leases start at; AllActive the
	// time from it until the last of them was seen active on the event
	// stream (-1: not all were within the phase's timeout); Started how
	// many were; ServerLate the largest updated_at - start_time of those
	// leases (the database clock: the conductors' own lateness).
	StartSecond time.Time
	AllActive   time.Duration
	Started     int
	ServerLate  time.Duration
	// Seed is the lease mix's (LeaseOptions.Seed, drawn when 0).
	Seed uint64
	// Overbooked counts pairs of blocking lease_nodes rows of one node
	// whose windows overlap, as the lease API shows them (must be 0).
	Overbooked int
}

// Targets of issue 43 for this benchmark.
const (
	TargetAdmissionP99    = 50 * time.Millisecond
	TargetAvailabilityP99 = 100 * time.Millisecond
	TargetAllActive       = 2 * time.Second
)

// Table formats r as a Markdown table with a line per phase and the
// issue's targets.
func (r LeaseResult) Table() string {
	var b strings.Builder
	b.WriteString("| phase | requests | clients | p50 | p95 | p99 | max | per request: CPU (database) | load average (start → end) | notes |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|---|---|\n")
	ms := func(d time.Duration) string {
		if d >= 10*time.Second {
			return d.Round(100 * time.Millisecond).String()
		}
		return d.Round(100 * time.Microsecond).String()
	}
	for _, p := range []LeasePhase{r.Admission, r.Earliest, r.Calendar, r.Starts} {
		work := "–"
		if p.Work != (Work{}) && p.Requests > 0 {
			per := func(d time.Duration) time.Duration {
				return (d / time.Duration(p.Requests)).Round(10 * time.Microsecond)
			}
			work = fmt.Sprintf("%s (%s)", per(p.Work.CPU), per(p.Work.DatabaseCPU))
		}
		fmt.Fprintf(&b, "| %s | %d | %d | %s | %s | %s | %s | %s | %.1f → %.1f | %s |\n", p.Name, p.Requests, p.Clients,
			ms(p.Latency.P50), ms(p.Latency.P95), ms(p.Latency.P99), ms(p.Latency.Max), work, p.LoadBefore, p.LoadAfter, p.Notes)
	}
	verdict := func(ok bool) string {
		if ok {
			return "met"
		}
		return "NOT met"
	}
	avail := max(r.Earliest.Latency.P99, r.Calendar.Latency.P99)
	fmt.Fprintf(&b, "\ntargets (issue 43): admission p99 %s < %s: %s; availability p99 %s < %s: %s; ",
		ms(r.Admission.Latency.P99), TargetAdmissionP99, verdict(r.Admission.Latency.P99 < TargetAdmissionP99),
		ms(avail), TargetAvailabilityP99, verdict(avail < TargetAvailabilityP99))
	if r.AllActive >= 0 {
		fmt.Fprintf(&b, "%d starts all active %s after their second < %s: %s\n", r.Starts.Requests, ms(r.AllActive),
			TargetAllActive, verdict(r.AllActive < TargetAllActive))
	} else {
		fmt.Fprintf(&b, "%d starts all active < %s: NOT met (%d of %d seen active)\n", r.Starts.Requests,
			TargetAllActive, r.Started, r.Starts.Requests)
	}
	fmt.Fprintf(&b, "overbooked node windows: %d", r.Overbooked)
	return b.String()
}

// leaseMix draws the benchmark's leases: a realistic mix of 1-16 nodes,
// GPU (30 %) or CPU, a trait for some, all in one rack (35 %), one row
// (5 %), preferably one rack (20 %) or anywhere, for hours to days.
type leaseMix struct {
	rnd *rand.Rand
	t0  time.Time
	// hours is the period the leases fall in, from t0.
	hours int
}

// leaseShape is one drawn reservation and window.
type leaseShape struct {
	class, trait, rule, level string
	count, startHour, hours   int
}

func (m *leaseMix) draw() leaseShape {
	var s leaseShape
	r := m.rnd
	if r.IntN(10) < 3 {
		s.class = LeaseGPUClass
		if r.IntN(2) == 0 {
			s.trait = []string{"CUSTOM_A100", "CUSTOM_H100"}[r.IntN(2)]
		}
	} else {
		s.class = LeaseCPUClass
		if r.IntN(4) == 0 {
			s.trait = "CUSTOM_NVME"
		}
	}
	s.count = []int{1, 1, 1, 1, 2, 2, 2, 2, 3, 4, 4, 4, 4, 4, 6, 8, 8, 8, 8, 12, 16, 16}[r.IntN(22)]
	switch k := r.IntN(20); {
	case k < 7:
		s.rule, s.level = "required", "rack"
	case k < 8:
		s.rule, s.level = "required", "row"
	case k < 12:
		s.rule, s.level = "preferred", "rack"
	}
	switch k := r.IntN(20); {
	case k < 10:
		s.hours = 1 + r.IntN(12)
	case k < 17:
		s.hours = 12 + r.IntN(61)
	default:
		s.hours = 72 + r.IntN(97)
	}
	s.hours = min(s.hours, m.hours)
	s.startHour = r.IntN(m.hours - s.hours + 1)
	return s
}

// body is the POST /v1/leases body of shape s for project p.
func (s leaseShape) body(t0 time.Time, u, project string) map[string]any {
	res := map[string]any{"resource_class": s.class, "count": s.count}
	if s.trait != "" {
		res["traits"] = []string{s.trait}
	}
	if s.rule != "" {
		res[s.rule] = s.level
	}
	start := t0.Add(time.Duration(s.startHour) * time.Hour)
	return map[string]any{
		"uuid": u, "project_id": project, "reservations": []any{res},
		"start_time": start.Format(time.RFC3339), "end_time": start.Add(time.Duration(s.hours) * time.Hour).Format(time.RFC3339),
	}
}

// query is the GET /v1/leases/availability query of the earliest window
// for s, searched from its start.
func (s leaseShape) query(t0 time.Time) string {
	v := url.Values{"resource_class": {s.class}, "count": {fmt.Sprint(s.count)},
		"duration": {fmt.Sprint(s.hours * 3600)}, "after": {t0.Add(time.Duration(s.startHour) * time.Hour).Format(time.RFC3339)}}
	if s.trait != "" {
		v.Set("traits", s.trait)
	}
	if s.rule != "" {
		v.Set("level", s.level)
		v.Set("mode", s.rule)
	}
	return v.Encode()
}

// loadAverage is the machine's 1-minute load average (0 when unknown).
func loadAverage() float64 {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return 0
	}
	var l float64
	_, _ = fmt.Sscan(string(b), &l)
	return l
}

// RunLeases runs the lease benchmark on a running stack whose fleet is
// LeaseNodeFile's with the topology row, rack:
//
//  1. admission: Concurrency clients POST Leases leases (leaseMix) over
//     Days days from the next whole hour a day from now, each client its
//     next as soon as the last is answered; 201 admitted, 409 refused or
//     contended, anything else fails the run;
//  2. availability: Searches earliest-window requests (the mix's shapes,
//     from their start) and Searches calendars (a class per rack over a
//     week, hourly; the whole pool per rack over Days days, hourly; per
//     row over Days days in 6 h steps), from SearchConcurrency clients;
//  3. simultaneous starts: Starts leases of 1-4 CPU nodes for an hour,
//     all starting at one whole second StartLead ahead, admitted by
//     Concurrency clients; the allocation event stream, opened before the
//     first is admitted, says when each is active (lease.start), then
//     each lease is read back (state active, updated_at).
//
// Finally the lease_nodes are checked for overbooking through the API
// (every lease's nodes and window).
func RunLeases(ctx context.Context, o LeaseOptions) (LeaseResult, error) {
	o.setDefaults()
	c := newClient(o.APIURL, max(o.Concurrency, o.SearchConcurrency))
	r := LeaseResult{Seed: o.Seed}
	t0 := time.Now().UTC().Truncate(time.Hour).Add(25 * time.Hour)
	mix := &leaseMix{rnd: rand.New(rand.NewPCG(o.Seed, 43)), t0: t0, hours: o.Days * 24}
	o.Log.Info("lease benchmark", zap.Int("leases", o.Leases), zap.Int("days", o.Days), zap.Time("from", t0),
		zap.Int("concurrency", o.Concurrency), zap.Uint64("seed", o.Seed))

	// 1. Admission.
	shapes := make([]leaseShape, o.Leases)
	for i := range shapes {
		shapes[i] = mix.draw()
	}
	// The answer to each POST: 201, or a 409 that refuses (the lease does
	// not fit) or gives up on contention ("Lease not admitted: ...").
	const admitted, refused, contended = 1, 2, 3
	outcome := make([]int, o.Leases)
	var err error
	r.Admission, err = leasePhase(ctx, o, "admission", o.Leases, o.Concurrency, o.Rate, func(ctx context.Context, i int) error {
		st, err := c.do(ctx, "POST", "/v1/leases", shapes[i].body(t0, uuid.NewString(), fmt.Sprintf("bench-p%d", i%50)), nil)
		switch {
		case err == nil:
			outcome[i] = admitted
		case st == http.StatusConflict && strings.Contains(err.Error(), "Lease not admitted"):
			outcome[i] = contended
		case st == http.StatusConflict:
			outcome[i] = refused
		default:
			return err
		}
		return nil
	})
	if err != nil {
		return r, err
	}
	for _, k := range outcome {
		switch k {
		case admitted:
			r.Admitted++
		case refused:
			r.Refused++
		case contended:
			r.Contended++
		}
	}
	r.Admission.Name = "admission: POST /v1/leases"
	if o.Rate > 0 {
		r.Admission.Name += fmt.Sprintf(" (paced: %.0f/s, latency from when due)", o.Rate)
	}
	r.Admission.Notes = fmt.Sprintf("%d admitted, %d refused (409: does not fit), %d given up on contention (409); %.0f admissions/s",
		r.Admitted, r.Refused, r.Contended, float64(o.Leases)/r.Admission.Took.Seconds())

	// 2. Availability.
	queries := make([]string, o.Searches)
	for i := range queries {
		queries[i] = mix.draw().query(t0)
	}
	var found int
	var mu sync.Mutex
	r.Earliest, err = leasePhase(ctx, o, "availability: earliest window", o.Searches, o.SearchConcurrency, 0, func(ctx context.Context, i int) error {
		var doc struct {
			StartTime *string `json:"start_time"`
		}
		if _, err := c.do(ctx, "GET", "/v1/leases/availability?"+queries[i], nil, &doc); err != nil {
			return err
		}
		if doc.StartTime != nil {
			mu.Lock()
			found++
			mu.Unlock()
		}
		return nil
	})
	if err != nil {
		return r, err
	}
	r.Earliest.Notes = fmt.Sprintf("a window found for %d of %d (90-day horizon)", found, o.Searches)
	end := t0.Add(time.Duration(o.Days) * 24 * time.Hour).Format(time.RFC3339)
	calendars := []string{
		"level=rack&step=1h&after=" + t0.Format(time.RFC3339) + "&until=" + t0.Add(7*24*time.Hour).Format(time.RFC3339) + "&resource_class=",
		"level=rack&step=1h&after=" + t0.Format(time.RFC3339) + "&until=" + end,
		"level=row&step=6h&after=" + t0.Format(time.RFC3339) + "&until=" + end,
	}
	r.Calendar, err = leasePhase(ctx, o, "availability: calendar", o.Searches, o.SearchConcurrency, 0, func(ctx context.Context, i int) error {
		q := calendars[i%len(calendars)]
		if strings.HasSuffix(q, "=") {
			q += []string{LeaseGPUClass, LeaseCPUClass}[i/len(calendars)%2]
		}
		_, err := c.do(ctx, "GET", "/v1/leases/availability?"+q, nil, nil)
		return err
	})
	if err != nil {
		return r, err
	}
	r.Calendar.Notes = fmt.Sprintf("in turn: a class per rack over 7 days hourly; all per rack over %d days hourly; all per row over %d days in 6 h steps", o.Days, o.Days)

	// 3. Simultaneous starts.
	if err := simultaneousStarts(ctx, c, o, &r); err != nil {
		return r, err
	}
	r.Overbooked, err = overbooked(ctx, c)
	return r, err
}

// leasePhase runs fn(i) for i < n on clients clients (parallel), timing
// each call, with the load average and Work around it; with rate above 0,
// call i is due at i/rate seconds after the start (LeaseOptions.Rate).
func leasePhase(ctx context.Context, o LeaseOptions, name string, n, clients int, rate float64, fn func(context.Context, int) error) (LeasePhase, error) {
	p := LeasePhase{Name: name, Requests: n, Clients: clients, LoadBefore: loadAverage()}
	if o.Phase != nil {
		o.Phase(ctx, name, true)
		defer o.Phase(ctx, name, false)
	}
	var before Work
	if o.Work != nil {
		var err error
		if before, err = o.Work(ctx); err != nil {
			return p, err
		}
	}
	took := make([]time.Duration, n)
	var err error
	begin := time.Now()
	p.Took, err = parallel(ctx, Options{Concurrency: clients, Timeout: o.Timeout, Progress: o.Progress}, name, n,
		func(ctx context.Context, i int) error {
			start := time.Now()
			if rate > 0 {
				due := begin.Add(time.Duration(float64(i) / rate * float64(time.Second)))
				if wait := time.Until(due); wait > 0 {
					select {
					case <-ctx.Done():
						return context.Cause(ctx)
					case <-time.After(wait):
					}
				}
				start = due
			}
			err := fn(ctx, i)
			took[i] = time.Since(start)
			return err
		})
	if err != nil {
		return p, fmt.Errorf("%s: %w", name, err)
	}
	p.Latency = latencyOf(took)
	p.LoadAfter = loadAverage()
	if o.Work != nil {
		after, err := o.Work(ctx)
		if err != nil {
			return p, err
		}
		p.Work = Work{after.Buffers - before.Buffers, after.CPU - before.CPU, after.DatabaseCPU - before.DatabaseCPU}
	}
	o.Log.Info("phase done", zap.String("phase", name), zap.Stringer("latency", p.Latency), zap.Duration("took", p.Took))
	return p, nil
}

// simultaneousStarts is RunLeases' third phase.
func simultaneousStarts(ctx context.Context, c *client, o LeaseOptions, r *LeaseResult) error {
	n := o.Starts
	at := time.Now().UTC().Truncate(time.Second).Add(o.StartLead)
	r.StartSecond = at
	uuids := make([]string, n)
	index := make(map[string]int, n)
	for i := range uuids {
		uuids[i] = uuid.NewString()
		index[uuids[i]] = i
	}
	seen := make([]time.Time, n)
	var mu sync.Mutex
	started := 0
	all := make(chan struct{})
	streamCtx, stop := context.WithCancel(ctx)
	defer stop()
	ready := make(chan struct{})
	streamErr := make(chan error, 1)
	go func() {
		streamErr <- follow(streamCtx, c, ready, func(e streamEvent) {
			if e.Kind != "lease.start" {
				return
			}
			mu.Lock()
			defer mu.Unlock()
			if i, ok := index[e.UUID]; ok && seen[i].IsZero() {
				seen[i] = e.read
				if started++; started == n {
					close(all)
				}
			}
		})
	}()
	select {
	case <-ready:
	case err := <-streamErr:
		return fmt.Errorf("opening the event stream: %w", err)
	case <-ctx.Done():
		return context.Cause(ctx)
	}
	o.Log.Info("admitting leases that start in the same second", zap.Int("leases", n), zap.Time("start", at))
	rnd := rand.New(rand.NewPCG(o.Seed, 100))
	counts := make([]int, n)
	for i := range counts {
		counts[i] = 1 + rnd.IntN(4)
	}
	name := fmt.Sprintf("%d leases starting in one second", n)
	admit, err := leasePhase(ctx, o, name+" (their admission)", n, o.Concurrency, 0, func(ctx context.Context, i int) error {
		_, err := c.do(ctx, "POST", "/v1/leases", map[string]any{
			"uuid": uuids[i], "project_id": fmt.Sprintf("bench-start-%d", i%10),
			"start_time": at.Format(time.RFC3339), "end_time": at.Add(time.Hour).Format(time.RFC3339),
			"reservations": []any{map[string]any{"resource_class": LeaseCPUClass, "count": counts[i]}},
		}, nil)
		return err
	})
	if err != nil {
		return err
	}
	if time.Now().After(at) {
		return fmt.Errorf("%s: their admission took %s, past the start second (raise --start-lead)", name, admit.Took)
	}
	r.Starts = LeasePhase{Name: name + ": start second to lease.start read off the event stream", Requests: n, Clients: 1,
		LoadBefore: loadAverage()}
	if o.Phase != nil {
		o.Phase(ctx, "starts", true)
	}
	var before Work
	if o.Work != nil {
		if before, err = o.Work(ctx); err != nil {
			return err
		}
	}
	wait := time.Until(at) + 60*time.Second
	o.Log.Info("waiting for the starts", zap.Duration("until_start", time.Until(at).Round(time.Millisecond)))
	select {
	case <-all:
	case <-time.After(wait):
	case err := <-streamErr:
		return fmt.Errorf("the event stream: %w", err)
	case <-ctx.Done():
		return context.Cause(ctx)
	}
	stop()
	if o.Phase != nil {
		o.Phase(ctx, "starts", false)
	}
	r.Starts.LoadAfter = loadAverage()
	if o.Work != nil {
		after, err := o.Work(ctx)
		if err != nil {
			return err
		}
		r.Starts.Work = Work{after.Buffers - before.Buffers, after.CPU - before.CPU, after.DatabaseCPU - before.DatabaseCPU}
	}
	mu.Lock()
	var lat []time.Duration
	r.AllActive = 0
	for _, s := range seen {
		if s.IsZero() {
			r.AllActive = -1
			continue
		}
		lat = append(lat, s.Sub(at))
		if r.AllActive >= 0 {
			r.AllActive = max(r.AllActive, s.Sub(at))
		}
	}
	r.Started = started
	mu.Unlock()
	r.Starts.Latency = latencyOf(lat)
	// Read each back: active, and by the database clock how late.
	var notActive int
	for _, u := range uuids {
		var l struct {
			State     string  `json:"state"`
			StartTime string  `json:"start_time"`
			UpdatedAt *string `json:"updated_at"`
			Reason    *string `json:"status_reason"`
		}
		if _, err := c.do(ctx, "GET", "/v1/leases/"+u, nil, &l); err != nil {
			return err
		}
		if l.State != "active" {
			notActive++
			continue
		}
		if l.UpdatedAt != nil {
			s, err1 := time.Parse(time.RFC3339, l.StartTime)
			up, err2 := time.Parse(time.RFC3339Nano, *l.UpdatedAt)
			if err1 == nil && err2 == nil {
				r.ServerLate = max(r.ServerLate, up.Sub(s))
			}
		}
	}
	all2 := "–"
	if r.AllActive >= 0 {
		all2 = r.AllActive.Round(time.Millisecond).String()
	}
	r.Starts.Notes = fmt.Sprintf("all active %s after the start second (event stream); %d of %d active when read back; "+
		"the conductors' own lateness (updated_at - start_time) at most %s; admitted %s ahead in %s",
		all2, n-notActive, n, r.ServerLate.Round(time.Millisecond), o.StartLead, admit.Took.Round(time.Millisecond))
	if notActive > 0 {
		return fmt.Errorf("%s: %d of %d leases not active a minute after their start", name, notActive, n)
	}
	return nil
}

// overbooked reads every lease through the API (GET /v1/leases, pages of
// 1,000) and counts pairs of pending or active leases that hold one node
// over overlapping windows (must be 0).
func overbooked(ctx context.Context, c *client) (int, error) {
	all, err := listAll(ctx, c, "/v1/leases?limit=1000", "leases")
	if err != nil {
		return 0, err
	}
	type window struct{ from, to time.Time }
	byNode := map[string][]window{}
	for _, raw := range all {
		var l struct {
			State        string `json:"state"`
			StartTime    string `json:"start_time"`
			EndTime      string `json:"end_time"`
			Reservations []struct {
				Nodes []string `json:"nodes"`
			} `json:"reservations"`
		}
		if err := json.Unmarshal(raw, &l); err != nil {
			return 0, err
		}
		if l.State != "pending" && l.State != "active" {
			continue
		}
		from, err1 := time.Parse(time.RFC3339, l.StartTime)
		to, err2 := time.Parse(time.RFC3339, l.EndTime)
		if err := errors.Join(err1, err2); err != nil {
			return 0, err
		}
		for _, res := range l.Reservations {
			for _, n := range res.Nodes {
				byNode[n] = append(byNode[n], window{from, to})
			}
		}
	}
	bad := 0
	for _, ws := range byNode {
		for i := range ws {
			for j := i + 1; j < len(ws); j++ {
				if ws[i].from.Before(ws[j].to) && ws[j].from.Before(ws[i].to) {
					bad++
				}
			}
		}
	}
	return bad, nil
}
