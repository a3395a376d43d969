// Command metalloc-conductor claims allocations from PostgreSQL and reserves
// nodes for them. Run several, on one host or many, against one database;
// each needs a unique conductor.hostname. See docs/deployment.md.
package main

import (
	"context"
	"errors"
	"sync/atomic"

	"github.com/spf13/cobra"
	"go.uber.org/zap"

	"github.com/metalloc/metalloc/cmd/internal/cli"
	"github.com/metalloc/metalloc/conductor"
	"github.com/metalloc/metalloc/config"
	"github.com/metalloc/metalloc/db"
	"github.com/metalloc/metalloc/placement/client"
	"github.com/metalloc/metalloc/web"
)

func main() {
	cli.Execute(cli.NewDaemon(config.BinaryConductor, "metalloc allocation conductor", run))
}

func run(cmd *cobra.Command, _ []string) error {
	// PostgreSQL ends sessions idle in a transaction for longer than the
	// heartbeat timeout, and names them after the conductor.
	env, err := cli.StartService(cmd, "metalloc-conductor", func(cfg config.Config, opts *db.PoolOptions) {
		conductor.NewConfig(cfg, nil).PoolOptions(opts)
	})
	if err != nil {
		return err
	}
	defer env.Close()
	c := env.Config.Conductor
	pb := env.Config.PlacementBackend
	// With allocation_backend: placement, allocations are claimed through
	// the Placement service at placement_backend.endpoint.
	var pc *client.Client
	if c.AllocationBackend == conductor.BackendPlacement {
		if pc, err = cli.PlacementClient(env.Config, env.Log); err != nil {
			return err
		}
	}
	// In front of Ironic (ironic.endpoint), allocations are made in Ironic
	// too (backend.Ironic).
	ccfg := conductor.NewConfig(env.Config, pc)
	ic, err := cli.IronicClient(env.Config)
	if err != nil {
		return err
	}
	if ic != nil {
		ccfg.Ironic = newIronicBackend(env.Pool, ic, env.Config, env.Log)
	}
	svc, err := conductor.NewService(ccfg, env.Pool, env.Log)
	if err != nil {
		return err
	}
	if pc != nil {
		// The resource tracker mirrors the nodes into Placement as resource
		// providers and releases Placement allocations no allocation backs
		// (placement_claims). It stops with env.Ctx.
		tracker := conductor.NewTracker(env.Pool, pc, conductor.TrackerConfigFrom(pb), env.Log)
		trackerCtx, stopTracker := context.WithCancel(env.Ctx)
		trackerDone := make(chan struct{})
		go func() {
			defer close(trackerDone)
			if err := tracker.Run(trackerCtx); err != nil {
				env.Log.Error("resource tracker stopped", zap.Error(err))
			}
		}()
		defer func() { stopTracker(); <-trackerDone }()
	}
	// Rows of conductors gone for longer than conductor.offline_retention
	// are deleted (conductor.Pruner). It stops with env.Ctx.
	pruner := conductor.NewPruner(env.Pool, conductor.PrunerConfig{
		Retention: c.OfflineRetention, HeartbeatTimeout: c.HeartbeatTimeout,
	}, env.Log)
	prunerCtx, stopPruner := context.WithCancel(env.Ctx)
	prunerDone := make(chan struct{})
	go func() { defer close(prunerDone); pruner.Run(prunerCtx) }()
	defer func() { stopPruner(); <-prunerDone }()
	reg := cli.NewRegistry(env.Pool)
	svc.Metrics = conductor.NewMetrics(reg)
	// /readyz on the metrics listener: the database and schema, and this
	// conductor registered and not stopping.
	var registered atomic.Bool
	stopMetrics, err := cli.ServeMetrics(web.ServerConfig{
		Listen: c.MetricsListen, TLSCertFile: c.MetricsTLSCertFile, TLSKeyFile: c.MetricsTLSKeyFile,
	}, reg, env.Log, env.DatabaseCheck(), web.Check{Name: "conductor", Func: func(context.Context) error {
		switch {
		case env.Ctx.Err() != nil:
			return errors.New("stopping")
		case !registered.Load():
			return errors.New("not registered yet")
		}
		return nil
	}})
	if err != nil {
		return err
	}
	defer stopMetrics()
	// systemd (Type=notify): READY=1 once registered and listening,
	// STOPPING=1 at the stop signal, WATCHDOG=1 when the unit asks for it.
	sd := cli.StartSystemd(env.Ctx, env.Log)
	defer sd.Close()
	ready := make(chan struct{})
	svc.OnReady = func() { registered.Store(true); sd.Ready(); close(ready) }
	if ic != nil {
		// The node mirror (one conductor at a time) and the deletions of
		// allocations in Ironic start once the conductor is registered.
		stop, err := startIronic(env.Ctx, env, svc, ccfg.Ironic, reg, ready)
		if err != nil {
			return err
		}
		defer stop()
	}
	return svc.Run(env.Ctx)
}
