// Command metalloc-conductor claims allocations from PostgreSQL and reserves
// nodes for them. Run several, on one host or many, against one database;
// each needs a unique conductor.hostname. See README.md.
package main

import (
	"context"
	"fmt"
	"os"
	"strconv"

	"github.com/spf13/cobra"
	"go.uber.org/zap"

	"github.com/metalloc/metalloc/cmd/internal/cli"
	"github.com/metalloc/metalloc/conductor"
	"github.com/metalloc/metalloc/config"
	"github.com/metalloc/metalloc/db"
	"github.com/metalloc/metalloc/placement/client"
	"github.com/metalloc/metalloc/web"
)

// version is stamped at build time (-ldflags "-X main.version=...").
var version = "dev"

func main() {
	cmd := &cobra.Command{
		Use:           "metalloc-conductor",
		Short:         "metalloc allocation conductor",
		SilenceUsage:  true,
		SilenceErrors: true,
		RunE:          run,
	}
	cmd.Flags().String("config", "", "YAML config file (see configs/metalloc.yaml)")
	cmd.Flags().String("conductor.hostname", "", "unique conductor name (default: the host name)")
	cmd.Flags().Int("conductor.workers", 0, "allocations processed at once (default 16)")
	cmd.Flags().String("conductor.metrics_listen", "", "address:port of the Prometheus /metrics listener, or off (default 127.0.0.1:9464)")
	cmd.Flags().String("database.url", "", "PostgreSQL URL (default $DATABASE_URL)")
	if err := cmd.Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "metalloc-conductor:", err)
		os.Exit(1)
	}
}

// conductorSessions makes PostgreSQL end a conductor session that sits in
// a transaction for longer than the heartbeat timeout (a stalled or paused
// process), so that the row locks it holds are gone by the time peers take
// its allocations over, and names the sessions "metalloc-conductor
// <hostname>".
func conductorSessions(cfg config.Config, opts *db.PoolOptions) {
	timeout := cfg.Conductor.HeartbeatTimeout
	if timeout <= 0 {
		timeout = config.DefaultHeartbeatTimeout
	}
	opts.RuntimeParams = map[string]string{
		"idle_in_transaction_session_timeout": strconv.FormatInt(timeout.Milliseconds(), 10),
	}
	// pg_stat_activity tells the conductors apart (application_name holds
	// at most 63 bytes).
	host := cfg.Conductor.Hostname
	if host == "" {
		host, _ = os.Hostname()
	}
	if name := opts.ApplicationName + " " + host; len(name) <= 63 {
		opts.ApplicationName = name
	}
}

func run(cmd *cobra.Command, _ []string) error {
	env, err := cli.StartService(cmd, "metalloc-conductor", conductorSessions)
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
	svc, err := conductor.NewService(conductor.Config{
		Hostname: c.Hostname, Group: c.Group, Workers: c.Workers, ClaimBatch: c.ClaimBatch,
		PollInterval: c.PollInterval, ClaimDelay: c.ClaimDelay, HeartbeatInterval: c.HeartbeatInterval,
		HeartbeatTimeout: c.HeartbeatTimeout, ShutdownGrace: c.ShutdownGrace,
		LockedNodeWait: c.LockedNodeWait, TakeoverSchedule: c.TakeoverSchedule, Version: version,
		Backend: c.AllocationBackend, Placement: pc,
		PlacementMaxAlternates: pb.MaxAlternates, PlacementMaxAttempts: pb.MaxAttempts, PlacementMode: pb.Mode,
	}, env.Pool, env.Log)
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
	stopMetrics, err := cli.ServeMetrics(web.ServerConfig{
		Listen: c.MetricsListen, TLSCertFile: c.MetricsTLSCertFile, TLSKeyFile: c.MetricsTLSKeyFile,
	}, reg, env.Log)
	if err != nil {
		return err
	}
	defer stopMetrics()
	// systemd (Type=notify): READY=1 once registered and listening,
	// STOPPING=1 at the stop signal, WATCHDOG=1 when the unit asks for it.
	sd := cli.StartSystemd(env.Ctx, env.Log)
	defer sd.Close()
	svc.OnReady = sd.Ready
	return svc.Run(env.Ctx)
}
