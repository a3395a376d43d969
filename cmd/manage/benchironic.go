package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"text/tabwriter"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/spf13/cobra"
	"go.uber.org/zap"

	"github.com/metalloc/metalloc/db"
	"github.com/metalloc/metalloc/devstack"
	"github.com/metalloc/metalloc/loadgen"
)

// benchIronicCmd is `metalloc-manage bench ironic`: the side-by-side of
// metalloc in front of a real Ironic and that Ironic alone (docs/ironic.md).
func benchIronicCmd() *cobra.Command {
	var sizes, systems, concurrency, maxInFlight string
	var allocations, rounds, conductors, ironicConductors, apiWorkers int
	var mode, apiServer string
	var poll, duration time.Duration
	c := &cobra.Command{
		Use:   "ironic",
		Short: "allocations through metalloc in front of a real Ironic, side by side with the same Ironic alone",
		Long: "Starts a real Ironic 21.4 from Debian's packages (--ironic-conductors conductors on json-rpc,\n" +
			"fake-hardware, its API served as Debian's ironic-api package serves it: uwsgi_python3 with the\n" +
			"package's ini, 8 processes; see --ironic-api-server, --ironic-api-workers), its own database on DATABASE_URL's\n" +
			"server) and metalloc in front of it (metalloc-api and --conductors conductors on DATABASE_URL, with\n" +
			"ironic.endpoint set), enrols four template nodes through Ironic's API (one resource class, one trait\n" +
			"each) and clones them in Ironic's database up to each size of --nodes. At each size, --rounds\n" +
			"times, it runs the same load against Ironic alone and through metalloc, interleaved: --concurrency\n" +
			"clients each POST an allocation (half of them asking for a trait), wait for it (--mode: poll every\n" +
			"--poll-interval; wait: metalloc's Prefer: wait, which Ironic answers by polling), and send the next,\n" +
			"--allocations in all (with --duration, until that window has passed), then delete them all. Between runs it waits until both systems agree that\n" +
			"every node is free (--systems runs one side only). --concurrency and --max-in-flight take lists:\n" +
			"every client count runs with every limit on what each conductor has in flight to Ironic (adaptive,\n" +
			"or a fixed N: its conductors restarted with that setting), in an order reversed every other round,\n" +
			"and a summary compares the adaptive limit with the best fixed one at each client count and with\n" +
			"its own rate at the fewest clients. Prints allocations/s and client p50/p99 per\n" +
			"run (for metalloc's, also its requests to Ironic per allocation, their mean round trips and the\n" +
			"mean time Ironic takes to settle an allocation after answering its creation, as metalloc sees it\n" +
			"and as Ironic's timestamps say), the medians per size and system, and the load average.",
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, log, err := loadDatabase(cmd)
			if err != nil {
				return err
			}
			ns, err := intList(sizes, 4)
			if err != nil {
				return fmt.Errorf("--nodes %q: want sizes of at least 4, comma-separated (500,2000)", sizes)
			}
			slices.Sort(ns)
			if duration < 0 {
				return fmt.Errorf("--duration %s: want 0 (runs of --allocations) or a window such as 60s", duration)
			}
			b := &ironicBench{log: log, allocations: allocations, duration: duration, mode: loadgen.Mode(mode), poll: poll}
			if b.concurrencies, err = intList(concurrency, 1); err != nil {
				return fmt.Errorf("--concurrency %q: want client counts of at least 1, comma-separated (16,64,256)", concurrency)
			}
			if b.limits, err = parseLimitSettings(maxInFlight); err != nil {
				return err
			}
			ctx, stop := signalContext(cmd)
			defer stop()
			for _, s := range strings.Split(systems, ",") {
				switch s = strings.TrimSpace(s); s {
				case "ironic", "metalloc":
					b.systems = append(b.systems, s)
				default:
					return fmt.Errorf("--systems %q: want ironic, metalloc or both, comma-separated", systems)
				}
			}
			switch apiServer {
			case "uwsgi":
				b.uwsgi = true
			case "eventlet":
				if apiWorkers == 0 {
					apiWorkers = runtime.NumCPU()
				}
			default:
				return fmt.Errorf("--ironic-api-server %q: want uwsgi or eventlet", apiServer)
			}
			return b.run(ctx, cfg.Database.URL, ns, rounds, conductors, ironicConductors, apiWorkers)
		},
	}
	c.Flags().StringVar(&sizes, "nodes", "500,2000", "fleet sizes, comma-separated, run in increasing order")
	c.Flags().StringVar(&systems, "systems", "ironic,metalloc", "which systems to run (ironic: Ironic alone; metalloc: in front of it)")
	c.Flags().IntVar(&allocations, "allocations", 300, "allocations per run")
	c.Flags().StringVar(&concurrency, "concurrency", "16", "concurrent API clients (a comma-separated list runs each)")
	c.Flags().StringVar(&maxInFlight, "max-in-flight", "", "limits on what each conductor has in flight to Ironic to run, comma-separated: adaptive (ironic.adaptive_limit, ironic.max_in_flight its ceiling) or a fixed N (ironic.adaptive_limit off, ironic.max_in_flight N); empty: the conductors' configuration as it is")
	c.Flags().IntVar(&rounds, "rounds", 2, "runs of each system per size (interleaved)")
	c.Flags().IntVar(&conductors, "conductors", 2, "metalloc conductors")
	c.Flags().IntVar(&ironicConductors, "ironic-conductors", 2, "Ironic conductors")
	c.Flags().StringVar(&apiServer, "ironic-api-server", "uwsgi", "how Ironic's API is served: uwsgi (as Debian's ironic-api package runs it: uwsgi_python3 with /etc/ironic/ironic-api-uwsgi.ini) or eventlet (the ironic-api command)")
	c.Flags().IntVar(&apiWorkers, "ironic-api-workers", 0, "Ironic API processes (0: the server's default: uwsgi, Debian's ini, 8; eventlet, [api]api_workers' default, the CPU count)")
	c.Flags().StringVar(&mode, "mode", string(loadgen.ModePoll), "how clients wait for their allocation: poll or wait")
	c.Flags().DurationVar(&poll, "poll-interval", 100*time.Millisecond, "pause between a client's GETs of its allocation")
	c.Flags().DurationVar(&duration, "duration", 0, "when set, each run also stops sending once this long has passed (--allocations stays the most sent) and its rate is the allocations seen finished within it: whole minutes measure every phase of Ironic's periodic tasks (every 60 s) once")
	return c
}

