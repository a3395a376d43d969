package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/cobra"
	"go.uber.org/zap"

	"github.com/metalloc/metalloc/db"
	"github.com/metalloc/metalloc/devstack"
	"github.com/metalloc/metalloc/loadgen"
	"github.com/metalloc/metalloc/placement/client"
)

func benchCmd() *cobra.Command {
	c := &cobra.Command{Use: "bench", Short: "benchmarks"}
	var o loadgen.Options
	var conductors int
	var api, backend, enroll, placementMode string
	var openstackPlacement, waitMirror bool
	var report func() string // the footprint lines, when bench started the stack
	var importWork string    // the import's CPU, with --enroll import
	alloc := &cobra.Command{
		Use:   "allocations",
		Short: "enroll nodes, fire allocations through the API, report allocations/s, latency and double-booking",
		Long: "Starts metalloc-api and --conductors metalloc-conductor processes on DATABASE_URL (unless --api\n" +
			"points at a running API), enrolls --nodes nodes (--enroll api: through the Ironic API as the openstack\n" +
			"CLI does, node create, traits, manage, power off, provide; --enroll import: metalloc-manage node\n" +
			"import), then --concurrency clients each POST an allocation, poll it every --poll-interval until it\n" +
			"is no longer allocating and send the next, --allocations in all; finally every allocation is\n" +
			"deleted by --concurrency clients. Prints enrolment nodes/s, allocations/s and POST-to-seen-active\n" +
			"latency as the clients saw them, the server-side latency (updated_at - created_at), deletes/s and\n" +
			"a double-booking count. Nothing is vacuumed or analyzed: the run sees what a client would. Use a\n" +
			"fresh database.\n" +
			"With --backend placement the conductors allocate through metalloc-placement (started too, with\n" +
			"randomized allocation candidates); after enrolling, the run waits until the conductors' resource\n" +
			"tracker has mirrored every node into Placement, then fires the allocations.",
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, log, err := load(cmd)
			if err != nil {
				return err
			}
			ctx, stop := signalContext(cmd)
			defer stop()
			o.Log = log
			o.Progress = func(phase string, done, total int) {
				log.Info("progress", zap.String("phase", phase), zap.Int("done", done), zap.Int("total", total))
			}
			o.APIURL = api
			o.Enroll = loadgen.Enrolment(enroll)
			if o.Enroll == loadgen.EnrollImport {
				if err := cfg.RequireDatabase(); err != nil {
					return err
				}
				o.Import = func(ctx context.Context, file []byte) error {
					pool, err := db.Open(ctx, cfg.Database.URL, db.PoolOptions{ApplicationName: "metalloc-manage"})
					if err != nil {
						return err
					}
					defer pool.Close()
					// The import's CPU: this process's and the database's
					// (read before its connections close).
					before, err := db.ReadWork(ctx, pool, os.Getpid())
					if err != nil {
						return err
					}
					if err := importWith(ctx, pool, bytes.NewReader(file), "bench nodes", importOptions{available: true, waitPlacement: true}, log); err != nil {
						return err
					}
					after, err := db.ReadWork(ctx, pool, os.Getpid())
					if err != nil {
						return err
					}
					d := after.Since(before)
					per := func(t time.Duration) string {
						return (t * 1000 / time.Duration(max(o.Nodes, 1))).Round(time.Millisecond).String()
					}
					importWork = fmt.Sprintf("import work: %s CPU per 1,000 nodes (this process %s, the database %s)",
						per(d.CPU), per(d.CPU-d.DatabaseCPU), per(d.DatabaseCPU))
					return nil
				}
			}
			if api == "" {
				if err := cfg.RequireDatabase(); err != nil {
					return err
				}
				var endpoint string
				if openstackPlacement {
					dir, err := os.MkdirTemp("", "bench-openstack-placement-")
					if err != nil {
						return err
					}
					defer os.RemoveAll(dir)
					osp, err := devstack.StartOpenStackPlacement(ctx, dir, log)
					if err != nil {
						return err
					}
					defer osp.Stop()
					endpoint = osp.URL
				}
				if o.Enroll == loadgen.EnrollIronic {
					// Issue 44's database: its tables empty when last
					// analyzed (a fresh one never was, and PostgreSQL's
					// guess for a table never analyzed hid the issue), so
					// that the stack's connections warm up on plans made
					// for an empty fleet.
					if err := analyzeEmpty(ctx, cfg.Database.URL); err != nil {
						return err
					}
				}
				stack, err := devstack.Start(ctx, devstack.Options{
					DatabaseURL: cfg.Database.URL, Conductors: conductors, Log: log,
					AllocationBackend: backend, PlacementBackendEndpoint: endpoint,
					Env: []string{"METALLOC_PLACEMENT_BACKEND_MODE=" + placementMode},
				})
				if err != nil {
					return err
				}
				defer stack.Stop(context.WithoutCancel(ctx))
				o.APIURL = stack.APIURL
				pool, err := db.Open(ctx, cfg.Database.URL, db.PoolOptions{ApplicationName: "metalloc-bench"})
				if err != nil {
					return err
				}
				defer pool.Close()
				o.Work = stackWork(pool, stack)
				report = func() string { return footprint(context.WithoutCancel(ctx), pool, stack) }
				o.AfterEnroll = func(ctx context.Context) error {
					defer logStatistics(ctx, log, pool)
					if !cmd.Flags().Changed("wait-mirror") {
						waitMirror = o.Mode != loadgen.ModeBurst
					}
					if stack.BackendPlacementURL == "" || !waitMirror {
						return nil
					}
					log.Info("waiting for the resource tracker to mirror the nodes into Placement",
						zap.String("placement", stack.BackendPlacementURL))
					start := time.Now()
					// loadgen enrolls node i with resource class
					// bench-(i mod classes) and makes every one available.
					classes := max(o.Classes, 4)
					want := map[string]int{}
					for i := range o.Nodes {
						want[client.NormalizeClass(fmt.Sprintf("bench-%d", i%classes))]++
					}
					if err := devstack.WaitPlacementCapacity(ctx, stack.BackendPlacementURL, want, 10*time.Minute); err != nil {
						return err
					}
					log.Info("nodes mirrored", zap.Duration("took", time.Since(start)))
					// A bulk enrolment leaves the trackers one more pass
					// over every node (the changes that arrived while the
					// mirroring pass ran); a user allocating then shares
					// the machine with it once. The figures are the steady
					// state's: wait until the API and conductors idle.
					return settle(ctx, log, o.Work, 3*time.Minute)
				}
			} else if backend != "database" {
				return errors.New("--backend applies to the stack bench starts; with --api, configure the running conductors")
			}
			r, err := loadgen.Run(ctx, o)
			if ctx.Err() != nil {
				return context.Cause(ctx)
			}
			if err != nil {
				return err
			}
			if backend == "placement" && openstackPlacement {
				backend += " (OpenStack Placement 8.0)"
			} else if backend == "placement" {
				backend += " (mode " + placementMode + ")"
			}
			mode := string(o.Mode)
			if o.Mode != loadgen.ModeBurst {
				// A burst follows the event stream; it does not poll.
				mode += fmt.Sprintf(" (poll every %s)", o.PollInterval)
			}
			fmt.Printf("nodes: %d, conductors: %d, concurrency: %d, backend: %s, mode: %s\n%s\n",
				o.Nodes, conductors, o.Concurrency, backend, mode, r)
			if importWork != "" {
				fmt.Println(importWork)
			}
			if report != nil {
				fmt.Println(report())
			}
			if r.DoubleBooked > 0 {
				return fmt.Errorf("%d nodes double-booked", r.DoubleBooked)
			}
			return nil
		},
	}
	alloc.Flags().IntVar(&o.Nodes, "nodes", 10000, "nodes to enroll")
	alloc.Flags().IntVar(&o.Allocations, "allocations", 5000, "allocations to create")
	alloc.Flags().IntVar(&o.Concurrency, "concurrency", 32, "concurrent API clients")
	alloc.Flags().IntVar(&conductors, "conductors", 2, "conductors to start")
	alloc.Flags().StringVar(&api, "api", "", "use this running API instead of starting one")
	alloc.Flags().StringVar(&backend, "backend", "database", "allocation backend of the conductors started: database or placement (also starts metalloc-placement)")
	alloc.Flags().StringVar(&enroll, "enroll", "api", "how nodes are enrolled: api (5 requests per node), ironic (as api, in issue 44's shape: the node tables analyzed empty first, one class, three traits on every node, each allocation asking for one), import (metalloc-manage node import) or none (already there)")
	alloc.Flags().StringVar((*string)(&o.Mode), "mode", string(loadgen.ModePoll), "how clients learn their allocation finished: poll (GET every --poll-interval) wait (each POST with Prefer: wait is answered when its allocation is done) or burst (every client POSTs without waiting, one event stream tells when each finished)")
	alloc.Flags().DurationVar(&o.PollInterval, "poll-interval", 5*time.Millisecond, "pause between a client's GETs of its allocation")
	alloc.Flags().BoolVar(&o.SkipDeletes, "skip-deletes", false, "leave the allocations in place (no delete phase)")
	alloc.Flags().DurationVar(&o.Timeout, "timeout", 10*time.Minute, "bound on each phase")
	alloc.Flags().StringVar(&placementMode, "placement-mode", "auto", "placement_backend.mode of the conductors with --backend placement: auto (local here), local or http")
	alloc.Flags().BoolVar(&openstackPlacement, "openstack-placement", false, "with --backend placement, claim through OpenStack Placement 8.0 (Debian's packages, started here) instead of metalloc-placement")
	alloc.Flags().BoolVar(&waitMirror, "wait-mirror", true, "with --backend placement, wait after enrolling until every node is mirrored into Placement and the conductors idle (default: yes, but for --mode burst, which measures a just-enrolled fleet)")
	alloc.Flags().BoolVar(&o.Timeline, "timeline", false, "print latency per tenth of the run")
	c.AddCommand(alloc, firstBurstCmd(), waitersCmd(), benchIronicCmd(), benchLeasesCmd())
	return c
}

