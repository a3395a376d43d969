// Command metalloc-conductor claims allocations from PostgreSQL and reserves
// nodes for them. Run several, on one host or many, against one database;
// each needs a unique conductor.hostname. See README.md.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/metalloc/metalloc/cmd/internal/cli"
	"github.com/metalloc/metalloc/conductor"
	"github.com/metalloc/metalloc/config"
	"github.com/metalloc/metalloc/db"
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
	cmd.Flags().String("database.url", "", "PostgreSQL URL (default $DATABASE_URL)")
	if err := cmd.Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "metalloc-conductor:", err)
		os.Exit(1)
	}
}

func run(cmd *cobra.Command, _ []string) error {
	path, _ := cmd.Flags().GetString("config")
	cfg, err := config.Load(path, cli.ChangedFlags(cmd))
	if err != nil {
		return err
	}
	log, err := config.NewLogger(cfg.Log)
	if err != nil {
		return err
	}
	defer func() { _ = log.Sync() }()
	if err := cfg.RequireDatabase(); err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	pool, err := db.Open(ctx, cfg.Database.URL, db.PoolOptions{MaxConns: cfg.Database.MaxConns, ApplicationName: "metalloc-conductor"})
	if err != nil {
		return err
	}
	defer pool.Close()
	if err := db.CheckSchema(ctx, pool); err != nil {
		return err
	}
	c := cfg.Conductor
	svc, err := conductor.NewService(conductor.Config{
		Hostname: c.Hostname, Group: c.Group, Workers: c.Workers, ClaimBatch: c.ClaimBatch,
		PollInterval: c.PollInterval, HeartbeatInterval: c.HeartbeatInterval,
		HeartbeatTimeout: c.HeartbeatTimeout, ShutdownGrace: c.ShutdownGrace, Version: version,
	}, pool, log)
	if err != nil {
		return err
	}
	return svc.Run(ctx)
}
