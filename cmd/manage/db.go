package main

import (
	"fmt"

	"github.com/spf13/cobra"
	"go.uber.org/zap"

	"github.com/metalloc/metalloc/db"
)

func dbCmd() *cobra.Command {
	c := &cobra.Command{Use: "db", Short: "database schema"}
	c.AddCommand(&cobra.Command{
		Use:   "sync",
		Short: "apply pending migrations (safe to run concurrently and repeatedly)",
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, log, err := load(cmd)
			if err != nil {
				return err
			}
			if err := cfg.RequireDatabase(); err != nil {
				return err
			}
			v, err := db.Migrate(cmd.Context(), cfg.Database.URL, log)
			if err != nil {
				return err
			}
			log.Info("database schema is up to date", zap.Int64("version", v))
			return nil
		},
	}, &cobra.Command{
		Use:   "version",
		Short: "print the schema version this binary needs",
		RunE: func(cmd *cobra.Command, _ []string) error {
			v, err := db.LatestVersion()
			fmt.Println(v)
			return err
		},
	}, onlineDataMigrationsCmd())
	return c
}
