// Package cli holds what the metalloc commands share for wiring: flags into
// configuration, and the common start-up of a database-backed service.
package cli

import (
	"context"
	"errors"
	"os"
	"os/signal"
	"runtime/debug"
	"syscall"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"go.uber.org/zap"

	"github.com/metalloc/metalloc/buildinfo"
	"github.com/metalloc/metalloc/config"
	"github.com/metalloc/metalloc/db"
	"github.com/metalloc/metalloc/web"
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
	name string
}

// StartService loads the configuration (--config file, environment, flags),
// builds the logger, logs the start with the build (version, commit) and
// the garbage collector's target (SetGCPercent), installs SIGINT/SIGTERM handling (the first signal ends
// Ctx, a second one exits at once with 128+signal), opens the database pool
// as application name (pool, when given, adjusts its options from the
// configuration) and refuses a schema outside this binary's compatibility
// window (db.CheckSchema: docs/operations.md, "Upgrading").
func StartService(cmd *cobra.Command, name string, pool ...func(config.Config, *db.PoolOptions)) (*Service, error) {
	path, _ := cmd.Flags().GetString("config")
	cfg, err := config.Load(path, ChangedFlags(cmd))
	if err != nil {
		return nil, err
	}
	log, err := config.NewLogger(cfg.Log)
	if err != nil {
		return nil, err
	}
	bi := buildinfo.Get()
	log.Info(name+" starting", zap.String("service", name), zap.String("version", bi.Version),
		zap.String("commit", bi.Commit), zap.String("build_date", bi.Date), zap.String("go", bi.GoVersion),
		zap.String("config", path), zap.Int("gogc", gcPercent()))
	if err := cfg.RequireDatabase(); err != nil {
		return nil, Exit(ExitConfig, err)
	}
	ctx, stop := stopOnSignal(log)
	opts := db.PoolOptions{MaxConns: cfg.Database.MaxConns, ApplicationName: name}
	for _, f := range pool {
		f(cfg, &opts)
	}
	p, err := db.Open(ctx, cfg.Database.URL, opts)
	if err != nil {
		stop()
		return nil, err
	}
	if err := db.CheckSchema(ctx, p); err != nil {
		p.Close()
		stop()
		return nil, err
	}
	return &Service{Config: cfg, Log: log.With(zap.String("service", name)), Pool: p, Ctx: ctx, stop: stop, name: name}, nil
}

// ServerGCPercent is the Go garbage collector's target (GOGC) of the
// HTTP daemons, metalloc-api and metalloc-placement, when the environment
// sets no GOGC: the heap may grow to 5 times what is live between
// collections, instead of Go's default 2 times. Their live heap is a few
// MB while they allocate about 12 KB per request, so at Go's default
// metalloc-api collected about 8 times a second under load; at 400, a
// quarter as often, for 20-40 MB more resident memory at peak
// (docs/operations.md, Sizing). The conductors, which allocate little,
// keep Go's default.
const ServerGCPercent = 400

// SetGCPercent applies percent as the garbage collector's target unless
// the environment sets GOGC (Go's own variable: a percentage, or off), and
// returns the target in effect (-1: off).
func SetGCPercent(percent int) int {
	if _, set := os.LookupEnv("GOGC"); set {
		return gcPercent()
	}
	debug.SetGCPercent(percent)
	return percent
}

// gcPercent is the garbage collector's current target (-1: off).
func gcPercent() int {
	p := debug.SetGCPercent(100)
	debug.SetGCPercent(p)
	return p
}

// stopOnSignal returns a context that ends at the first SIGINT or SIGTERM;
// a second signal logs and exits the process at once with 128+signal.
func stopOnSignal(log *zap.Logger) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(context.Background())
	sigc := make(chan os.Signal, 2)
	signal.Notify(sigc, os.Interrupt, syscall.SIGTERM)
	go func() {
		var sig os.Signal
		select {
		case sig = <-sigc:
		case <-ctx.Done():
			return
		}
		log.Info("stop signal received: finishing; send another to exit at once", zap.Stringer("signal", sig))
		cancel()
		sig = <-sigc
		log.Warn("second stop signal: exiting at once", zap.Stringer("signal", sig))
		_ = log.Sync()
		code := 1
		if s, ok := sig.(syscall.Signal); ok {
			code = 128 + int(s)
		}
		os.Exit(code)
	}()
	return ctx, func() { signal.Stop(sigc); cancel() }
}

// DatabaseCheck is the /readyz check of a database-backed daemon: the
// database answers and its schema is inside this binary's compatibility
// window (db.CheckSchema; the message names both versions and the command
// that brings the binary inside, never the database's address).
func (s *Service) DatabaseCheck() web.Check {
	return web.Check{Name: "database", Func: func(ctx context.Context) error {
		err := db.CheckSchema(ctx, s.Pool)
		if err == nil || errors.Is(err, db.ErrSchemaOutdated) || errors.Is(err, db.ErrSchemaTooNew) {
			return err
		}
		s.Log.Debug("readiness: database check failed", zap.Error(err))
		return errors.New("database unreachable")
	}}
}

// Close releases the pool, the signal handler and flushes the log.
func (s *Service) Close() {
	s.Pool.Close()
	s.stop()
	_ = s.Log.Sync()
}
