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
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"runtime/debug"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"go.uber.org/zap"
)

// Enrolment is how Run enrolls the nodes.
type Enrolment string

// Enrolment methods.
const (
	// EnrollAPI enrolls every node through the Ironic API as `openstack
	// baremetal node create` followed by `node add trait`, `node manage`,
	// `node power off` and `node provide` does: five requests per node.
	EnrollAPI Enrolment = "api"
	// EnrollImport hands a node file (NodeFile) to Options.Import
	// (`metalloc-manage node import`).
	EnrollImport Enrolment = "import"
	// EnrollNone enrolls nothing: the nodes are already there.
	EnrollNone Enrolment = "none"
	// EnrollIronic enrolls through the API as EnrollAPI does, in the shape
	// of issue 44: every node in one resource class with the same three
	// traits (ironicTraits), and every allocation asks for the class and
	// one of them. Run on a database whose node tables were empty when
	// last analyzed (bench allocations analyzes them before it starts the
	// stack), it is the enrolment whose burst ran on plans made for an
	// empty fleet.
	EnrollIronic Enrolment = "ironic"
)

// Mode is how a client learns that its allocation finished.
type Mode string

// Modes.
const (
	// ModePoll: GET /v1/allocations/{uuid} every Options.PollInterval until
	// the state is no longer allocating, as openstacksdk's
	// wait_for_allocation does (with a finer interval).
	ModePoll Mode = "poll"
	// ModeWait: the POST carries metalloc's Prefer: wait extension and is
	// answered with the finished allocation, one round trip (an answer
	// still allocating falls back to polling).
	ModeWait Mode = "wait"
	// ModeBurst: every client POSTs its allocations one after the other
	// without waiting for them to finish (as deploy tooling asking for a
	// cluster at once does), and one event stream tells when each
	// finished; see burst.
	ModeBurst Mode = "burst"
)

// Options sizes the benchmark. Zero values take the defaults noted.
type Options struct {
	// APIURL is metalloc-api's base URL.
	APIURL string
	// Nodes to enroll (default 10000), Allocations to create (default 5000),
	// Concurrency: clients in every phase (default 32).
	Nodes, Allocations, Concurrency int
	// Classes is how many resource classes the nodes are spread over (default 4).
	Classes int
	// Timeout bounds each phase (default 10m).
	Timeout time.Duration
	// Enroll is the enrolment method (default EnrollAPI).
	Enroll Enrolment
	// Enrolled says the nodes are already there, enrolled by an earlier
	// Run with the same Enroll, Nodes and Classes: Run skips the enrolment
	// and its allocations keep that enrolment's shape (bench first-burst's
	// second burst on the same fleet).
	Enrolled bool
	// Import imports a node file in the `openstack baremetal create`
	// format; required with EnrollImport.
	Import func(ctx context.Context, file []byte) error
	// Mode is how clients wait for their allocation (default ModePoll).
	Mode Mode
	// PollInterval is the pause between a client's GETs (default 5ms).
	PollInterval time.Duration
	// SkipDeletes leaves the allocations in place instead of deleting them
	// all at the end (the delete phase).
	SkipDeletes bool
	// AfterEnroll, when set, runs between enrolment and the allocations
	// (the placement backend waits there for its resource tracker).
	AfterEnroll func(context.Context) error
	// Work, when set, reads cumulative work counters (database buffers,
	// CPU time of the system under test); Run reads them around the
	// allocation phase and reports the difference per allocation.
	Work func(context.Context) (Work, error)
	// Timeline prints mean and max latency per tenth of the run, in send
	// order, to show where slow allocations happen.
	Timeline bool
	// Duration, when > 0, bounds the allocation phase (ModePoll and
	// ModeWait) in time as well: once Duration has passed since its start
	// no client sends another allocation (Allocations stays the most
	// sent), and Result.Allocate counts the allocations seen finished
	// within Duration of the first POST, over Duration (the whole phase
	// when it ends sooner). A window of whole periods of a periodic load
	// on the system (Ironic's periodic tasks: every 60 s) measures every
	// phase of it once, where a count of allocations samples whichever
	// part of the period the run happens to span.
	Duration time.Duration
	// Progress, when set, is called every couple of seconds during a phase
	// and at its end (phase, done, total).
	Progress func(phase string, done, total int)
	Log      *zap.Logger
}

