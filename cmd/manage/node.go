package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/schollz/progressbar/v3"
	"github.com/spf13/cobra"
	"go.uber.org/zap"

	"github.com/metalloc/metalloc/conductor"
	"github.com/metalloc/metalloc/db"
	"github.com/metalloc/metalloc/node"
	"github.com/metalloc/metalloc/port"
)

func nodeCmd() *cobra.Command {
	c := &cobra.Command{Use: "node", Short: "nodes"}
	var available, waitPlacement bool
	imp := &cobra.Command{
		Use:   "import FILE",
		Short: "create or update nodes (with their ports and port groups) from an `openstack baremetal create` file (JSON or YAML, plus traits)",
		Long: "Idempotent by uuid (else name). With --available (default) enrolled nodes are driven\n" +
			"through manage, power off and provide so that they can be allocated. When conductors run the\n" +
			"placement backend, it then waits (--wait-placement, default) until their resource tracker has\n" +
			"mirrored the nodes into Placement, so that they are allocatable through it when it returns.",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cfg, log, err := loadDatabase(cmd)
			if err != nil {
				return err
			}
			if cfg.Ironic.Endpoint != "" {
				// In front of Ironic the nodes are Ironic's: the conductors
				// mirror them, and would remove imported ones.
				return fmt.Errorf("ironic.endpoint is set (%s): enrol nodes in Ironic (through metalloc-api, e.g. "+
					"`openstack baremetal create`); metalloc mirrors them", cfg.Ironic.Endpoint)
			}
			return importNodes(cmd.Context(), cfg.Database.URL, args[0], importOptions{available, waitPlacement}, log)
		},
	}
	imp.Flags().BoolVar(&available, "available", true, "make enrolled nodes available")
	imp.Flags().BoolVar(&waitPlacement, "wait-placement", true,
		"when conductors run the placement backend, wait until their resource tracker has mirrored the nodes into Placement")
	c.AddCommand(imp, setReservableCmd())
	return c
}

// setReservableCmd is `node set-reservable NODE... [--off]`: nodes into
// (or, with --off, out of) the pool leases take from (docs/leases.md).
func setReservableCmd() *cobra.Command {
	var off bool
	c := &cobra.Command{
		Use:   "set-reservable NODE... [--off]",
		Short: "put nodes (uuids or names) into the pool leases take from, or back on demand with --off",
		Long: "A reservable node is booked through leases (docs/leases.md); on-demand allocations of\n" +
			"projects other than its lessee never take it. All or nothing: a name or uuid that is no\n" +
			"node is an error and nothing changes. The same as PATCHing /reservable on each node.",
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cfg, log, err := loadDatabase(cmd)
			if err != nil {
				return err
			}
			pool, err := db.Open(cmd.Context(), cfg.Database.URL, db.PoolOptions{ApplicationName: "metalloc-manage"})
			if err != nil {
				return err
			}
			defer pool.Close()
			n, err := node.NewStore(pool).SetReservable(cmd.Context(), args, !off)
			if err != nil {
				return err
			}
			log.Info("nodes changed", zap.Int("nodes", n), zap.Bool("reservable", !off))
			return nil
		},
	}
	c.Flags().BoolVar(&off, "off", false, "make the nodes on-demand (not reservable) again")
	return c
}

// importOptions are node import's flags.
type importOptions struct {
	// available drives enrolled nodes to available (--available).
	available bool
	// waitPlacement waits for the resource tracker's mirror
	// (--wait-placement, waitMirrored).
	waitPlacement bool
}

// mirrorStall is how long an import waits for a resource tracker that
// mirrors nothing (conductor.ErrMirrorStalled) before it stops waiting.
const mirrorStall = 30 * time.Second

// importNodes runs node.Import on the node file at path with a progress bar.
func importNodes(ctx context.Context, url, path string, opts importOptions, log *zap.Logger) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	return importFrom(ctx, url, f, path, opts, log)
}

// importFrom runs node.Import on the node file r (named path in messages)
// with a progress bar.
func importFrom(ctx context.Context, url string, r io.Reader, path string, opts importOptions, log *zap.Logger) error {
	pool, err := db.Open(ctx, url, db.PoolOptions{ApplicationName: "metalloc-manage"})
	if err != nil {
		return err
	}
	defer pool.Close()
	return importWith(ctx, pool, r, path, opts, log)
}

// importWith is importFrom on an open pool.
func importWith(ctx context.Context, pool *pgxpool.Pool, r io.Reader, path string, opts importOptions, log *zap.Logger) error {
	if err := db.CheckSchema(ctx, pool); err != nil {
		return err
	}
	var bar *progressbar.ProgressBar
	res, err := node.Import(ctx, node.NewStore(pool), r, node.ImportOptions{MakeAvailable: opts.available, Ports: port.Importer{}},
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
	if !opts.waitPlacement {
		return nil
	}
	return waitMirrored(ctx, pool, log)
}

// waitMirrored waits, with a progress bar, until the conductors' resource
// tracker has mirrored the nodes just imported into Placement
// (conductor.WaitMirrored; it returns at once when no conductor runs the
// placement backend). A tracker that mirrors nothing for mirrorStall is
// reported and not waited for: the import itself succeeded.
func waitMirrored(ctx context.Context, pool *pgxpool.Pool, log *zap.Logger) error {
	start := time.Now()
	var bar *progressbar.ProgressBar
	var total int64
	waited, err := conductor.WaitMirrored(ctx, pool, mirrorStall, func(left int64) {
		if bar == nil && left > 0 {
			total = left
			bar = progressbar.NewOptions64(total, progressbar.OptionSetDescription("mirroring node changes into Placement"),
				progressbar.OptionSetWriter(os.Stderr), progressbar.OptionShowCount(),
				progressbar.OptionClearOnFinish(), progressbar.OptionThrottle(200*time.Millisecond))
		}
		if bar != nil {
			_ = bar.Set64(max(total-left, 0))
		}
	})
	if bar != nil {
		_ = bar.Finish()
	}
	switch {
	case errors.Is(err, conductor.ErrMirrorStalled):
		log.Warn("imported nodes not mirrored into Placement yet: they become allocatable through the placement backend "+
			"once a conductor's resource tracker mirrors them", zap.Error(err))
		return nil
	case err != nil:
		return fmt.Errorf("waiting for the resource tracker to mirror the nodes into Placement: %w", err)
	case waited:
		log.Info("imported nodes mirrored into Placement by the resource tracker", zap.Duration("took", time.Since(start)))
	}
	return nil
}
