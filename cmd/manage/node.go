package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/schollz/progressbar/v3"
	"github.com/spf13/cobra"
	"go.uber.org/zap"

	"github.com/metalloc/metalloc/db"
	"github.com/metalloc/metalloc/node"
	"github.com/metalloc/metalloc/port"
)

func nodeCmd() *cobra.Command {
	c := &cobra.Command{Use: "node", Short: "nodes"}
	var available bool
	imp := &cobra.Command{
		Use:   "import FILE",
		Short: "create or update nodes (with their ports and port groups) from an `openstack baremetal create` file (JSON or YAML, plus traits)",
		Long: "Idempotent by uuid (else name). With --available (default) enrolled nodes are driven\n" +
			"through manage, power off and provide so that they can be allocated.",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cfg, log, err := load(cmd)
			if err != nil {
				return err
			}
			if err := cfg.RequireDatabase(); err != nil {
				return err
			}
			if cfg.Ironic.Endpoint != "" {
				// In front of Ironic the nodes are Ironic's: the conductors
				// mirror them, and would remove imported ones.
				return fmt.Errorf("ironic.endpoint is set (%s): enrol nodes in Ironic (through metalloc-api, e.g. "+
					"`openstack baremetal create`); metalloc mirrors them", cfg.Ironic.Endpoint)
			}
			return importNodes(cmd.Context(), cfg.Database.URL, args[0], available, log)
		},
	}
	imp.Flags().BoolVar(&available, "available", true, "make enrolled nodes available")
	c.AddCommand(imp)
	return c
}

// importNodes runs node.Import on the node file at path with a progress bar.
func importNodes(ctx context.Context, url, path string, available bool, log *zap.Logger) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	return importFrom(ctx, url, f, path, available, log)
}

// importFrom runs node.Import on the node file r (named path in messages)
// with a progress bar.
func importFrom(ctx context.Context, url string, r io.Reader, path string, available bool, log *zap.Logger) error {
	pool, err := db.Open(ctx, url, db.PoolOptions{ApplicationName: "metalloc-manage"})
	if err != nil {
		return err
	}
	defer pool.Close()
	return importWith(ctx, pool, r, path, available, log)
}

// importWith is importFrom on an open pool.
func importWith(ctx context.Context, pool *pgxpool.Pool, r io.Reader, path string, available bool, log *zap.Logger) error {
	if err := db.CheckSchema(ctx, pool); err != nil {
		return err
	}
	var bar *progressbar.ProgressBar
	res, err := node.Import(ctx, node.NewStore(pool), r, node.ImportOptions{MakeAvailable: available, Ports: port.Importer{}},
		func(done, total int) {
			if bar == nil {
				bar = progressbar.NewOptions(total, progressbar.OptionSetDescription("importing nodes"),
					progressbar.OptionSetWriter(os.Stderr), progressbar.OptionShowCount(),
					progressbar.OptionClearOnFinish(), progressbar.OptionThrottle(200*time.Millisecond))
			}
			_ = bar.Set(done)
		})
	if bar != nil {
		_ = bar.Finish()
	}
	if err != nil {
		return fmt.Errorf("importing %s: %w", path, err)
	}
	log.Info("nodes imported", zap.String("file", path), zap.Int("total", res.Total), zap.Int("created", res.Created),
		zap.Int("updated", res.Updated), zap.Int("unchanged", res.Unchanged), zap.Int("made_available", res.MadeAvailable),
		zap.Int("ports", res.Ports), zap.Int("portgroups", res.Portgroups),
		zap.Strings("warnings", res.Warnings))
	return nil
}