func (o *Options) setDefaults() {
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
	if o.Enroll == EnrollIronic {
		o.Classes = 1
	}
	if o.Timeout <= 0 {
		o.Timeout = 10 * time.Minute
	}
	if o.Enroll == "" {
		o.Enroll = EnrollAPI
	}
	if o.Mode == "" {
		o.Mode = ModePoll
	}
	if o.PollInterval <= 0 {
		o.PollInterval = 5 * time.Millisecond
	}
	if o.Log == nil {
		o.Log = zap.NewNop()
	}
	if o.Progress == nil {
		o.Progress = func(string, int, int) {}
	}
}

// Latency is a latency distribution.
type Latency struct {
	P50, P95, P99, Max time.Duration
}

func latencyOf(d []time.Duration) Latency {
	if len(d) == 0 {
		return Latency{}
	}
	d = slices.Clone(d)
	slices.Sort(d)
	pct := func(p float64) time.Duration { return d[min(len(d)-1, int(p*float64(len(d))))] }
	return Latency{pct(0.50), pct(0.95), pct(0.99), d[len(d)-1]}
}

func (l Latency) String() string {
	r := func(d time.Duration) time.Duration { return d.Round(100 * time.Microsecond) }
	return fmt.Sprintf("p50 %s  p95 %s  p99 %s  max %s", r(l.P50), r(l.P95), r(l.P99), r(l.Max))
}

// Rate is a phase's size and duration.
type Rate struct {
	N        int
	Duration time.Duration
}

// PerSecond is N / Duration.
func (r Rate) PerSecond() float64 {
	if r.Duration <= 0 {
		return 0
	}
	return float64(r.N) / r.Duration.Seconds()
}

// Work is what the system under test did, as cumulative counters.
type Work struct {
	// Buffers: database shared-buffer hits and reads.
	Buffers int64
	// CPU: user and system time of the API, the conductors and their
	// database server processes; DatabaseCPU: the server processes' part.
	CPU, DatabaseCPU time.Duration
}

// Result is what the benchmark measured, all through the public API.
type Result struct {
	// Enrolment: nodes enrolled (0 with EnrollNone) and how.
	Enrolment Rate
	EnrollBy  Enrolment
	// Allocations created; Active, Error: how they ended.
	Allocations, Active, Error int
	// Allocate: Allocations from the first POST sent to the last
	// allocation a client saw finished.
	Allocate Rate
	// Client: POST sent to the client seeing the allocation finished
	// (active or error) itself.
	Client Latency
	// Server: the allocation's updated_at - created_at (the row's insert
	// to its activation, by the database clock).
	Server Latency
	// Post: POST sent to its answer.
	Post Latency
	// Polls is the number of GETs clients made while waiting.
	Polls int
	// Work is what the system did during the allocation phase (zero
	// without Options.Work), polls included.
	Work Work
	// DoubleBooked counts nodes held by more than one active allocation, plus
	// active allocations whose node does not name them back. Must be 0.
	DoubleBooked int
	// PostErrors counts POSTs that did not answer 201.
	PostErrors int
	// Delete: every allocation deleted by Concurrency clients (N = 0 when
	// skipped); DeleteErrors counts DELETEs that did not answer 204.
	Delete       Rate
	DeleteErrors int
}

// String formats r for people.
func (r Result) String() string {
	var b strings.Builder
	if r.Enrolment.N > 0 {
		fmt.Fprintf(&b, "enrolment (%s): %d nodes in %s, %.0f nodes/s\n", r.EnrollBy, r.Enrolment.N,
			r.Enrolment.Duration.Round(time.Millisecond), r.Enrolment.PerSecond())
	}
	fmt.Fprintf(&b, "allocations: %d (active %d, error %d, POST failures %d)\n", r.Allocations, r.Active, r.Error, r.PostErrors)
	fmt.Fprintf(&b, "throughput:  %.0f allocations/s over %s (client-seen)\n", r.Allocate.PerSecond(),
		r.Allocate.Duration.Round(time.Millisecond))
	fmt.Fprintf(&b, "client POST-to-seen-finished: %s\n", r.Client)
	fmt.Fprintf(&b, "server created-to-updated:    %s\n", r.Server)
	fmt.Fprintf(&b, "POST answered:                %s\n", r.Post)
	if r.Allocations > 0 {
		fmt.Fprintf(&b, "polls: %d (%.1f per allocation)\n", r.Polls, float64(r.Polls)/float64(r.Allocations))
		if r.Work != (Work{}) {
			per := func(d time.Duration) time.Duration {
				return (d / time.Duration(r.Allocations)).Round(10 * time.Microsecond)
			}
			fmt.Fprintf(&b, "work per allocation: %.0f database buffers, %s CPU (API, conductors and their database backends; database %s)\n",
				float64(r.Work.Buffers)/float64(r.Allocations), per(r.Work.CPU), per(r.Work.DatabaseCPU))
		}
	}
	if r.Delete.N > 0 {
		fmt.Fprintf(&b, "deletes: %d in %s, %.0f/s (failures %d)\n", r.Delete.N, r.Delete.Duration.Round(time.Millisecond),
			r.Delete.PerSecond(), r.DeleteErrors)
	}
	fmt.Fprintf(&b, "double-booked: %d", r.DoubleBooked)
	return b.String()
}