// ironicBench is one side-by-side run.
type ironicBench struct {
	log           *zap.Logger
	allocations   int
	duration      time.Duration
	concurrencies []int
	limits        []limitSetting
	limit         limitSetting // the conductors' current setting
	mode          loadgen.Mode
	poll          time.Duration
	systems       []string
	uwsgi         bool
	ir            *devstack.Ironic
	stack         *devstack.Stack
	free          func(context.Context) (int, error)
	resync        func(context.Context) error
}

// intList parses a comma-separated list of whole numbers, each at least
// least (a flag's value: "16,64,256"); spaces around them are allowed.
func intList(s string, least int) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil {
			return nil, err
		}
		if n < least {
			return nil, fmt.Errorf("%d is below %d", n, least)
		}
		out = append(out, n)
	}
	return out, nil
}

// limitSetting is one limit on what each conductor has in flight to
// Ironic that bench ironic runs (--max-in-flight): adaptive, a fixed
// count, or (the zero value) the conductors' configuration as it is.
type limitSetting struct {
	adaptive bool
	fixed    int
}

func (l limitSetting) String() string {
	switch {
	case l.adaptive:
		return "adaptive"
	case l.fixed > 0:
		return "fixed " + strconv.Itoa(l.fixed)
	}
	return "as configured"
}

// env is the conductors' environment for l.
func (l limitSetting) env() []string {
	switch {
	case l.adaptive:
		return []string{"METALLOC_IRONIC_ADAPTIVE_LIMIT=true"}
	case l.fixed > 0:
		return []string{"METALLOC_IRONIC_ADAPTIVE_LIMIT=false", "METALLOC_IRONIC_MAX_IN_FLIGHT=" + strconv.Itoa(l.fixed)}
	}
	return nil
}