// stackWork reads the cumulative work (loadgen.Work) of stack's API and
// conductors and of their database backends, through pool, summed reading
// to reading (db.Work.Since): a database connection that closes in
// between takes none of the difference with it.
func stackWork(pool *pgxpool.Pool, stack *devstack.Stack) func(context.Context) (loadgen.Work, error) {
	var acc loadgen.Work
	var last *db.Work
	return func(ctx context.Context) (loadgen.Work, error) {
		pids := []int{stack.API.Cmd.Process.Pid}
		for _, c := range stack.Conductors {
			pids = append(pids, c.Cmd.Process.Pid)
		}
		w, err := db.ReadWork(ctx, pool, pids...)
		if err != nil {
			return acc, err
		}
		if last != nil {
			d := w.Since(*last)
			acc.Buffers += d.Buffers
			acc.CPU += d.CPU
			acc.DatabaseCPU += d.DatabaseCPU
		}
		last = &w
		return acc, nil
	}
}

// settle waits until work (the CPU of the API, the conductors and their
// database backends) grows by less than a tenth of a core over a second,
// or until timeout, logging what it waits for.
func settle(ctx context.Context, log *zap.Logger, work func(context.Context) (loadgen.Work, error), timeout time.Duration) error {
	start := time.Now()
	before, err := work(ctx)
	if err != nil {
		return err
	}
	for time.Since(start) < timeout {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Second):
		}
		now, err := work(ctx)
		if err != nil {
			return err
		}
		busy := now.CPU - before.CPU
		before = now
		if busy < 100*time.Millisecond {
			log.Info("conductors idle", zap.Duration("took", time.Since(start)))
			return nil
		}
		log.Info("waiting for the resource trackers' follow-up pass", zap.Duration("cpu_last_second", busy))
	}
	log.Warn("conductors still busy; starting anyway", zap.Duration("waited", timeout))
	return nil
}

