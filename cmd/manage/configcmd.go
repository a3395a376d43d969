package main

import (
	"errors"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/metalloc/metalloc/cmd/internal/cli"
	"github.com/metalloc/metalloc/config"
)

// configCmd is "config check" and "config show". Both read the
// configuration as the daemons do (--config file, METALLOC_ variables,
// flags) and take a flag for every key, also those metalloc-manage itself
// does not read.
func configCmd() *cobra.Command {
	c := &cobra.Command{Use: "config", Short: "check or show the configuration"}
	check := &cobra.Command{
		Use:   "check [--config FILE]",
		Short: "validate the configuration: list every problem (unknown or misspelt key, bad value) and exit 1, or exit 0",
		Long: `Reads the configuration as every metalloc binary does (the --config file,
METALLOC_<SECTION>_<KEY> environment variables, --section.key flags) and
lists every problem: keys and variables that do not exist (with the nearest
valid key), values of the wrong type or outside a key's values, settings
that contradict each other. Exit status 0 when there is none, 1 otherwise.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			path, _ := cmd.Flags().GetString("config")
			e, err := config.Resolve(path, cli.ChangedFlags(cmd))
			var problems config.Problems
			switch {
			case errors.As(err, &problems):
				for _, p := range problems {
					fmt.Fprintln(cmd.OutOrStdout(), "problem:", p)
				}
				fmt.Fprintf(cmd.OutOrStdout(), "%d problem(s) in the configuration\n", len(problems))
				return exitCode(1)
			case err != nil:
				return err
			}
			if e.Config.Database.URL == "" {
				fmt.Fprintln(cmd.OutOrStdout(), "note: database.url is not set (set it, or DATABASE_URL or METALLOC_DATABASE_URL where the daemons run)")
			}
			what := "defaults and environment"
			if path != "" {
				what = path
			}
			fmt.Fprintf(cmd.OutOrStdout(), "configuration OK: %s\n", what)
			return nil
		},
	}
	show := &cobra.Command{
		Use:   "show [--config FILE]",
		Short: "print the effective value of every key and where it comes from (flag, env, file, default); secrets masked",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			path, _ := cmd.Flags().GetString("config")
			e, err := config.Resolve(path, cli.ChangedFlags(cmd))
			if e == nil {
				return err
			}
			if werr := e.WriteTable(cmd.OutOrStdout()); werr != nil {
				return werr
			}
			return err
		},
	}
	config.AddFlags(check.Flags(), nil)
	config.AddFlags(show.Flags(), nil)
	c.AddCommand(check, show)
	return c
}