// parseLimitSettings reads --max-in-flight: "" is the configuration as it
// is; otherwise a comma-separated list of adaptive and counts >= 1.
func parseLimitSettings(s string) ([]limitSetting, error) {
	if strings.TrimSpace(s) == "" {
		return []limitSetting{{}}, nil
	}
	var out []limitSetting
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if f == "adaptive" {
			out = append(out, limitSetting{adaptive: true})
			continue
		}
		n, err := strconv.Atoi(f)
		if err != nil || n < 1 {
			return nil, fmt.Errorf("--max-in-flight %q: want adaptive or counts of at least 1, comma-separated (adaptive,1,2,4,8)", s)
		}
		out = append(out, limitSetting{fixed: n})
	}
	return out, nil
}

// benchRow is one run's figures.
type benchRow struct {
	nodes   int
	system  string
	clients int
	limit   limitSetting // metalloc's runs
	round   int
	r       loadgen.Result
}

func (b *ironicBench) run(ctx context.Context, dbURL string, sizes []int, rounds, conductors, ironicConductors, apiWorkers int) error {
	fmt.Printf("load average at start: %s\n", loadAverage())
	dir, err := os.MkdirTemp("", "bench-ironic-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	b.log.Info("starting Ironic", zap.Int("conductors", ironicConductors), zap.Bool("uwsgi", b.uwsgi), zap.Int("api_workers", apiWorkers))
	b.ir, err = devstack.StartIronic(ctx, devstack.IronicOptions{DatabaseURL: dbURL, Dir: dir, Conductors: ironicConductors,
		APIWorkers: apiWorkers, UWSGI: b.uwsgi, Log: b.log})
	if err != nil {
		return err
	}
	defer b.ir.Stop()
	traits := loadgen.Traits()
	var templates []devstack.IronicNode
	for k, t := range traits {
		templates = append(templates, devstack.IronicNode{Name: fmt.Sprintf("bench-template-%d", k),
			ResourceClass: loadgen.ClassName(0), Traits: []string{t}})
	}
	tmpl, err := b.ir.EnrollAvailable(ctx, templates, len(templates))
	if err != nil {
		return err
	}
	b.stack, err = devstack.Start(ctx, devstack.Options{DatabaseURL: dbURL, Conductors: conductors, Log: b.log,
		Env: []string{"METALLOC_IRONIC_ENDPOINT=" + b.ir.URL}})
	if err != nil {
		return err
	}
	defer b.stack.Stop(context.WithoutCancel(ctx))
	pool, err := db.Open(ctx, dbURL, db.PoolOptions{ApplicationName: "metalloc-bench"})
	if err != nil {
		return err
	}
	defer pool.Close()
	b.free = func(ctx context.Context) (int, error) {
		var n int
		err := pool.QueryRow(ctx, `SELECT count(*) FROM free_nodes`).Scan(&n)
		return n, err
	}
	// A full sync now (the sync lease handed back: the conductor that takes
	// it syncs at once), instead of at the next minute of the schedule.
	b.resync = func(ctx context.Context) error {
		_, err := pool.Exec(ctx, `UPDATE ironic_sync_lease SET holder = NULL`)
		return err
	}
	have := len(tmpl)
	var rows []benchRow
	for _, size := range sizes {
		if need := size - have; need > 0 {
			for k := range tmpl {
				n := need / len(tmpl)
				if k < need%len(tmpl) {
					n++
				}
				if n == 0 {
					continue
				}
				if _, err := b.ir.CloneNodes(ctx, tmpl[k], n, fmt.Sprintf("bench-%d-%d", size, k)); err != nil {
					return err
				}
			}
			have = size
		}
		for round := 1; round <= rounds; round++ {
			for _, run := range b.order(round) {
				if run.system == "metalloc" && run.limit != b.limit {
					b.log.Info("restarting the conductors", zap.Stringer("limit", run.limit))
					if err := b.stack.RestartConductors(ctx, run.limit.env()...); err != nil {
						return err
					}
					b.limit = run.limit
				}
				if err := b.settle(ctx, size); err != nil {
					return err
				}
				r, err := b.once(ctx, run.system, size, run.clients)
				if err != nil {
					return fmt.Errorf("%s at %d nodes, %d clients, round %d: %w", run.system, size, run.clients, round, err)
				}
				run.nodes, run.round, run.r = size, round, r
				rows = append(rows, run)
				label := run.system
				if run.system == "metalloc" && run.limit != (limitSetting{}) {
					label += " (" + run.limit.String() + ")"
				}
				fmt.Printf("%d nodes, %s, %d clients, round %d: %.1f allocations/s, client p50 %s p99 %s (active %d, error %d, failed POSTs %d, DELETEs %d, GETs per allocation %.1f)\n",
					size, label, run.clients, round, r.Allocate.PerSecond(), r.Client.P50.Round(time.Millisecond),
					r.Client.P99.Round(time.Millisecond), r.Active, r.Error, r.PostErrors, r.DeleteErrors,
					float64(r.Polls)/float64(max(r.Allocations, 1)))
			}
		}
	}
	printBenchTable(rows)
	printLimitSummary(os.Stdout, rows)
	fmt.Printf("load average at end: %s\n", loadAverage())
	return nil
}

// order is round's runs: each client count with each system and, for
// metalloc, each limit setting; every other round in reverse, so that
// drift over time does not favour one setting.
func (b *ironicBench) order(round int) []benchRow {
	var runs []benchRow
	for _, c := range b.concurrencies {
		for _, system := range b.systems {
			if system == "ironic" {
				runs = append(runs, benchRow{system: system, clients: c})
				continue
			}
			for _, l := range b.limits {
				runs = append(runs, benchRow{system: system, clients: c, limit: l})
			}
		}
	}
	if round%2 == 0 {
		slices.Reverse(runs)
	}
	return runs
}

// once runs one load of clients clients against system ("ironic":
// Ironic's API; "metalloc": metalloc-api in front of it) and fails on
// double bookings or on allocations that did not become active.
func (b *ironicBench) once(ctx context.Context, system string, size, clients int) (loadgen.Result, error) {
	url := b.stack.APIURL
	if system == "ironic" {
		url = b.ir.URL
	}
	before := b.ironicRequests(ctx)
	window := &runWindow{start: time.Now(), duration: b.duration}
	limits := func() string { return "" }
	if system == "metalloc" {
		limits = b.sampleLimits(ctx, window)
	}
	r, err := loadgen.Run(ctx, loadgen.Options{APIURL: url, Nodes: size, Allocations: b.allocations,
		Duration: b.duration, Concurrency: clients, Classes: 1, Enroll: loadgen.EnrollNone, Mode: b.mode, PollInterval: b.poll,
		Timeout: 30 * time.Minute, Log: b.log,
		Progress: func(phase string, done, total int) {
			window.progress(phase, done, total)
			b.log.Info("progress", zap.String("system", system), zap.String("phase", phase), zap.Int("done", done), zap.Int("total", total))
		}})
	limitSummary := limits()
	if err != nil {
		return r, err
	}
	if r.DoubleBooked > 0 {
		return r, fmt.Errorf("%d nodes double-booked", r.DoubleBooked)
	}
	if system == "metalloc" {
		fmt.Printf("  %s\n", limitSummary)
		after := b.ironicRequests(ctx)
		var parts []string
		for _, k := range []string{"create", "get", "delete"} {
			parts = append(parts, fmt.Sprintf("%s %.2f", k, (after[k]-before[k])/float64(r.Allocations)))
		}
		fmt.Printf("  metalloc's requests to Ironic per allocation: %s\n", strings.Join(parts, ", "))
		mean := func(k string) string {
			n := after[k+"_count"] - before[k+"_count"]
			if n == 0 {
				return "-"
			}
			return (time.Duration((after[k+"_seconds"] - before[k+"_seconds"]) / n * float64(time.Second))).Round(time.Millisecond / 10).String()
		}
		fmt.Printf("  mean round trip to Ironic: create %s, get %s; mean settle in Ironic after its answer to the create: %s; mean time in Ironic by its timestamps: %s\n",
			mean("create"), mean("get"), mean("settle"), mean("in_ironic"))
	}
	return r, nil
}

// conductorMetrics reads every conductor's /metrics: one map of metric
// families by name per conductor that answered.
func (b *ironicBench) conductorMetrics(ctx context.Context) []map[string]*dto.MetricFamily {
	var out []map[string]*dto.MetricFamily
	for _, p := range b.stack.Conductors {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, p.MetricsURL, nil)
		if err != nil {
			continue
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			continue
		}
		parser := expfmt.NewTextParser(model.UTF8Validation)
		families, err := parser.TextToMetricFamilies(resp.Body)
		resp.Body.Close()
		if err == nil {
			out = append(out, families)
		}
	}
	return out
}

