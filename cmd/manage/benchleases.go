package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"time"

	"github.com/spf13/cobra"
	"go.uber.org/zap"

	"github.com/metalloc/metalloc/db"
	"github.com/metalloc/metalloc/devstack"
	"github.com/metalloc/metalloc/loadgen"
	"github.com/metalloc/metalloc/topology"
)

// benchLeasesCmd is `metalloc-manage bench leases` (make bench
// MODE=leases): issue 43's benchmark. On a database of its own, created
// on DATABASE_URL's server (migrated, dropped at the end), it sets the
// topology row=extra.row rack=extra.rack, starts metalloc-api and
// --conductors conductors, imports --nodes reservable nodes
// (loadgen.LeaseNodeFile, as `metalloc-manage node import` does) and runs
// loadgen.RunLeases: admission, availability searches, simultaneous
// starts. It prints the phases' table and the footprint.
func benchLeasesCmd() *cobra.Command {
	var o loadgen.LeaseOptions
	var nodes, conductors int
	var statements bool
	c := &cobra.Command{
		Use:   "leases",
		Short: "issue 43's scenario: leases admitted, searched and started at 10,000 reservable nodes",
		Long: "On a fresh database of its own, created on DATABASE_URL's server: sets the topology (row=extra.row\n" +
			"rack=extra.rack), starts metalloc-api and --conductors conductors, imports --nodes reservable nodes in\n" +
			"racks of 40, 25 racks to a row (every fourth rack GPU nodes with CUSTOM_A100 or CUSTOM_H100, the others\n" +
			"CPU nodes, half with CUSTOM_NVME), then:\n" +
			"  1. --leases leases over --days days from a day ahead, POSTed to /v1/leases by --concurrency clients\n" +
			"     (1-16 nodes, GPU or CPU, some with a trait, a third in one rack, some in one row, a fifth\n" +
			"     preferably in one rack, 1 hour to 7 days), each client sending its next when its last is\n" +
			"     answered, or paced at --rate a second: admission latency and refusals;\n" +
			"  2. --searches earliest-window searches and --searches calendars (GET /v1/leases/availability) from\n" +
			"     --search-concurrency clients;\n" +
			"  3. --starts leases of 1-4 nodes made to start in the same second, --start-lead ahead: the time from\n" +
			"     that second until each is active, read off the allocation event stream (lease.start).\n" +
			"Prints p50/p95/p99/max per phase with the machine's load average, the issue's targets, and checks\n" +
			"that no node is booked twice over overlapping windows. Needs a role that may create databases.",
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, log, err := loadDatabase(cmd)
			if err != nil {
				return err
			}
			ctx, stop := signalContext(cmd)
			defer stop()
			dbURL, drop, err := scratchDatabase(ctx, cfg.Database.URL, fmt.Sprintf("metalloc_bench_leases_%d", os.Getpid()), log)
			if err != nil {
				return err
			}
			defer drop()
			pool, err := db.Open(ctx, dbURL, db.PoolOptions{ApplicationName: "metalloc-bench"})
			if err != nil {
				return err
			}
			defer pool.Close()
			levels := []topology.Level{{Name: "row", Source: "extra.row"}, {Name: "rack", Source: "extra.rack"}}
			if err := topology.Save(ctx, pool, levels); err != nil {
				return err
			}
			stack, err := devstack.Start(ctx, devstack.Options{DatabaseURL: dbURL, Conductors: conductors, Log: log})
			if err != nil {
				return err
			}
			defer stack.Stop(context.WithoutCancel(ctx))
			start := time.Now()
			if err := importWith(ctx, pool, bytes.NewReader(loadgen.LeaseNodeFile(nodes)), "bench lease nodes",
				importOptions{available: true}, log); err != nil {
				return err
			}
			enrolled := time.Since(start)
			work := stackWork(pool, stack)
			if err := settle(ctx, log, work, 3*time.Minute); err != nil {
				return err
			}
			o.APIURL, o.Log, o.Work = stack.APIURL, log, work
			o.Progress = func(phase string, done, total int) {
				log.Info("progress", zap.String("phase", phase), zap.Int("done", done), zap.Int("total", total))
			}
			if err := resetStatements(ctx, pool, statements); err != nil {
				return err
			}
			o.Phase = func(ctx context.Context, phase string, begin bool) {
				if begin {
					if err := resetStatements(ctx, pool, statements); err != nil {
						log.Warn("resetting pg_stat_statements", zap.Error(err))
					}
					return
				}
				logStatements(ctx, pool, statements, phase, log)
			}
			r, err := loadgen.RunLeases(ctx, o)
			if ctx.Err() != nil {
				return context.Cause(ctx)
			}
			if err != nil {
				return err
			}
			fmt.Printf("nodes: %d reservable (imported in %s), conductors: %d, leases: %d over %d days from %d clients, seed %d\n\n%s\n",
				nodes, enrolled.Round(time.Millisecond), conductors, o.Leases, o.Days, o.Concurrency, r.Seed, r.Table())
			fmt.Println(footprint(context.WithoutCancel(ctx), pool, stack))
			if r.Overbooked > 0 {
				return fmt.Errorf("%d node windows overbooked", r.Overbooked)
			}
			return nil
		},
	}
	c.Flags().IntVar(&nodes, "nodes", 10000, "reservable nodes to import")
	c.Flags().IntVar(&o.Leases, "leases", 5000, "leases to admit")
	c.Flags().IntVar(&o.Days, "days", 30, "days the leases fall in, from a day ahead")
	c.Flags().IntVar(&o.Concurrency, "concurrency", 32, "clients admitting leases")
	c.Flags().Float64Var(&o.Rate, "rate", 0, "admissions per second, paced, each timed from when it was due (0: a closed loop, every client sending its next when its last is answered)")
	c.Flags().IntVar(&o.Searches, "searches", 300, "availability requests of each form (earliest window, calendar)")
	c.Flags().IntVar(&o.SearchConcurrency, "search-concurrency", 4, "clients searching")
	c.Flags().IntVar(&o.Starts, "starts", 100, "leases starting in the same second")
	c.Flags().DurationVar(&o.StartLead, "start-lead", 20*time.Second, "how far ahead of their start the simultaneous leases are admitted")
	c.Flags().IntVar(&conductors, "conductors", 2, "conductors to start")
	c.Flags().Uint64Var(&o.Seed, "seed", 0, "the lease mix's seed (0: random; the table says which)")
	c.Flags().BoolVar(&statements, "statements", false, "log the statements that took most time in each phase (pg_stat_statements; needs shared_preload_libraries=pg_stat_statements, e.g. dev exec --pg-setting)")
	c.Flags().DurationVar(&o.Timeout, "timeout", 10*time.Minute, "bound on each phase")
	return c
}
