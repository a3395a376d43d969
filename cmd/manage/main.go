// Command metalloc-manage is metalloc's admin tool: schema migrations
// (db sync, db online-data-migrations), upgrade checks (status
// upgrade-check), node import, the local development stack (dev up, dev exec),
// the allocation load benchmark (bench allocations) and a scripting client of
// the allocation API (allocation create/show/delete, allocation-group
// create/show/list/delete, waiting without polling).
package main

import (
	"errors"
	"fmt"
	"os"

	"github.com/spf13/cobra"
	"go.uber.org/zap"

	"github.com/metalloc/metalloc/cmd/internal/cli"
	"github.com/metalloc/metalloc/config"
)

func main() {
	root := &cobra.Command{
		Use:           "metalloc-manage",
		Short:         "metalloc administration",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.PersistentFlags().String("config", "", "YAML config file (see configs/metalloc.yaml)")
	root.PersistentFlags().String("database.url", "", "PostgreSQL URL (default $DATABASE_URL)")
	root.AddCommand(dbCmd(), devCmd(), nodeCmd(), benchCmd(), statusCmd(), soakCmd(), allocationCmd(),
		allocationGroupCmd(), topologyCmd())
	if err := root.Execute(); err != nil {
		var code exitCode
		if errors.As(err, &code) {
			os.Exit(int(code))
		}
		fmt.Fprintln(os.Stderr, "metalloc-manage:", err)
		os.Exit(1)
	}
}

// load reads the configuration and builds a console logger for commands.
func load(cmd *cobra.Command) (config.Config, *zap.Logger, error) {
	path, _ := cmd.Flags().GetString("config")
	cfg, err := config.Load(path, cli.ChangedFlags(cmd))
	if err != nil {
		return cfg, nil, err
	}
	if cfg.Log.Format == "json" && os.Getenv("METALLOC_LOG_FORMAT") == "" {
		cfg.Log.Format = "console"
	}
	log, err := config.NewLogger(cfg.Log)
	return cfg, log, err
}