// ironicRequests sums the conductors' Ironic backend metrics: the
// requests by kind (metalloc_ironic_allocation_requests_total{request}),
// and the sums and counts of their round trips (key "<kind>_seconds",
// "<kind>_count" from metalloc_ironic_request_seconds) and of the settle
// times ("settle_seconds", "settle_count") and of Ironic's own times
// ("in_ironic_seconds", "in_ironic_count").
func (b *ironicBench) ironicRequests(ctx context.Context) map[string]float64 {
	out := map[string]float64{}
	for _, families := range b.conductorMetrics(ctx) {
		byRequest := func(m *dto.Metric) string {
			for _, l := range m.GetLabel() {
				if l.GetName() == "request" {
					return l.GetValue()
				}
			}
			return ""
		}
		for _, m := range families["metalloc_ironic_allocation_requests_total"].GetMetric() {
			out[byRequest(m)] += m.GetCounter().GetValue()
		}
		for _, m := range families["metalloc_ironic_request_seconds"].GetMetric() {
			out[byRequest(m)+"_seconds"] += m.GetHistogram().GetSampleSum()
			out[byRequest(m)+"_count"] += float64(m.GetHistogram().GetSampleCount())
		}
		for k, name := range map[string]string{"settle": "metalloc_ironic_allocation_settle_seconds",
			"in_ironic": "metalloc_ironic_allocation_in_ironic_seconds"} {
			for _, m := range families[name].GetMetric() {
				out[k+"_seconds"] += m.GetHistogram().GetSampleSum()
				out[k+"_count"] += float64(m.GetHistogram().GetSampleCount())
			}
		}
	}
	return out
}