const apiVersion = "1.82"

var traitPool = []string{"CUSTOM_NVME", "CUSTOM_25GBE", "CUSTOM_RAID", "HW_CPU_X86_AVX2"}

// ironicTraits are every node's traits with EnrollIronic.
var ironicTraits = []string{"CUSTOM_GPU", "CUSTOM_NVME", "CUSTOM_25GBE"}

// allocationBody is the POST /v1/allocations body of allocation i: a
// random class and, for every other one, a random trait of traitPool; with
// EnrollIronic, the one class and one of ironicTraits.
func allocationBody(o Options, u string, i int) map[string]any {
	body := map[string]any{"uuid": u, "resource_class": className(rand.IntN(o.Classes))}
	if o.Enroll == EnrollIronic {
		body["traits"] = []string{ironicTraits[rand.IntN(len(ironicTraits))]}
	} else if i%2 == 0 {
		body["traits"] = []string{traitPool[rand.IntN(len(traitPool))]}
	}
	return body
}

type client struct {
	base string
	http *http.Client
}

func (c *client) do(ctx context.Context, method, path string, body any, out any) (int, error) {
	return c.doHeader(ctx, method, path, body, out, nil)
}

// doHeader is do with extra request headers.
func (c *client) doHeader(ctx context.Context, method, path string, body any, out any, header map[string]string) (int, error) {
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
	for k, v := range header {
		req.Header.Set(k, v)
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

// Run executes the benchmark: enrolment, allocations (each client POSTs,
// then waits for its allocation as Options.Mode says, then sends the next),
// a consistency check, and the delete phase.
func Run(ctx context.Context, o Options) (Result, error) {
	o.setDefaults()
	c := newClient(o.APIURL, o.Concurrency)
	r := Result{EnrollBy: o.Enroll}
	var err error
	if r.Enrolment, err = enrollBy(ctx, c, o); err != nil {
		return r, fmt.Errorf("enrolling: %w", err)
	}
	if o.AfterEnroll != nil {
		if err := o.AfterEnroll(ctx); err != nil {
			return r, err
		}
	}
	var before Work
	if o.Work != nil {
		if before, err = o.Work(ctx); err != nil {
			return r, err
		}
	}
	allocateBy := allocate
	if o.Mode == ModeBurst {
		allocateBy = burst
	}
	uuids, err := allocateBy(ctx, c, o, &r)
	if err != nil {
		return r, err
	}
	if o.Work != nil {
		// Let backends report their last statistics (about once a second).
		time.Sleep(1500 * time.Millisecond)
		after, err := o.Work(ctx)
		if err != nil {
			return r, err
		}
		r.Work = Work{after.Buffers - before.Buffers, after.CPU - before.CPU, after.DatabaseCPU - before.DatabaseCPU}
	}
	if err := check(ctx, c, uuids, &r); err != nil {
		return r, err
	}
	if !o.SkipDeletes {
		if err := deleteAll(ctx, c, o, uuids, &r); err != nil {
			return r, err
		}
	}
	return r, nil
}

func newClient(base string, concurrency int) *client {
	return &client{base: strings.TrimRight(base, "/"), http: &http.Client{
		Timeout: 30 * time.Second,
		Transport: &http.Transport{MaxIdleConnsPerHost: concurrency * 2, MaxIdleConns: concurrency * 2,
			MaxConnsPerHost: concurrency * 2},
	}}
}

// parallel runs fn(i) for i in [0, n) on workers goroutines, stopping at the
// first error, within timeout. It reports progress every two seconds and at
// the end.
func parallel(ctx context.Context, o Options, phase string, n int, fn func(context.Context, int) error) (time.Duration, error) {
	ctx, cancel := context.WithTimeoutCause(ctx, o.Timeout, fmt.Errorf("%s: not done after %s", phase, o.Timeout))
	defer cancel()
	ctx, fail := context.WithCancelCause(ctx)
	defer fail(nil)
	var next, done atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	stop := make(chan struct{})
	go func() {
		t := time.NewTicker(2 * time.Second)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
				o.Progress(phase, int(done.Load()), n)
			}
		}
	}()
	for range o.Concurrency {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				if err := fn(ctx, i); errors.Is(err, errEnough) {
					return
				} else if err != nil {
					fail(err)
					return
				}
				done.Add(1)
			}
		}()
	}
	wg.Wait()
	took := time.Since(start)
	close(stop)
	if err := context.Cause(ctx); err != nil {
		return took, err
	}
	o.Progress(phase, int(done.Load()), n)
	return took, nil
}

