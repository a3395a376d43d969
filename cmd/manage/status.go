package main

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/cobra"
	"go.uber.org/zap"

	"github.com/metalloc/metalloc/cmd/internal/cli"
	"github.com/metalloc/metalloc/conductor"
	"github.com/metalloc/metalloc/config"
	"github.com/metalloc/metalloc/placement"
	"github.com/metalloc/metalloc/placement/client"
)

// exitCode is an error that asks main to exit with this status and print
// nothing more (the command printed its report already).
type exitCode int

func (e exitCode) Error() string { return "exit status " + strconv.Itoa(int(e)) }

// ExitCode is the status (cli.Run exits with it).
func (e exitCode) ExitCode() int { return int(e) }

// Upgrade check results and their exit statuses, as nova-status (oslo.upgradecheck).
const (
	checkSuccess = 0
	checkWarning = 1
	checkFailure = 2
)

var checkNames = map[int]string{checkSuccess: "Success", checkWarning: "Warning", checkFailure: "Failure"}

func statusCmd() *cobra.Command {
	c := &cobra.Command{Use: "status", Short: "upgrade readiness checks"}
	c.AddCommand(&cobra.Command{
		Use:   "upgrade-check",
		Short: "check the deployment is ready for this release (exit 0 success, 1 warning, 2 failure)",
		Long: `Checks, as nova-status upgrade check does:
  - no allocation ratio option is explicitly 0.0 (failure);
  - no inventory of the nodes' resource providers in Placement has an
    allocation_ratio of 0.0 or none (warning: run
    "metalloc-manage db online-data-migrations").`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return withPlacement(cmd, func(ctx context.Context, cfg config.Config, pool *pgxpool.Pool, pc *client.Client, log *zap.Logger) error {
				if code := upgradeCheck(ctx, cfg.PlacementBackend, pool, pc, log, cmd.OutOrStdout()); code != 0 {
					return exitCode(code)
				}
				return nil
			})
		},
	}, versionsCmd())
	return c
}

// onlineDataMigrationsCmd is "db online-data-migrations".
func onlineDataMigrationsCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "online-data-migrations",
		Short: "repair data in place: allocation ratios of 0.0 or none in Placement (exit 1 if some remain)",
		RunE: func(cmd *cobra.Command, _ []string) error {
			return withPlacement(cmd, func(ctx context.Context, cfg config.Config, pool *pgxpool.Pool, pc *client.Client, log *zap.Logger) error {
				if code := onlineDataMigrations(ctx, cfg.PlacementBackend, pool, pc, log, cmd.OutOrStdout()); code != 0 {
					return exitCode(code)
				}
				return nil
			})
		},
	}
}

// withPlacement loads the configuration, opens the database, checks its
// schema is this binary's (requireSchema) and a Placement client, and runs
// fn.
func withPlacement(cmd *cobra.Command, fn func(context.Context, config.Config, *pgxpool.Pool, *client.Client, *zap.Logger) error) error {
	return withDB(cmd, func(ctx context.Context, cfg config.Config, pool *pgxpool.Pool, log *zap.Logger) error {
		if err := requireSchema(ctx, pool); err != nil {
			return err
		}
		pc, err := cli.PlacementClient(cfg, log)
		if err != nil {
			return err
		}
		return fn(ctx, cfg, pool, pc, log)
	})
}

