package main

import (
	"errors"
	"os"
	osexec "os/exec"

	"github.com/spf13/cobra"

	"github.com/metalloc/metalloc/db"
	"github.com/metalloc/metalloc/db/embedded"
)

func devCmd() *cobra.Command {
	c := &cobra.Command{Use: "dev", Short: "local development stack"}
	var pgSettings map[string]string
	exec := &cobra.Command{
		Use:   "exec -- COMMAND [ARGS...]",
		Short: "run COMMAND with DATABASE_URL pointing at a migrated database (a private PostgreSQL unless DATABASE_URL is set)",
		Long: "Runs COMMAND with DATABASE_URL pointing at a migrated database: a private PostgreSQL started for\n" +
			"it and removed afterwards, unless DATABASE_URL is set. --pg-setting NAME=VALUE (repeatable) passes a\n" +
			"server setting to the private PostgreSQL, e.g. for a benchmark's plans:\n" +
			"--pg-setting shared_preload_libraries=auto_explain --pg-setting auto_explain.log_min_duration=20ms.",
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			_, log, err := load(cmd)
			if err != nil {
				return err
			}
			url, stop, err := embedded.WithDatabase(cmd.Context(), log, pgSettings)
			if err != nil {
				return err
			}
			defer stop()
			if _, err := db.Migrate(cmd.Context(), url, log); err != nil {
				return err
			}
			child := osexec.CommandContext(cmd.Context(), args[0], args[1:]...)
			child.Stdin, child.Stdout, child.Stderr = os.Stdin, os.Stdout, os.Stderr
			child.Env = append(os.Environ(), "DATABASE_URL="+url)
			err = child.Run()
			var exit *osexec.ExitError
			if errors.As(err, &exit) {
				stop()
				os.Exit(exit.ExitCode())
			}
			return err
		},
	}
	exec.Flags().StringToStringVar(&pgSettings, "pg-setting", nil,
		"NAME=VALUE: a server setting of the private PostgreSQL (repeatable; ignored with DATABASE_URL)")
	c.AddCommand(exec, upCmd(), devEnvCmd())
	return c
}