// errEnough, returned by parallel's fn, stops its worker without failing
// the phase (the phase's time is up: Options.Duration); the slots no
// worker took stay undone.
var errEnough = errors.New("enough")

func className(i int) string { return fmt.Sprintf("bench-%d", i) }

// ClassName is the resource class of the benchmark's class i ("bench-<i>").
func ClassName(i int) string { return className(i) }

// Traits are the traits half of the benchmark's allocations ask for, one
// each, at random.
func Traits() []string { return slices.Clone(traitPool) }

// benchNode is node i of the benchmark: its name, resource class and traits.
// Traits are spread evenly inside every class: a quarter of each class has
// each trait, a third of the nodes a second one.
func benchNode(i, classes int) (name, class string, traits []string) {
	k := i / classes
	traits = []string{traitPool[k%len(traitPool)]}
	if k%3 == 0 {
		traits = append(traits, traitPool[(k+1)%len(traitPool)])
	}
	return fmt.Sprintf("bench-node-%d", i), className(i % classes), traits
}

// NodeFile is the benchmark's nodes as a node file (`openstack baremetal
// create` format, JSON), for EnrollImport. It is written entry by entry
// (1,000,000 nodes: about 150 MB, and nothing else held).
func NodeFile(nodes, classes int) []byte {
	type entry struct {
		Name          string   `json:"name"`
		Driver        string   `json:"driver"`
		ResourceClass string   `json:"resource_class"`
		Traits        []string `json:"traits"`
	}
	return nodeFile(nodes, 130, func(i int) any {
		name, class, traits := benchNode(i, classes)
		return entry{name, "fake-hardware", class, traits}
	})
}

// nodeFile writes a node file, {"nodes":[...]}, of n entries, entry(i)
// each, encoded one at a time into a buffer grown once to n times size
// (an entry's length, about): the file is all a large fleet holds.
// NodeFile and LeaseNodeFile.
func nodeFile(n, size int, entry func(i int) any) []byte {
	var b bytes.Buffer
	b.Grow(n * size)
	b.WriteString(`{"nodes":[`)
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		doc, _ := json.Marshal(entry(i))
		b.Write(doc)
	}
	b.WriteString(`]}`)
	return b.Bytes()
}

func enrollBy(ctx context.Context, c *client, o Options) (Rate, error) {
	if o.Enrolled {
		return Rate{}, nil
	}
	switch o.Enroll {
	case EnrollNone:
		return Rate{}, nil
	case EnrollImport:
		if o.Import == nil {
			return Rate{}, errors.New("EnrollImport needs Options.Import")
		}
		file := NodeFile(o.Nodes, o.Classes)
		o.Log.Info("importing nodes", zap.Int("nodes", o.Nodes))
		start := time.Now()
		if err := o.Import(ctx, file); err != nil {
			return Rate{}, err
		}
		took := time.Since(start)
		// A user's import is a process that exits; this one goes on as the
		// load generator. Its heap is returned first: at 1,000,000 nodes the
		// file and the import's garbage left it 560 MB, and the collector's
		// work on it during the allocations took CPU from the system under
		// test (bursts 3,467-3,648/s without this, 3,651-3,979/s with it, in
		// alternate runs).
		file = nil
		debug.FreeOSMemory() // a collection, then the heap back to the OS
		return Rate{o.Nodes, took}, nil
	case EnrollAPI, EnrollIronic:
		took, err := enroll(ctx, c, o)
		return Rate{o.Nodes, took}, err
	}
	return Rate{}, fmt.Errorf("unknown enrolment method %q (api, ironic, import or none)", o.Enroll)
}