// upgradeCheck runs the upgrade checks, prints their table to w and returns
// the worst result (checkSuccess, checkWarning or checkFailure).
func upgradeCheck(ctx context.Context, pb config.PlacementBackend, pool *pgxpool.Pool, pc *client.Client, log *zap.Logger, w io.Writer) int {
	tcfg := conductor.TrackerConfigFrom(pb)
	type result struct {
		check   string
		code    int
		details string
	}
	var results []result

	// 1. Ratio options explicitly 0.0.
	r := result{check: "Allocation ratio options"}
	if bad := tcfg.Ratios.InvalidRatios(); len(bad) > 0 {
		r.code = checkFailure
		r.details = "explicitly set to 0.0 (or below): " + strings.Join(bad, ", ") +
			". Unset them (no override) or set a ratio above 0; see docs/architecture.md (Initial allocation ratios)."
	}
	results = append(results, r)

	// 2. Providers with 0.0 or missing ratios in Placement.
	r = result{check: "Provider allocation ratios"}
	zs, err := conductor.NewTracker(pool, pc, tcfg, log).FindZeroRatios(ctx)
	switch {
	case err != nil:
		r.code = checkFailure
		r.details = "cannot read the providers' inventories: " + err.Error()
	case len(zs) > 0:
		r.code = checkWarning
		provs := map[string]bool{}
		for _, z := range zs {
			provs[z.Provider.String()] = true
		}
		r.details = fmt.Sprintf("%d inventories of %d resource providers have an allocation_ratio of 0.0 or none "+
			"(first: %s %s). Run \"metalloc-manage db online-data-migrations\".",
			len(zs), len(provs), zs[0].Provider, zs[0].ResourceClass)
	}
	results = append(results, r)

	// 3. Inventories that an update left below their allocations' usage
	// (accepted, as Placement 8.0 does, with a warning).
	r = result{check: "Allocations within capacity"}
	over, err := placement.OverCapacity(ctx, pool)
	switch {
	case err != nil:
		r.code = checkFailure
		r.details = "cannot read metalloc-placement's inventories: " + err.Error()
	case len(over) > 0:
		r.code = checkWarning
		list := make([]string, 0, min(len(over), 5))
		for _, o := range over[:min(len(over), 5)] {
			list = append(list, fmt.Sprintf("%s (%s) %s: %d used of %d", o.ProviderUuid, o.ProviderName, o.ResourceClass, o.Used, o.Capacity))
		}
		more := ""
		if len(over) > len(list) {
			more = fmt.Sprintf(" and %d more", len(over)-len(list))
		}
		r.details = fmt.Sprintf("%d inventories have allocations above their capacity: %s%s. "+
			"Free or move those allocations, or raise the inventory.", len(over), strings.Join(list, "; "), more)
	}
	results = append(results, r)

	worst := checkSuccess
	rows := make([][]string, 0, len(results))
	for _, r := range results {
		worst = max(worst, r.code)
		d := r.details
		if d == "" {
			d = "None"
		}
		rows = append(rows, []string{r.check, checkNames[r.code], d})
	}
	printTable(w, []string{"Check", "Result", "Details"}, rows)
	return worst
}

// onlineDataMigrations repairs allocation ratios of 0.0 or none, prints the
// table of migrations and returns 0, or 1 when some could not be migrated.
func onlineDataMigrations(ctx context.Context, pb config.PlacementBackend, pool *pgxpool.Pool, pc *client.Client, log *zap.Logger, w io.Writer) int {
	tr := conductor.NewTracker(pool, pc, conductor.TrackerConfigFrom(pb), log)
	found, done, err := tr.RepairZeroRatios(ctx)
	printTable(w, []string{"Migration", "Total Found", "Completed"}, [][]string{
		{"fill_zero_allocation_ratios", strconv.Itoa(found), strconv.Itoa(done)},
	})
	if err != nil {
		fmt.Fprintln(w, "Some migrations failed:", err)
		return 1
	}
	if done < found {
		return 1
	}
	return 0
}

// printTable prints a boxed table (as nova-status and nova-manage do).
func printTable(w io.Writer, headers []string, rows [][]string) {
	width := make([]int, len(headers))
	for i, h := range headers {
		width[i] = utf8.RuneCountInString(h)
	}
	for _, r := range rows {
		for i, c := range r {
			width[i] = max(width[i], utf8.RuneCountInString(c))
		}
	}
	sep := "+"
	for _, n := range width {
		sep += strings.Repeat("-", n+2) + "+"
	}
	line := func(cells []string) {
		s := "|"
		for i, c := range cells {
			s += " " + c + strings.Repeat(" ", width[i]-utf8.RuneCountInString(c)) + " |"
		}
		fmt.Fprintln(w, s)
	}
	fmt.Fprintln(w, sep)
	line(headers)
	fmt.Fprintln(w, sep)
	for _, r := range rows {
		line(r)
	}
	fmt.Fprintln(w, sep)
}
