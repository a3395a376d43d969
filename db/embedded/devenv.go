package embedded

import (
	"context"
	"fmt"
	"os"
	"time"

	"go.uber.org/zap"
)

// WithDatabase ensures a database server for a command that needs one. If the
// environment variable DATABASE_URL is set, it is returned as is and stop does
// nothing. Otherwise WithDatabase starts a private cluster in a fresh
// directory under os.TempDir() on a free port, creates database "metalloc" and
// returns its URL; stop then stops the cluster and removes the directory (it
// logs failures to log, which may be nil, and never panics). On error nothing
// is left behind and stop is nil. settings are the private cluster's extra
// server settings (Options.Settings; ignored with DATABASE_URL).
func WithDatabase(ctx context.Context, log *zap.Logger, settings map[string]string) (url string, stop func(), err error) {
	return WithDatabaseOn(ctx, log, 0, settings)
}

// WithDatabaseOn is WithDatabase with the private cluster on port of
// 127.0.0.1 (0: a free port), for `dev up --pg-port`; port is ignored with
// DATABASE_URL.
func WithDatabaseOn(ctx context.Context, log *zap.Logger, port int, settings map[string]string) (url string, stop func(), err error) {
	if log == nil {
		log = zap.NewNop()
	}
	if u := os.Getenv("DATABASE_URL"); u != "" {
		return u, func() {}, nil
	}
	dir, err := os.MkdirTemp(os.TempDir(), "metalloc-pg-")
	if err != nil {
		return "", nil, fmt.Errorf("creating temporary PostgreSQL dir: %w", err)
	}
	c, err := Start(ctx, Options{DataDir: dir, Port: port, Log: log, Settings: settings})
	if err != nil {
		_ = os.RemoveAll(dir)
		return "", nil, err
	}
	stop = func() {
		sctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := c.Stop(sctx); err != nil {
			log.Warn("stopping private PostgreSQL", zap.Error(err))
		}
		if err := os.RemoveAll(dir); err != nil {
			log.Warn("removing private PostgreSQL dir", zap.String("dir", dir), zap.Error(err))
		}
	}
	if err := c.CreateDatabase(ctx, "metalloc"); err != nil {
		stop()
		return "", nil, err
	}
	return c.URL("metalloc"), stop, nil
}