// enroll creates o.Nodes nodes across o.Classes resource classes through
// the API, each with one or two traits, and drives them to available with a
// known power state, as an operator does with the openstack CLI. With
// EnrollIronic each state change is waited for by GETs of the node (as
// `openstack baremetal node manage --wait` does) and, once every node is
// available, the class's nodes are listed, 1,000 a page: issue 44's
// enrolment.
func enroll(ctx context.Context, c *client, o Options) (time.Duration, error) {
	o.Log.Info("enrolling nodes through the API", zap.Int("nodes", o.Nodes))
	took, err := parallel(ctx, o, "enroll", o.Nodes, func(ctx context.Context, i int) error {
		var n struct {
			UUID string `json:"uuid"`
		}
		name, class, traits := benchNode(i, o.Classes)
		if o.Enroll == EnrollIronic {
			traits = ironicTraits
		}
		body := map[string]any{"name": name, "driver": "fake-hardware", "resource_class": class}
		if _, err := c.do(ctx, "POST", "/v1/nodes", body, &n); err != nil {
			return err
		}
		steps := []struct {
			method, path string
			body         any
			// wait: the node's field and value a client waits for
			field, value string
		}{
			{"PUT", "/v1/nodes/" + n.UUID + "/traits", map[string]any{"traits": traits}, "", ""},
			{"PUT", "/v1/nodes/" + n.UUID + "/states/provision", map[string]any{"target": "manage"}, "provision_state", "manageable"},
			{"PUT", "/v1/nodes/" + n.UUID + "/states/power", map[string]any{"target": "power off"}, "power_state", "power off"},
			{"PUT", "/v1/nodes/" + n.UUID + "/states/provision", map[string]any{"target": "provide"}, "provision_state", "available"},
		}
		for _, s := range steps {
			if _, err := c.do(ctx, s.method, s.path, s.body, nil); err != nil {
				return err
			}
			if o.Enroll == EnrollIronic && s.field != "" {
				if err := waitNode(ctx, c, n.UUID, s.field, s.value); err != nil {
					return err
				}
			}
		}
		return nil
	})
	if err != nil || o.Enroll != EnrollIronic {
		return took, err
	}
	start := time.Now()
	nodes, err := listAll(ctx, c, "/v1/nodes?resource_class="+className(0)+"&limit=1000", "nodes")
	if err != nil {
		return took, fmt.Errorf("listing the class's nodes: %w", err)
	}
	o.Log.Info("listed the class's nodes", zap.Int("nodes", len(nodes)), zap.Duration("took", time.Since(start)))
	return took + time.Since(start), nil
}

// waitNode GETs node u until its field has value (every 50 ms, within
// the phase's timeout).
func waitNode(ctx context.Context, c *client, u, field, value string) error {
	for {
		var n map[string]any
		if _, err := c.do(ctx, "GET", "/v1/nodes/"+u+"?fields="+field, nil, &n); err != nil {
			return err
		}
		if n[field] == value {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("node %s: %s is %v, waiting for %q: %w", u, field, n[field], value, context.Cause(ctx))
		case <-time.After(50 * time.Millisecond):
		}
	}
}

type allocDoc struct {
	UUID      string  `json:"uuid"`
	State     string  `json:"state"`
	NodeUUID  *string `json:"node_uuid"`
	CreatedAt string  `json:"created_at"`
	UpdatedAt *string `json:"updated_at"`
	LastError *string `json:"last_error"`
}

// serverLatency is updated_at - created_at.
func (a allocDoc) serverLatency() (time.Duration, bool) {
	if a.UpdatedAt == nil {
		return 0, false
	}
	c, err1 := time.Parse(time.RFC3339Nano, a.CreatedAt)
	u, err2 := time.Parse(time.RFC3339Nano, *a.UpdatedAt)
	return u.Sub(c), err1 == nil && err2 == nil
}

