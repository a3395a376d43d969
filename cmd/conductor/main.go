// Command metalloc-conductor claims allocations from PostgreSQL and reserves
// nodes for them. Run several, on one host or many, against one database;
// each needs a unique conductor.hostname. See README.md.
package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/metalloc/metalloc/cmd/internal/cli"
	"github.com/metalloc/metalloc/conductor"
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
	env, err := cli.StartService(cmd, "metalloc-conductor")
	if err != nil {
		return err
	}
	defer env.Close()
	c := env.Config.Conductor
	svc, err := conductor.NewService(conductor.Config{
		Hostname: c.Hostname, Group: c.Group, Workers: c.Workers, ClaimBatch: c.ClaimBatch,
		PollInterval: c.PollInterval, ClaimDelay: c.ClaimDelay, HeartbeatInterval: c.HeartbeatInterval,
		HeartbeatTimeout: c.HeartbeatTimeout, ShutdownGrace: c.ShutdownGrace, Version: version,
	}, env.Pool, env.Log)
	if err != nil {
		return err
	}
	return svc.Run(env.Ctx)
}
