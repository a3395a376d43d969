package cli

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/metalloc/metalloc/buildinfo"
	"github.com/metalloc/metalloc/config"
	"github.com/metalloc/metalloc/db"
)

// Exit statuses of every metalloc binary (docs/deployment.md "Exit status").
const (
	// ExitFailure: the command or daemon failed (database unreachable,
	// hostname taken, ...).
	ExitFailure = 1
	// ExitUsage: the command line is wrong (unknown command, flag or
	// argument; a command group without its command). metalloc-manage
	// also exits 2 for a failed upgrade check and a database that needs
	// `db sync` first (as nova-status).
	ExitUsage = 2
	// ExitConfig: the configuration (file, METALLOC_ variables) has
	// problems; EX_CONFIG of sysexits.h, which the systemd units list in
	// RestartPreventExitStatus so a broken file is not restarted in a
	// loop.
	ExitConfig = 78
)

// ExitError asks Execute to exit with Code after printing Err (nothing
// when Err is nil: the command printed its report already).
type ExitError struct {
	Code int
	Err  error
}

func (e *ExitError) Error() string {
	if e.Err == nil {
		return fmt.Sprintf("exit status %d", e.Code)
	}
	return e.Err.Error()
}

func (e *ExitError) Unwrap() error { return e.Err }

// Exit returns an ExitError with code and err.
func Exit(code int, err error) error { return &ExitError{Code: code, Err: err} }

// usageError wraps a command-line mistake (exit ExitUsage).
func usageError(format string, args ...any) error {
	return Exit(ExitUsage, fmt.Errorf(format, args...))
}

// NewDaemon is the root command of a daemon (metalloc-api, -conductor,
// -placement): --version, --config and a --section.key flag for every
// configuration key it reads, no arguments.
func NewDaemon(b config.Binary, short string, run func(*cobra.Command, []string) error) *cobra.Command {
	cmd := &cobra.Command{Use: string(b), Short: short, RunE: run, Args: noArgs}
	setup(cmd, b, false)
	return cmd
}

// NewRoot is metalloc-manage's root command: like NewDaemon's flags, but
// persistent (every subcommand takes them) and subcommands instead of run;
// --help lists the configuration flags of the sections each command reads
// (ReadsConfig) and --help-all every one, and `help UNKNOWN` is exit
// ExitUsage as an unknown command is.
func NewRoot(b config.Binary, short string) *cobra.Command {
	cmd := &cobra.Command{Use: string(b), Short: short}
	setup(cmd, b, true)
	setupHelp(cmd)
	return cmd
}

func setup(cmd *cobra.Command, b config.Binary, persistent bool) {
	cmd.SilenceUsage, cmd.SilenceErrors = true, true
	cmd.Version = buildinfo.Get().String()
	cmd.SetVersionTemplate("{{.Name}} {{.Version}}\n")
	fs := cmd.Flags()
	if persistent {
		fs = cmd.PersistentFlags()
	}
	fs.String("config", "", "YAML config file (see configs/metalloc.yaml; check it with metalloc-manage config check)")
	config.AddFlags(fs, config.ReadBy(b))
	cmd.SetFlagErrorFunc(func(c *cobra.Command, err error) error {
		return usageError("%v\nRun '%s --help' for usage.", err, c.CommandPath())
	})
}

// noArgs refuses arguments to a command that takes none (exit ExitUsage).
func noArgs(cmd *cobra.Command, args []string) error {
	if len(args) > 0 {
		return usageError("unexpected argument %q for %q\nRun '%s --help' for usage.", args[0], cmd.CommandPath(), cmd.CommandPath())
	}
	return nil
}

// Execute runs root with os.Args and exits: 0, or the status an
// ExitError asks for (printing its error) or an error with an ExitCode()
// method (printing nothing), ExitUsage for a command-line
// mistake, ExitConfig for configuration problems, ExitFailure otherwise.
// Every command group (a command with subcommands but no action of its
// own) refuses an unknown subcommand with cobra's suggestions instead of
// printing its help and exiting 0.
func Execute(root *cobra.Command) {
	os.Exit(Run(root, os.Args[1:], os.Stderr))
}

// Run is Execute without exiting: it runs root with args and returns the
// exit status, printing errors to stderr.
func Run(root *cobra.Command, args []string, stderr io.Writer) int {
	RequireSubcommands(root)
	root.SetArgs(helpAllArgs(args))
	err := root.Execute()
	if err == nil {
		return 0
	}
	code := ExitFailure
	var ee *ExitError
	var coded interface{ ExitCode() int }
	var problems config.Problems
	switch {
	case errors.As(err, &ee):
		code = ee.Code
		if ee.Err == nil {
			return code
		}
	case errors.As(err, &coded):
		// A status alone: the command printed its report already.
		return coded.ExitCode()
	case errors.As(err, &problems):
		code = ExitConfig
	case strings.HasPrefix(err.Error(), "unknown command "):
		// cobra's own check of the root's arguments.
		code = ExitUsage
	}
	// A database connection that failed anywhere (also through
	// database/sql, as db sync's): what happened, not pgx's TLS fallback.
	fmt.Fprintf(stderr, "%s: %v\n", root.Name(), db.DescribeConnectError(err))
	return code
}

// RequireSubcommands makes every command group under (and including) c
// fail with ExitUsage on an unknown subcommand ("unknown command "snyc" for
// "metalloc-manage db"", with suggestions) or on none, instead of printing
// help and succeeding.
func RequireSubcommands(c *cobra.Command) {
	for _, sub := range c.Commands() {
		RequireSubcommands(sub)
	}
	if !c.HasSubCommands() || c.Runnable() {
		return
	}
	c.SuggestionsMinimumDistance = 2
	c.Args = cobra.ArbitraryArgs
	c.RunE = func(cmd *cobra.Command, args []string) error {
		if len(args) == 0 {
			return usageError("%q needs a command: %s\nRun '%s --help' for usage.", cmd.CommandPath(),
				strings.Join(commandNames(cmd), ", "), cmd.CommandPath())
		}
		return unknownCommand(cmd, args[0])
	}
}

// unknownCommand is the ExitUsage error for an unknown subcommand name of
// cmd, with cobra's suggestions.
func unknownCommand(cmd *cobra.Command, name string) error {
	msg := fmt.Sprintf("unknown command %q for %q", name, cmd.CommandPath())
	if s := cmd.SuggestionsFor(name); len(s) > 0 {
		msg += "\n\nDid you mean this?\n\t" + strings.Join(s, "\n\t") + "\n"
	}
	return usageError("%s\nRun '%s --help' for usage.", msg, cmd.CommandPath())
}

func commandNames(c *cobra.Command) []string {
	var names []string
	for _, s := range c.Commands() {
		if s.IsAvailableCommand() {
			names = append(names, s.Name())
		}
	}
	return names
}