// waitFinished waits until allocation u is no longer allocating, as o.Mode
// says, and returns its document and the number of requests it took.
func waitFinished(ctx context.Context, c *client, o Options, u string) (allocDoc, int, error) {
	var a allocDoc
	for polls := 1; ; polls++ {
		select {
		case <-ctx.Done():
			return a, polls - 1, context.Cause(ctx)
		case <-time.After(o.PollInterval):
		}
		if _, err := c.do(ctx, "GET", "/v1/allocations/"+u, nil, &a); err != nil {
			return a, polls, err
		}
		if a.State != "allocating" {
			return a, polls, nil
		}
	}
}

// allocate runs the allocation phase: each client POSTs an allocation, waits
// until it sees it finished, and sends the next.
func allocate(ctx context.Context, c *client, o Options, r *Result) ([]string, error) {
	o.Log.Info("creating allocations", zap.Int("allocations", o.Allocations), zap.Int("concurrency", o.Concurrency),
		zap.String("mode", string(o.Mode)), zap.Duration("poll_interval", o.PollInterval))
	if o.Mode != ModePoll && o.Mode != ModeWait {
		return nil, fmt.Errorf("unknown wait mode %q (poll, wait or burst)", o.Mode)
	}
	n := o.Allocations
	sent := make([]time.Time, n)
	seen := make([]time.Time, n)
	post := make([]time.Duration, n)
	docs := make([]allocDoc, n)
	uuids := make([]string, n)
	var postErrors, polls atomic.Int64
	start := time.Now()
	_, err := parallel(ctx, o, "allocate", n, func(ctx context.Context, i int) error {
		if o.Duration > 0 && time.Since(start) >= o.Duration {
			return errEnough
		}
		uuids[i] = uuid.NewString()
		body := allocationBody(o, uuids[i], i)
		sent[i] = time.Now()
		var a allocDoc
		var hdr map[string]string
		if o.Mode == ModeWait {
			// Below the client's 30 s timeout.
			hdr = map[string]string{"Prefer": "wait=25"}
		}
		_, err := c.doHeader(ctx, "POST", "/v1/allocations", body, &a, hdr)
		post[i] = time.Since(sent[i])
		if err != nil {
			postErrors.Add(1)
			o.Log.Warn("POST failed", zap.Error(err))
			uuids[i] = ""
			return nil
		}
		if o.Mode == ModeWait && a.State != "allocating" {
			seen[i], docs[i] = time.Now(), a
			return nil
		}
		a, k, err := waitFinished(ctx, c, o, uuids[i])
		polls.Add(int64(k))
		if err != nil {
			return fmt.Errorf("waiting for allocation %s: %w", uuids[i], err)
		}
		seen[i], docs[i] = time.Now(), a
		return nil
	})
	if err != nil {
		return nil, err
	}
	sentAll := 0 // with o.Duration, the slots sent before the time was up
	for _, t := range sent {
		if !t.IsZero() {
			sentAll++
		}
	}
	r.Allocations, r.PostErrors, r.Polls = sentAll, int(postErrors.Load()), int(polls.Load())
	r.tally(o, uuids, sent, seen, post, func(i int) string { return docs[i].State }, func(i int) (time.Duration, bool) {
		return docs[i].serverLatency()
	})
	return uuids, nil
}

// tally fills r's counts of active and error allocations, its rate (first
// POST sent to the last allocation seen finished; with o.Duration, those
// seen finished within it) and its latencies from a run's allocations:
// uuids[i] is "" where the POST failed or none was sent; sent, seen and
// post are when allocation i's POST was sent, when it was seen finished
// and how long the POST took; state is how it ended, server its server
// latency where known. With o.Timeline it prints the run's timeline.
func (r *Result) tally(o Options, uuids []string, sent, seen []time.Time, post []time.Duration,
	state func(i int) string, server func(i int) (time.Duration, bool)) {
	var cl, srv []time.Duration
	var first, last time.Time
	for i := range uuids {
		if uuids[i] == "" {
			continue
		}
		switch state(i) {
		case "active":
			r.Active++
		case "error":
			r.Error++
		}
		cl = append(cl, seen[i].Sub(sent[i]))
		if d, ok := server(i); ok {
			srv = append(srv, d)
		}
		if first.IsZero() || sent[i].Before(first) {
			first = sent[i]
		}
		if seen[i].After(last) {
			last = seen[i]
		}
	}
	var posts []time.Duration
	for i := range post {
		if !sent[i].IsZero() {
			posts = append(posts, post[i])
		}
	}
	r.Client, r.Server, r.Post = latencyOf(cl), latencyOf(srv), latencyOf(posts)
	r.Allocate = Rate{len(cl), last.Sub(first)}
	if o.Duration > 0 && last.Sub(first) > o.Duration {
		within := 0
		for i := range uuids {
			if uuids[i] != "" && !seen[i].After(first.Add(o.Duration)) {
				within++
			}
		}
		r.Allocate = Rate{within, o.Duration}
	}
	if o.Timeline {
		printTimeline(sent, seen, post, uuids)
	}
}

