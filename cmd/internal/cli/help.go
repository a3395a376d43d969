package cli

import (
	"fmt"
	"slices"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/metalloc/metalloc/config"
)

// helpAllFlag is metalloc-manage's --help-all: --help with every
// configuration flag. Plain --help lists only the configuration flags of
// the sections the command reads (ReadsConfig), because the root takes a
// flag for each of the ~50 keys metalloc-manage reads somewhere and
// listing them under every subcommand buried the command's own flags
// (`db sync --help` was 63 lines of mostly ironic.* and keystone.*).
const helpAllFlag = "help-all"

// configAnnotation is the cobra annotation ReadsConfig sets: the
// configuration sections (or single keys) a command reads, comma-separated.
const configAnnotation = "metalloc.config"

// ReadsConfig records the configuration sections ("database", "log") or
// single keys ("ironic.endpoint") cmd and its subcommands read, so that
// their --help lists only those --section.key flags (the rest stays
// accepted, and --help-all lists it). A subcommand without its own
// ReadsConfig has its parent's; metalloc-manage's root reads database
// and log.
func ReadsConfig(cmd *cobra.Command, sections ...string) {
	if cmd.Annotations == nil {
		cmd.Annotations = map[string]string{}
	}
	cmd.Annotations[configAnnotation] = strings.Join(sections, ",")
}

// readSections is what ReadsConfig recorded for c or its nearest ancestor.
func readSections(c *cobra.Command) []string {
	for ; c != nil; c = c.Parent() {
		if s, ok := c.Annotations[configAnnotation]; ok {
			if s == "" {
				return nil
			}
			return strings.Split(s, ",")
		}
	}
	return []string{"database", "log"}
}

// shownKey tells whether --help lists the configuration flag name for a
// command reading sections.
func shownKey(name string, sections []string) bool {
	return slices.ContainsFunc(sections, func(s string) bool {
		return name == s || strings.HasPrefix(name, s+".")
	})
}

// setupHelp gives root (metalloc-manage) --help-all, a --help that lists
// only the configuration flags each command reads, and a help command that
// refuses an unknown topic (exit ExitUsage) instead of printing the root's
// help and exiting 0.
func setupHelp(root *cobra.Command) {
	root.PersistentFlags().Bool(helpAllFlag, false, "help with every configuration flag (--section.key), also those this command does not read")
	defaultHelp := root.HelpFunc()
	root.SetHelpFunc(func(c *cobra.Command, args []string) {
		if all, _ := c.Flags().GetBool(helpAllFlag); all {
			defaultHelp(c, args)
			return
		}
		keys := map[string]bool{}
		for _, k := range config.Keys() {
			keys[k.Flag()] = true
		}
		sections := readSections(c)
		var hidden []*pflag.Flag
		hide := func(f *pflag.Flag) {
			if keys[f.Name] && !f.Hidden && !shownKey(f.Name, sections) {
				f.Hidden = true
				hidden = append(hidden, f)
			}
		}
		c.InheritedFlags().VisitAll(hide)
		c.LocalFlags().VisitAll(hide)
		defaultHelp(c, args)
		for _, f := range hidden {
			f.Hidden = false
		}
		if len(hidden) > 0 {
			fmt.Fprintf(c.OutOrStdout(), "\n%d more configuration flags (--section.key, docs/configuration.md), which this command does not read: '%s --help-all'.\n",
				len(hidden), c.CommandPath())
		}
	})
	root.SetHelpCommand(&cobra.Command{
		Use:   "help [command]",
		Short: "Help about any command",
		Long:  "Help provides help for any command in the application.\nSimply type " + root.Name() + " help [path to command] for full details.",
		RunE: func(c *cobra.Command, args []string) error {
			cmd, rest, err := c.Root().Find(args)
			if err != nil {
				return usageError("%v\nRun '%s --help' for usage.", err, c.Root().Name())
			}
			if len(rest) > 0 {
				return unknownCommand(cmd, rest[0])
			}
			cmd.InitDefaultHelpFlag()
			cmd.InitDefaultVersionFlag()
			return cmd.Help()
		},
	})
}

// helpAllArgs turns --help-all in args (before a "--") into --help-all
// --help: cobra shows help only for its own --help, and the help function
// then reads --help-all. `help COMMAND --help-all` stays as it is.
func helpAllArgs(args []string) []string {
	if len(args) > 0 && args[0] == "help" {
		return args // the help command reads --help-all itself
	}
	for i, a := range args {
		if a == "--" {
			break
		}
		if a == "--"+helpAllFlag {
			out := slices.Clone(args[:i+1])
			out = append(out, "--help")
			return append(out, args[i+1:]...)
		}
	}
	return args
}
