// Package cli holds what the metalloc commands share for wiring: flags into
// configuration, and the common start-up of a database-backed service.
package cli

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"go.uber.org/zap"

	"github.com/metalloc/metalloc/config"
	"github.com/metalloc/metalloc/db"
)

// ChangedFlags returns a flag set holding only the flags the user set on cmd,
// so that unset flags do not override the config file or environment.
func ChangedFlags(cmd *cobra.Command) *pflag.FlagSet {
	fs := pflag.NewFlagSet(cmd.Name(), pflag.ContinueOnError)
	cmd.Flags().Visit(func(f *pflag.Flag) {
		if f.Name != "config" {
			fs.AddFlag(f)
		}
	})
	return fs
}

// Service is what a database-backed daemon starts with.
type Service struct {
	Config config.Config
	Log    *zap.Logger
	Pool   *pgxpool.Pool
	// Ctx ends on SIGINT or SIGTERM.
	Ctx  context.Context
	stop context.CancelFunc
}

// StartService loads the configuration (--config file, environment, flags),
// builds the logger, installs SIGINT/SIGTERM handling, opens the database
// pool as application name and refuses an unmigrated or newer schema.
func StartService(cmd *cobra.Command, name string) (*Service, error) {
	path, _ := cmd.Flags().GetString("config")
	cfg, err := config.Load(path, ChangedFlags(cmd))
	if err != nil {
		return nil, err
	}
	log, err := config.NewLogger(cfg.Log)
	if err != nil {
		return nil, err
	}
	if err := cfg.RequireDatabase(); err != nil {
		return nil, err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	pool, err := db.Open(ctx, cfg.Database.URL, db.PoolOptions{MaxConns: cfg.Database.MaxConns, ApplicationName: name})
	if err != nil {
		stop()
		return nil, err
	}
	if err := db.CheckSchema(ctx, pool); err != nil {
		pool.Close()
		stop()
		return nil, err
	}
	return &Service{Config: cfg, Log: log.With(zap.String("service", name)), Pool: pool, Ctx: ctx, stop: stop}, nil
}

// Close releases the pool, the signal handler and flushes the log.
func (s *Service) Close() {
	s.Pool.Close()
	s.stop()
	_ = s.Log.Sync()
}