// printTimeline prints client latency by send order, in tenths of the run:
// where the tail is.
func printTimeline(sent, seen []time.Time, post []time.Duration, uuids []string) {
	type sl struct {
		t    time.Time
		d, p time.Duration
	}
	var all []sl
	for i := range sent {
		if uuids[i] != "" {
			all = append(all, sl{sent[i], seen[i].Sub(sent[i]), post[i]})
		}
	}
	sort.Slice(all, func(i, j int) bool { return all[i].t.Before(all[j].t) })
	for k := 0; k < 10; k++ {
		part := all[k*len(all)/10 : (k+1)*len(all)/10]
		if len(part) == 0 {
			continue
		}
		var mx, sum, psum, pmx time.Duration
		for _, x := range part {
			mx, pmx = max(mx, x.d), max(pmx, x.p)
			sum += x.d
			psum += x.p
		}
		n := time.Duration(len(part))
		fmt.Printf("tenth %d: POST-to-seen mean %s max %s; POST answered mean %s max %s\n", k+1,
			(sum / n).Round(time.Millisecond), mx.Round(time.Millisecond),
			(psum / n).Round(time.Millisecond), pmx.Round(time.Millisecond))
	}
}

// check counts double bookings through the API: nodes held by two active
// allocations, and active allocations their node does not name.
func check(ctx context.Context, c *client, uuids []string, r *Result) error {
	all, err := listAll(ctx, c, "/v1/allocations?fields=uuid,state,node_uuid&limit=1000", "allocations")
	if err != nil {
		return err
	}
	mine := map[string]bool{}
	for _, u := range uuids {
		mine[u] = true
	}
	held := map[string]int{}
	var active []allocDoc
	for _, raw := range all {
		var a allocDoc
		if err := json.Unmarshal(raw, &a); err != nil {
			return err
		}
		if a.State == "active" && a.NodeUUID != nil {
			held[*a.NodeUUID]++
			active = append(active, a)
		}
	}
	for _, n := range held {
		if n > 1 {
			r.DoubleBooked++
		}
	}
	// Only the nodes with an instance (at 1,000,000 nodes, listing them
	// all took most of the run). A node names its allocation by its
	// instance_uuid (the allocation's uuid): Ironic cannot list nodes with
	// allocation_uuid, and in front of Ironic the node list is Ironic's, so
	// this also checks that both systems agree.
	nodes, err := listAll(ctx, c, "/v1/nodes?associated=True&fields=uuid,instance_uuid&limit=1000", "nodes")
	if err != nil {
		return err
	}
	nodeAlloc := map[string]string{}
	for _, raw := range nodes {
		var n struct {
			UUID         string  `json:"uuid"`
			InstanceUUID *string `json:"instance_uuid"`
		}
		if err := json.Unmarshal(raw, &n); err != nil {
			return err
		}
		if n.InstanceUUID != nil {
			nodeAlloc[n.UUID] = *n.InstanceUUID
		}
	}
	for _, a := range active {
		if nodeAlloc[*a.NodeUUID] != a.UUID {
			r.DoubleBooked++
		}
	}
	return nil
}

// deleteAll deletes every allocation the run created with o.Concurrency
// clients.
func deleteAll(ctx context.Context, c *client, o Options, uuids []string, r *Result) error {
	var live []string
	for _, u := range uuids {
		if u != "" {
			live = append(live, u)
		}
	}
	o.Log.Info("deleting allocations", zap.Int("allocations", len(live)))
	var failures atomic.Int64
	took, err := parallel(ctx, o, "delete", len(live), func(ctx context.Context, i int) error {
		if _, err := c.do(ctx, "DELETE", "/v1/allocations/"+live[i], nil, nil); err != nil {
			failures.Add(1)
			o.Log.Warn("DELETE failed", zap.Error(err))
		}
		return nil
	})
	r.Delete, r.DeleteErrors = Rate{len(live), took}, int(failures.Load())
	return err
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