// analyzeEmpty analyzes the tables of an allocation's life on the database
// at url, which must hold no node yet (EnrollIronic).
func analyzeEmpty(ctx context.Context, url string) error {
	pool, err := db.Open(ctx, url, db.PoolOptions{ApplicationName: "metalloc-bench"})
	if err != nil {
		return err
	}
	defer pool.Close()
	var nodes int64
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM nodes`).Scan(&nodes); err != nil {
		return err
	}
	if nodes > 0 {
		return fmt.Errorf("--enroll ironic needs a database without nodes (%d there)", nodes)
	}
	_, err = pool.Exec(ctx, `ANALYZE nodes, node_traits, allocations, allocation_traits`)
	return err
}

// logStatistics logs, for the tables of the allocation path, how many rows
// changed since PostgreSQL last analyzed them and when that was: whether
// the allocations about to start run on statistics or on none (the
// benchmark itself never analyzes).
func logStatistics(ctx context.Context, log *zap.Logger, pool *pgxpool.Pool) {
	rows, err := pool.Query(ctx, `SELECT relname, n_live_tup, n_mod_since_analyze,
		coalesce(to_char(greatest(last_analyze, last_autoanalyze), 'HH24:MI:SS'), 'never')
		FROM pg_stat_user_tables WHERE schemaname = current_schema() AND relname IN ('nodes', 'node_traits', 'allocations') ORDER BY relname`)
	if err != nil {
		log.Warn("reading table statistics", zap.Error(err))
		return
	}
	defer rows.Close()
	for rows.Next() {
		var name, analyzed string
		var live, changed int64
		if err := rows.Scan(&name, &live, &changed, &analyzed); err != nil {
			log.Warn("reading table statistics", zap.Error(err))
			return
		}
		log.Info("table statistics before the allocations", zap.String("table", name), zap.Int64("live_rows", live),
			zap.Int64("changed_since_analyze", changed), zap.String("analyzed_at", analyzed))
	}
}

// hugePagesHint is the database size (bytes) from which the benchmark's
// last line points a server on 4 kB pages to huge pages: at 1,000,000
// nodes (about 1 GB) they made allocations 20-34 % faster on the 2-core
// machine (docs/benchmarks.md, 2026-11-28); at 100,000 (about 120 MB) the
// pages allocations touch are few and soon mapped.
const hugePagesHint = 512 << 20

// footprint reads, while the stack still runs, the peak resident memory
// (VmHWM) of every process of the stack, of this one and of the largest
// PostgreSQL server process (shared buffers included), and the database's
// size: the benchmark's last lines.
func footprint(ctx context.Context, pool *pgxpool.Pool, stack *devstack.Stack) string {
	var size int64
	_ = pool.QueryRow(ctx, `SELECT pg_database_size(current_database())`).Scan(&size)
	var pg, huge int64
	if rows, err := pool.Query(ctx, `SELECT pid FROM pg_stat_activity WHERE datname = current_database()`); err == nil {
		for rows.Next() {
			var pid int
			if rows.Scan(&pid) == nil {
				pg = max(pg, db.PeakMemory(pid))
				huge = max(huge, db.HugePagesMemory(pid))
			}
		}
		rows.Close()
	}
	mb := func(b int64) string { return fmt.Sprintf("%.0f MB", float64(b)/(1<<20)) }
	parts := []string{"metalloc-api " + mb(db.PeakMemory(stack.API.Cmd.Process.Pid))}
	for _, c := range stack.Conductors {
		parts = append(parts, c.Name+" "+mb(db.PeakMemory(c.Cmd.Process.Pid)))
	}
	if stack.Placement != nil {
		parts = append(parts, "metalloc-placement "+mb(db.PeakMemory(stack.Placement.Cmd.Process.Pid)))
	}
	parts = append(parts, "metalloc-manage bench (load generator, import) "+mb(db.PeakMemory(os.Getpid())),
		"largest PostgreSQL process "+mb(pg))
	// Shared memory on huge pages is not in a process's peak resident
	// size; it changes what a large fleet costs (docs/operations.md,
	// Sizing, "Huge pages for a large fleet").
	pages := "4 kB pages (no huge pages, or PostgreSQL on another host)"
	switch {
	case huge > 0:
		pages = "huge pages (up to " + mb(huge) + " of them mapped by one backend)"
	case size >= hugePagesHint:
		pages += "; a database this size allocates faster on huge pages (docs/operations.md, Sizing, " +
			"\"Huge pages for a large fleet\")"
	}
	return "peak memory: " + strings.Join(parts, ", ") + "\ndatabase size: " + mb(size) +
		"\nPostgreSQL shared memory: " + pages
}
