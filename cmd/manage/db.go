package main

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/cobra"
	"go.uber.org/zap"

	"github.com/metalloc/metalloc/cmd/internal/cli"
	"github.com/metalloc/metalloc/config"
	"github.com/metalloc/metalloc/db"
)

func dbCmd() *cobra.Command {
	c := &cobra.Command{Use: "db", Short: "database schema"}
	c.AddCommand(&cobra.Command{
		Use:   "sync",
		Short: "apply pending migrations (safe to run concurrently and repeatedly; refuses a schema newer than this binary)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, log, err := loadDatabase(cmd)
			if err != nil {
				return err
			}
			v, err := db.Migrate(cmd.Context(), cfg.Database.URL, log)
			if errors.Is(err, db.ErrSchemaTooNew) {
				return cli.Exit(cli.ExitUsage, err)
			}
			if err != nil {
				return err
			}
			log.Info("database schema is up to date", zap.Int64("version", v))
			return nil
		},
	}, &cobra.Command{
		Use:   "version",
		Short: "print the database's schema version and the one this binary needs",
		Long: `Prints two lines, "database: N" (0 for a database never migrated) and
"binary: M", then what to do when they differ. Exit status 0 when they are
equal, 2 when they differ (run db sync, or upgrade metalloc), 1 when the
database cannot be read.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			want, err := db.LatestVersion()
			if err != nil {
				return err
			}
			return withDB(cmd, func(ctx context.Context, _ config.Config, pool *pgxpool.Pool, _ *zap.Logger) error {
				have, err := db.SchemaVersion(ctx, pool)
				if err != nil {
					return err
				}
				w := cmd.OutOrStdout()
				fmt.Fprintf(w, "database: %d\nbinary: %d\n", have, want)
				switch {
				case have < want:
					fmt.Fprintln(w, "the database needs `metalloc-manage db sync`")
					return exitCode(cli.ExitUsage)
				case have > want:
					fmt.Fprintln(w, "the database is newer than this binary: upgrade metalloc")
					return exitCode(cli.ExitUsage)
				}
				return nil
			})
		},
	}, onlineDataMigrationsCmd())
	return c
}

// requireSchema fails with ExitUsage and one line saying what to do when
// the database's schema is not this binary's (never migrated: `db sync`
// first), instead of the SQL errors the command would meet.
func requireSchema(ctx context.Context, pool *pgxpool.Pool) error {
	err := db.CheckSchema(ctx, pool)
	if errors.Is(err, db.ErrSchemaOutdated) || errors.Is(err, db.ErrSchemaTooNew) {
		return cli.Exit(cli.ExitUsage, err)
	}
	return err
}
