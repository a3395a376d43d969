package main

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"
	"go.uber.org/zap"

	"github.com/metalloc/metalloc/db"
	"github.com/metalloc/metalloc/devstack"
	"github.com/metalloc/metalloc/loadgen"
)

func benchCmd() *cobra.Command {
	c := &cobra.Command{Use: "bench", Short: "benchmarks"}
	var o loadgen.Options
	var conductors int
	var api string
	alloc := &cobra.Command{
		Use:   "allocations",
		Short: "enroll nodes, fire allocations through the API, report allocations/s, latency and double-booking",
		Long: "Starts metalloc-api and --conductors metalloc-conductor processes on DATABASE_URL (unless --api\n" +
			"points at a running API), enrolls --nodes nodes, fires --allocations allocations with --concurrency\n" +
			"clients, waits until every one is active or error, and prints the figures. Use a fresh database.",
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, log, err := load(cmd)
			if err != nil {
				return err
			}
			o.Log = log
			o.Progress = func(phase string, done, total int) {
				log.Info("progress", zap.String("phase", phase), zap.Int("done", done), zap.Int("total", total))
			}
			o.APIURL = api
			if api == "" {
				if err := cfg.RequireDatabase(); err != nil {
					return err
				}
				stack, err := devstack.Start(cmd.Context(), devstack.Options{
					DatabaseURL: cfg.Database.URL, Conductors: conductors, Log: log,
				})
				if err != nil {
					return err
				}
				defer stack.Stop(cmd.Context())
				o.APIURL = stack.APIURL
				o.AfterEnroll = func(ctx context.Context) error {
					log.Info("vacuuming after enrollment")
					return db.Vacuum(ctx, cfg.Database.URL, "nodes", "node_traits")
				}
			}
			r, err := loadgen.Run(cmd.Context(), o)
			if err != nil {
				return err
			}
			fmt.Printf("nodes: %d, conductors: %d, concurrency: %d\n%s\n", o.Nodes, conductors, o.Concurrency, r)
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
	alloc.Flags().BoolVar(&o.Timeline, "timeline", false, "print latency per tenth of the run")
	c.AddCommand(alloc)
	return c
}
