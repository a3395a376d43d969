package main

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/cobra"
	"go.uber.org/zap"

	"github.com/metalloc/metalloc/config"
	"github.com/metalloc/metalloc/db"
	"github.com/metalloc/metalloc/topology"
)

// topologyCmd is `metalloc-manage topology set|show`: the topology levels
// gang allocation places groups in, read and written in the database (the
// same as GET/PUT /v1/topology).
func topologyCmd() *cobra.Command {
	c := &cobra.Command{
		Use:   "topology",
		Short: "set and show the topology levels (coarse to fine) allocation groups are placed in",
		Long: "A level is NAME=SOURCE, SOURCE one of extra.KEY, properties.KEY, trait:PREFIX\n" +
			"(the rest of the node's first trait starting with PREFIX) or aggregate (its Placement\n" +
			"provider's smallest aggregate uuid). A domain is the nodes sharing the values of a level\n" +
			"and of every coarser one, named by joining them with \"/\" (row 1, rack 07: 1/07).",
	}
	var clear bool
	set := &cobra.Command{
		Use:     "set NAME=SOURCE...",
		Short:   "replace the topology's levels, coarse to fine, in one transaction",
		Example: "  metalloc-manage topology set row=extra.row rack=extra.rack\n  metalloc-manage topology set rack=trait:CUSTOM_RACK_\n  metalloc-manage topology set --clear",
		RunE: func(cmd *cobra.Command, args []string) error {
			if clear != (len(args) == 0) {
				return errors.New("give the levels, coarse to fine, as NAME=SOURCE (or --clear alone to remove the topology)")
			}
			levels, err := topology.ParseLevels(args)
			if err != nil {
				return err
			}
			return withSchema(cmd, func(ctx context.Context, pool *pgxpool.Pool) error {
				if err := topology.Save(ctx, pool, levels); err != nil {
					return err
				}
				if len(levels) == 0 {
					fmt.Fprintln(cmd.OutOrStdout(), "topology removed")
					return nil
				}
				fmt.Fprintf(cmd.OutOrStdout(), "topology set: %s\n", topology.FormatLevels(levels))
				return nil
			})
		},
	}
	set.Flags().BoolVar(&clear, "clear", false, "remove every level (groups may then only use no placement rule)")
	var f topology.TreeFilter
	var out *output
	show := &cobra.Command{
		Use:   "show [--resource-class C] [--trait T]... [-f table|json|yaml|value] [-c COLUMN]...",
		Short: "print the tree of domains with free/total node counts",
		Long: "The table is the tree, indented. -f json, yaml or value (or -c) print one row per domain\n" +
			"instead, parents before children: Domain (its label), Level, Path (its values joined with \"/\"),\n" +
			"Free and Total.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := out.check(); err != nil {
				return err
			}
			return withSchema(cmd, func(ctx context.Context, pool *pgxpool.Pool) error {
				levels, root, err := topology.Tree(ctx, pool, f)
				if err != nil {
					return err
				}
				if out.format == "table" && len(out.columns) == 0 {
					return topology.WriteTree(cmd.OutOrStdout(), levels, root, f)
				}
				return out.list(cmd.OutOrStdout(), domainColumns, domainRows(root))
			})
		},
	}
	out = addOutputFlags(show)
	show.Flags().StringVar(&f.ResourceClass, "resource-class", "", "count only nodes of this resource class")
	show.Flags().StringSliceVar(&f.Traits, "trait", nil, "count only nodes with this trait (repeat for several)")
	c.AddCommand(set, show)
	return c
}

// domainColumns are the columns of `topology show` other than its tree.
var domainColumns = []column{
	{heading: "Domain", field: "domain"}, {heading: "Level", field: "level"}, {heading: "Path", field: "path"},
	{heading: "Free", field: "free"}, {heading: "Total", field: "total"},
}

// domainRows flattens the tree under root, parents first.
func domainRows(root *topology.Domain) []map[string]any {
	var rows []map[string]any
	var walk func(d *topology.Domain)
	walk = func(d *topology.Domain) {
		rows = append(rows, map[string]any{"domain": d.Label(), "level": d.Level,
			"path": topology.DomainName(d.Path), "free": d.Free, "total": d.Total})
		for _, c := range d.Children {
			walk(c)
		}
	}
	walk(root)
	return rows
}

// withDB runs fn on a pool on the configured database.
func withDB(cmd *cobra.Command, fn func(context.Context, config.Config, *pgxpool.Pool, *zap.Logger) error) error {
	cfg, log, err := loadDatabase(cmd)
	if err != nil {
		return err
	}
	ctx := cmd.Context()
	pool, err := db.Open(ctx, cfg.Database.URL, db.PoolOptions{ApplicationName: "metalloc-manage"})
	if err != nil {
		return err
	}
	defer pool.Close()
	return fn(ctx, cfg, pool, log)
}

// withSchema is withDB once the database's schema is checked to be this
// binary's.
func withSchema(cmd *cobra.Command, fn func(context.Context, *pgxpool.Pool) error) error {
	return withDB(cmd, func(ctx context.Context, _ config.Config, pool *pgxpool.Pool, _ *zap.Logger) error {
		if err := requireSchema(ctx, pool); err != nil {
			return err
		}
		return fn(ctx, pool)
	})
}