// runWindow is a run's allocation window: from its start until its
// allocation phase ends (loadgen's last progress report of it, or the
// first of a later phase) or, with --duration, that long after the start,
// whichever comes first. The summary's limit and in-flight means are
// taken within it: after it the run drains, checks and deletes, with
// nothing of it in flight in Ironic (averaged over those too, the means
// read about half: docs/benchmarks.md, 2026-12-04).
type runWindow struct {
	start    time.Time
	duration time.Duration // 0: until the phase ends
	closed   atomic.Bool
}

// progress is loadgen's progress report (Options.Progress): phase, with
// done of total finished.
func (w *runWindow) progress(phase string, done, total int) {
	if phase != "allocate" || done >= total {
		w.closed.Store(true)
	}
}

// open says whether the window is open at now.
func (w *runWindow) open(now time.Time) bool {
	return !w.closed.Load() && (w.duration <= 0 || now.Sub(w.start) < w.duration)
}

// sampleLimits reads, every second until the returned function is called,
// the sum over the conductors of metalloc_ironic_allocation_limit and of
// metalloc_ironic_allocations_in_flight; that function stops the sampling
// and says what the limit was within window (mean, 10th and 90th
// percentile, range) and the mean in flight in Ironic. Each sample, in
// the window or not, is also logged at debug level (log.level debug), per
// conductor: limit, queue estimate, cap, in flight, waiting; beside the
// progress lines they show what the limits did when the rate moved.
func (b *ironicBench) sampleLimits(ctx context.Context, window *runWindow) func() string {
	ctx, cancel := context.WithCancel(ctx)
	var limits, inFlight []float64
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			var l, f float64
			// Per conductor, for the debug log: limit, queue estimate, cap,
			// in flight, waiting.
			var perLimit, perQueue, perCap, perInFlight, perWaiting []float64
			gauge := func(families map[string]*dto.MetricFamily, name string, to *[]float64) (sum float64) {
				for _, m := range families[name].GetMetric() {
					v := m.GetGauge().GetValue()
					sum += v
					*to = append(*to, v)
				}
				return sum
			}
			for _, families := range b.conductorMetrics(ctx) {
				l += gauge(families, "metalloc_ironic_allocation_limit", &perLimit)
				f += gauge(families, "metalloc_ironic_allocations_in_flight", &perInFlight)
				gauge(families, "metalloc_ironic_allocation_queue", &perQueue)
				gauge(families, "metalloc_ironic_allocation_limit_cap", &perCap)
				gauge(families, "metalloc_ironic_allocations_waiting", &perWaiting)
			}
			b.log.Debug("limits on Ironic", zap.Float64s("limit", perLimit), zap.Float64s("queue", perQueue), zap.Float64s("cap", perCap),
				zap.Float64s("in_flight", perInFlight), zap.Float64s("waiting", perWaiting))
			if window.open(time.Now()) {
				limits, inFlight = append(limits, l), append(inFlight, f)
			}
		}
	}()
	return func() string {
		cancel()
		<-done
		if len(limits) == 0 {
			return "limit on Ironic: not sampled"
		}
		mean := func(v []float64) float64 {
			var sum float64
			for _, x := range v {
				sum += x
			}
			return sum / float64(len(v))
		}
		sorted := slices.Clone(limits)
		slices.Sort(sorted)
		q := func(p float64) float64 { return sorted[int(p*float64(len(sorted)-1))] }
		return fmt.Sprintf("limit on Ironic (sum over conductors, %d samples a second apart in the run's window): mean %.1f, p10 %.1f, p90 %.1f, range %.1f-%.1f; in flight in Ironic: mean %.1f",
			len(limits), mean(limits), q(0.1), q(0.9), sorted[0], sorted[len(sorted)-1], mean(inFlight))
	}
}

