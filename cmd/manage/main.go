// Command metalloc-manage is metalloc's admin tool: schema migrations
// (db sync [--contract], db version, db online-data-migrations), upgrade
// checks (status upgrade-check, status versions), the configuration (config check, config show), node
// import, the local development stack (dev up, dev exec), the allocation
// load benchmark (bench allocations) and a scripting client of the
// allocation API (allocation create/show/delete, allocation-group
// create/show/list/delete, waiting without polling) and of the lease API
// (lease list/show/create/update/cancel/delete/calendar/availability).
//
// Exit status: 0 success, 1 failure, 2 a command-line mistake (unknown
// command or flag), a failed upgrade check, a database outside the
// binary's window (`db sync` first, ...) or a `db sync --contract` refused
// while older binaries run, 78 configuration problems (cli.ExitConfig).
package main

import (
	"strings"

	"github.com/spf13/cobra"
	"go.uber.org/zap"

	"github.com/metalloc/metalloc/cmd/internal/cli"
	"github.com/metalloc/metalloc/config"
)

func main() {
	cli.Execute(newRoot())
}

// newRoot is metalloc-manage's command tree.
func newRoot() *cobra.Command {
	root := cli.NewRoot(config.BinaryManage, "metalloc administration")
	root.AddCommand(dbCmd(), devCmd(), nodeCmd(), benchCmd(), statusCmd(), soakCmd(), allocationCmd(),
		allocationGroupCmd(), leaseCmd(), topologyCmd(), configCmd(), conductorCmd())
	// The configuration each command reads, for --help (the root takes a
	// flag for every key metalloc-manage reads; --help-all lists them all).
	// Unlisted commands read database and log, as the root.
	for path, sections := range map[string][]string{
		"db online-data-migrations": {"database", "log", "placement_backend", "keystone"},
		"status upgrade-check":      {"database", "log", "placement_backend", "keystone"},
		"node":                      {"database", "log", "ironic.endpoint"},
		"allocation":                {"api", "keystone", "log"},
		"allocation-group":          {"api", "keystone", "log"},
		"lease":                     {"api", "keystone", "log"},
		"config":                    nil, // a flag for every key: only under --help-all
		"dev":                       {"log"},
		"soak":                      {"log"},
	} {
		c, rest, err := root.Find(strings.Fields(path))
		if err != nil || len(rest) > 0 {
			panic("newRoot: no command " + path)
		}
		cli.ReadsConfig(c, sections...)
	}
	return root
}

// load reads the configuration and builds a logger for commands: console
// format unless log.format is set.
func load(cmd *cobra.Command) (config.Config, *zap.Logger, error) {
	path, _ := cmd.Flags().GetString("config")
	e, err := config.Resolve(path, cli.ChangedFlags(cmd))
	if err != nil {
		return config.Config{}, nil, err
	}
	cfg := e.Config
	if e.Source("log.format") == config.SourceDefault {
		cfg.Log.Format = "console"
	}
	log, err := config.NewLogger(cfg.Log)
	return cfg, log, err
}

// loadDatabase is load for a command that needs database.url: an error
// naming the key when it is not set, exit cli.ExitConfig as the daemons
// (it was 1).
func loadDatabase(cmd *cobra.Command) (config.Config, *zap.Logger, error) {
	cfg, log, err := load(cmd)
	if err == nil {
		if err = cfg.RequireDatabase(); err != nil {
			err = cli.Exit(cli.ExitConfig, err)
		}
	}
	return cfg, log, err
}
