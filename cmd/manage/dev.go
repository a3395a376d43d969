package main

import (
	"errors"
	"os"
	"os/exec"

	"github.com/spf13/cobra"

	"github.com/metalloc/metalloc/db"
	"github.com/metalloc/metalloc/db/embedded"
)

func devCmd() *cobra.Command {
	c := &cobra.Command{Use: "dev", Short: "local development stack"}
	c.AddCommand(&cobra.Command{
		Use:   "exec -- COMMAND [ARGS...]",
		Short: "run COMMAND with DATABASE_URL pointing at a migrated database (a private PostgreSQL unless DATABASE_URL is set)",
		Args:  cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			_, log, err := load(cmd)
			if err != nil {
				return err
			}
			url, stop, err := embedded.WithDatabase(cmd.Context(), log)
			if err != nil {
				return err
			}
			defer stop()
			if _, err := db.Migrate(cmd.Context(), url, log); err != nil {
				return err
			}
			child := exec.CommandContext(cmd.Context(), args[0], args[1:]...)
			child.Stdin, child.Stdout, child.Stderr = os.Stdin, os.Stdout, os.Stderr
			child.Env = append(os.Environ(), "DATABASE_URL="+url)
			err = child.Run()
			var exit *exec.ExitError
			if errors.As(err, &exit) {
				stop()
				os.Exit(exit.ExitCode())
			}
			return err
		},
	}, upCmd(), devEnvCmd())
	return c
}