// settle waits until Ironic has no allocation left and metalloc's mirror
// shows all size nodes free (after a full sync it asks for when it does
// not at once).
func (b *ironicBench) settle(ctx context.Context, size int) error {
	start := time.Now()
	deadline := start.Add(5 * time.Minute)
	resynced := false
	for {
		var list struct {
			Allocations []struct {
				UUID string `json:"uuid"`
			} `json:"allocations"`
		}
		_, err := b.ir.Do(ctx, http.MethodGet, "/v1/allocations?fields=uuid&limit=1000", nil, &list)
		if err != nil {
			return err
		}
		// A DELETE of the last run Ironic refused (its node locked by a
		// periodic task a moment): delete it again.
		for _, a := range list.Allocations {
			if _, err := b.ir.Do(ctx, http.MethodDelete, "/v1/allocations/"+a.UUID, nil, nil); err != nil {
				b.log.Info("deleting a leftover allocation in Ironic", zap.String("allocation", a.UUID), zap.Error(err))
			}
		}
		free, err := b.free(ctx)
		if err != nil {
			return err
		}
		if len(list.Allocations) == 0 && free == size {
			return nil
		}
		if len(list.Allocations) == 0 && !resynced && time.Since(start) > 2*time.Second {
			if err := b.resync(ctx); err != nil {
				return err
			}
			resynced = true
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not settled after 5 minutes: Ironic has allocations: %t, metalloc sees %d of %d nodes free",
				len(list.Allocations) > 0, free, size)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// benchKey groups bench ironic's runs: one size, system, client count and
// (metalloc's) limit setting.
type benchKey struct {
	nodes   int
	system  string
	clients int
	limit   limitSetting
}

// benchMedians groups rows by benchKey, in the order first seen, with the
// median of their allocations/s.
func benchMedians(rows []benchRow) (keys []benchKey, by map[benchKey][]loadgen.Result, rate map[benchKey]float64) {
	by = map[benchKey][]loadgen.Result{}
	for _, r := range rows {
		k := benchKey{r.nodes, r.system, r.clients, r.limit}
		if _, ok := by[k]; !ok {
			keys = append(keys, k)
		}
		by[k] = append(by[k], r.r)
	}
	slices.SortStableFunc(keys, func(a, b benchKey) int {
		if a.nodes != b.nodes {
			return a.nodes - b.nodes
		}
		return a.clients - b.clients
	})
	rate = map[benchKey]float64{}
	for _, k := range keys {
		rate[k] = medianOf(by[k], func(r loadgen.Result) float64 { return r.Allocate.PerSecond() })
	}
	return keys, by, rate
}

// medianOf is the median of f over rs.
func medianOf(rs []loadgen.Result, f func(loadgen.Result) float64) float64 {
	v := make([]float64, len(rs))
	for i, r := range rs {
		v[i] = f(r)
	}
	slices.Sort(v)
	if len(v)%2 == 1 {
		return v[len(v)/2]
	}
	return (v[len(v)/2-1] + v[len(v)/2]) / 2
}

// printBenchTable prints, per size, client count, system and limit
// setting, the median of the rounds, and metalloc's speed-up over Ironic
// alone.
func printBenchTable(rows []benchRow) {
	keys, by, rate := benchMedians(rows)
	w := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(w, "nodes\tclients\tsystem\tlimit\tallocations/s (median)\tclient p50\tclient p99\truns")
	for _, k := range keys {
		rs := by[k]
		p50 := time.Duration(medianOf(rs, func(r loadgen.Result) float64 { return float64(r.Client.P50) }))
		p99 := time.Duration(medianOf(rs, func(r loadgen.Result) float64 { return float64(r.Client.P99) }))
		limit := "-"
		if k.system == "metalloc" {
			limit = k.limit.String()
		}
		fmt.Fprintf(w, "%d\t%d\t%s\t%s\t%.1f\t%s\t%s\t%d\n", k.nodes, k.clients, k.system, limit, rate[k],
			p50.Round(time.Millisecond), p99.Round(time.Millisecond), len(rs))
	}
	_ = w.Flush()
	for _, k := range keys {
		alone := rate[benchKey{k.nodes, "ironic", k.clients, limitSetting{}}]
		if k.system == "metalloc" && alone > 0 {
			fmt.Printf("%d nodes, %d clients: metalloc in front of Ironic (%s) %.1fx Ironic alone\n", k.nodes, k.clients, k.limit, rate[k]/alone)
		}
	}
}

// printLimitSummary compares, when the runs had the adaptive limit and at
// least one fixed one, the adaptive limit's median rate at each size and
// client count with the best fixed limit's there (issue 44: within 90 %)
// and with its own rate at the fewest clients (never below it).
func printLimitSummary(w io.Writer, rows []benchRow) {
	keys, _, rate := benchMedians(rows)
	type at struct{ nodes, clients int }
	adaptive := map[at]float64{}
	type best struct {
		limit limitSetting
		rate  float64
	}
	fixed := map[at]best{}
	var points []at
	for _, k := range keys {
		if k.system != "metalloc" {
			continue
		}
		p := at{k.nodes, k.clients}
		switch {
		case k.limit.adaptive:
			adaptive[p] = rate[k]
			points = append(points, p)
		case k.limit.fixed > 0 && rate[k] > fixed[p].rate:
			fixed[p] = best{k.limit, rate[k]}
		}
	}
	fewest := map[int]int{}
	for _, p := range points {
		if c, ok := fewest[p.nodes]; !ok || p.clients < c {
			fewest[p.nodes] = p.clients
		}
	}
	for _, p := range points {
		f, ok := fixed[p]
		if !ok {
			continue
		}
		base := adaptive[at{p.nodes, fewest[p.nodes]}]
		fmt.Fprintf(w, "%d nodes, %d clients: adaptive %.1f/s, %.0f%% of the best fixed limit (%s, %.1f/s), %.0f%% of its own rate with %d clients (%.1f/s)\n",
			p.nodes, p.clients, adaptive[p], 100*adaptive[p]/f.rate, f.limit, f.rate, 100*adaptive[p]/base, fewest[p.nodes], base)
	}
}

// loadAverage is /proc/loadavg's first three figures.
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}
