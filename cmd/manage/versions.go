package main

import (
	"context"
	"io"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/cobra"
	"go.uber.org/zap"

	"github.com/metalloc/metalloc/config"
	"github.com/metalloc/metalloc/db"
)

// versionsCmd is "status versions": the registered processes with their
// versions, as `db sync --contract` sees them.
func versionsCmd() *cobra.Command {
	var out *output
	c := &cobra.Command{
		Use:   "versions [-f table|json|yaml|value] [-c COLUMN]...",
		Short: "list the registered APIs, Placement APIs and conductors with their versions and schema versions",
		Long: `One row per process registered in api_servers (metalloc-api: kind api;
metalloc-placement: placement) or conductors: its hostname, pid, build
version, the highest migration its binary knows (Schema; 0: a conductor
from before migration 46), when it started and last heartbeat, and whether
it is live. "db sync --contract" waits for every live process to know its
target. Live ones first.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := out.check(); err != nil {
				return err
			}
			return withDB(cmd, func(ctx context.Context, _ config.Config, pool *pgxpool.Pool, _ *zap.Logger) error {
				if err := requireSchema(ctx, pool); err != nil {
					return err
				}
				bins, err := db.Binaries(ctx, pool)
				if err != nil {
					return err
				}
				return out.list(cmd.OutOrStdout(), binaryColumns, binaryRows(bins))
			})
		},
	}
	out = addOutputFlags(c)
	return c
}

// binaryColumns are the columns of `status versions` and of `db sync
// --contract`'s list of stragglers.
var binaryColumns = []column{
	{heading: "Kind", field: "kind"}, {heading: "Hostname", field: "hostname"}, {heading: "PID", field: "pid"},
	{heading: "Version", field: "version"}, {heading: "Schema", field: "schema_version"},
	{heading: "Started", field: "started_at"}, {heading: "Heartbeat", field: "heartbeat_at"}, {heading: "Live", field: "live"},
}

// binaryRows are bins as documents for output.list (times in UTC,
// RFC 3339).
func binaryRows(bins []db.Binary) []map[string]any {
	rows := make([]map[string]any, len(bins))
	for i, b := range bins {
		rows[i] = map[string]any{
			"kind": b.Kind, "hostname": b.Hostname, "pid": b.PID, "version": b.Version,
			"schema_version": b.SchemaVersion, "started_at": b.StartedAt.UTC().Format(time.RFC3339),
			"heartbeat_at": b.HeartbeatAt.UTC().Format(time.RFC3339), "live": b.Live,
		}
	}
	return rows
}

// printBinaries prints bins as `status versions` does, as a table.
func printBinaries(w io.Writer, bins []db.Binary) error {
	return (&output{format: "table"}).list(w, binaryColumns, binaryRows(bins))
}
