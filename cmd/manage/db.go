package main

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/cobra"
	"go.uber.org/zap"

	"github.com/metalloc/metalloc/cmd/internal/cli"
	"github.com/metalloc/metalloc/config"
	"github.com/metalloc/metalloc/db"
)

func dbCmd() *cobra.Command {
	c := &cobra.Command{Use: "db", Short: "database schema"}
	var contract bool
	sync := &cobra.Command{
		Use:   "sync [--contract]",
		Short: "apply pending expand migrations; --contract the rest once no older binary runs (safe to run concurrently and repeatedly)",
		Long: `Applies the pending migrations in order while they are expand (binaries of
the previous release keep running on them) and stops before the first
contract one, printing how many wait and the command for them. A database
never migrated gets every migration at once (nothing runs on it yet).

--contract then applies the rest, but only once every live metalloc-api,
metalloc-placement and conductor runs a binary that knows this binary's
latest migration (see "status versions"); otherwise it changes nothing
more, lists those stragglers and exits 2. A database newer than this
binary is refused (exit 2). See docs/operations.md, "Upgrading".`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, log, err := loadDatabase(cmd)
			if err != nil {
				return err
			}
			r, err := db.Sync(cmd.Context(), cfg.Database.URL, db.SyncOptions{Contract: contract, Log: log})
			w := cmd.OutOrStdout()
			var late *db.StragglersError
			switch {
			case errors.As(err, &late):
				fmt.Fprintf(w, "%d contract migration(s) wait (%s); these processes run binaries that know less than version %d:\n",
					len(r.Waiting), versionRange(r.Waiting), late.Target)
				if err := printBinaries(w, late.Stragglers); err != nil {
					return err
				}
				return cli.Exit(cli.ExitUsage, err)
			case errors.Is(err, db.ErrSchemaTooNew):
				return cli.Exit(cli.ExitUsage, err)
			case err != nil:
				return err
			}
			if len(r.Waiting) > 0 {
				fmt.Fprintf(w, "database at version %d; %d migration(s) wait, the first of them contract (%s): run `metalloc-manage db sync --contract` once every API and conductor runs a binary that knows version %d\n",
					r.Version, len(r.Waiting), versionRange(r.Waiting), r.Waiting[len(r.Waiting)-1].Version)
				log.Info("contract migrations wait", zap.Int64("version", r.Version), zap.Int("waiting", len(r.Waiting)),
					zap.Int64("target", r.Waiting[len(r.Waiting)-1].Version))
				return nil
			}
			log.Info("database schema is up to date", zap.Int64("version", r.Version), zap.Int("applied", len(r.Applied)))
			return nil
		},
	}
	sync.Flags().BoolVar(&contract, "contract", false, "apply the contract migrations too, once no live API or conductor runs an older binary")
	c.AddCommand(sync, &cobra.Command{
		Use:   "version",
		Short: "print the database's schema version and the one this binary needs",
		Long: `Prints two lines, "database: N" (0 for a database never migrated) and
"binary: M", then, when they differ, whether this binary may run on that
database (its compatibility window: docs/operations.md, "Upgrading") and
what to do otherwise. Exit status 0 when this binary may run on it, 2 when
not (run db sync, db sync --contract, or upgrade metalloc), 1 when the
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
				check := db.CheckSchema(ctx, pool)
				w := cmd.OutOrStdout()
				fmt.Fprintf(w, "database: %d\nbinary: %d\n", have, want)
				var outside *db.SchemaError
				switch {
				case errors.As(check, &outside) && errors.Is(check, db.ErrSchemaOutdated):
					fmt.Fprintln(w, "the database needs "+outside.Command)
					return exitCode(cli.ExitUsage)
				case errors.As(check, &outside):
					fmt.Fprintln(w, "the database is newer than this binary: "+outside.Command)
					return exitCode(cli.ExitUsage)
				case check != nil:
					return check
				case have < want:
					fmt.Fprintln(w, "inside this binary's window: the migrations it lacks are contract (`metalloc-manage db sync --contract` once no older binary runs)")
				case have > want:
					fmt.Fprintln(w, "inside this binary's window: the migrations it does not know are expand")
				}
				return nil
			})
		},
	}, onlineDataMigrationsCmd())
	return c
}

// versionRange names migrations ms (oldest first) as "47" or "47..49".
func versionRange(ms []db.Migration) string {
	if len(ms) == 0 {
		return ""
	}
	first, last := ms[0].Version, ms[len(ms)-1].Version
	if first == last {
		return "migration " + strconv.FormatInt(first, 10)
	}
	return fmt.Sprintf("migrations %d..%d", first, last)
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
