package main

import (
	"errors"
	"fmt"
	"slices"
	"strings"

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
	var forBinaries []string
	check := &cobra.Command{
		Use:   "check [--config FILE] [--for BINARY,...]",
		Short: "validate the configuration: list every problem (unknown or misspelt key, bad value, database.url missing for --for) and exit 1, or exit 0",
		Long: `Reads the configuration as every metalloc binary does (the --config file,
METALLOC_<SECTION>_<KEY> environment variables, --section.key flags) and
lists every problem: keys and variables that do not exist (with the nearest
valid key), values of the wrong type or outside a key's values, settings
that contradict each other. Exit status 0 when there is none, 1 otherwise.

database.url (or DATABASE_URL, METALLOC_DATABASE_URL) is required by every
binary that reads it (metalloc-api, -conductor, -placement, and
metalloc-manage's database commands). With --for naming the binaries this
configuration is for (metalloc-api or api, ...), a missing database.url is
a problem (exit 1), as those binaries would stop at start-up with exit 78.
Without --for it is a warning (exit 0, "configuration OK with 1 warning"):
the daemons may get the URL from an environment this shell does not have
(a systemd EnvironmentFile such as /etc/metalloc/*.env).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			binaries, err := parseBinaries(forBinaries)
			if err != nil {
				return err
			}
			path, _ := cmd.Flags().GetString("config")
			e, err := config.Resolve(path, cli.ChangedFlags(cmd))
			var problems config.Problems
			if err != nil && !errors.As(err, &problems) {
				return err
			}
			w := cmd.OutOrStdout()
			var warnings []string
			if e.Config.Database.URL == "" {
				if need := readersOf("database.url", binaries); len(need) > 0 {
					problems = append(problems, "database.url is not set and "+need+" need it: "+setDatabaseURL)
				} else if len(binaries) == 0 {
					warnings = append(warnings, "database.url is not set; "+readersOf("database.url", config.Binaries)+
						" need it where they run: "+setDatabaseURL+" (or check with --for BINARY, where a missing URL is a problem)")
				}
			}
			if len(problems) > 0 {
				for _, p := range problems {
					fmt.Fprintln(w, "problem:", p)
				}
				fmt.Fprintf(w, "%d problem(s) in the configuration\n", len(problems))
				return exitCode(1)
			}
			for _, p := range warnings {
				fmt.Fprintln(w, "warning:", p)
			}
			what := "defaults and environment"
			if path != "" {
				what = path
			}
			ok := "configuration OK"
			if len(warnings) > 0 {
				ok += fmt.Sprintf(" with %d warning(s)", len(warnings))
			}
			fmt.Fprintf(w, "%s: %s\n", ok, what)
			return nil
		},
	}
	check.Flags().StringSliceVar(&forBinaries, "for", nil,
		"the binaries this configuration is for (metalloc-api, metalloc-conductor, metalloc-placement, metalloc-manage; or api, ...): what they require is a problem when missing")
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

// setDatabaseURL says where database.url may come from.
const setDatabaseURL = "set database.url in the file, METALLOC_DATABASE_URL or DATABASE_URL"

// parseBinaries reads config check's --for: binary names, with or without
// their "metalloc-" prefix (ExitUsage for another name).
func parseBinaries(names []string) ([]config.Binary, error) {
	var bs []config.Binary
	for _, n := range names {
		b := config.Binary(n)
		if !strings.HasPrefix(n, "metalloc-") {
			b = config.Binary("metalloc-" + n)
		}
		if !slices.Contains(config.Binaries, b) {
			return nil, cli.Exit(cli.ExitUsage, fmt.Errorf("--for %q: not a metalloc binary (metalloc-api, metalloc-conductor, metalloc-placement, metalloc-manage)", n))
		}
		bs = append(bs, b)
	}
	return bs, nil
}

// readersOf names those of binaries that read key (the registry's "read
// by"), "metalloc-api and metalloc-manage", or "" for none.
func readersOf(key string, binaries []config.Binary) string {
	var names []string
	for _, b := range binaries {
		if config.Lookup(key).ReadBy(b) && !slices.Contains(names, string(b)) {
			names = append(names, string(b))
		}
	}
	if len(names) <= 1 {
		return strings.Join(names, "")
	}
	return strings.Join(names[:len(names)-1], ", ") + " and " + names[len(names)-1]
}
