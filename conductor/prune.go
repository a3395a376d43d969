package conductor

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/zap"

	"github.com/metalloc/metalloc/config"
)

// DefaultOfflineRetention is how long a dead conductor's row is kept
// (conductor.offline_retention).
const DefaultOfflineRetention = config.DefaultConductorOfflineRetention

// DefaultPruneInterval is how often a Pruner looks for conductors to
// prune (jittered by ± 25 %, so that a fleet does not prune in lock-step).
const DefaultPruneInterval = time.Hour

// PrunerConfig configures a Pruner.
type PrunerConfig struct {
	// Retention is how long after its last heartbeat a dead conductor's
	// row is deleted (default DefaultOfflineRetention; negative: never).
	Retention time.Duration
	// HeartbeatTimeout is the liveness bound (conductor.heartbeat_timeout,
	// default 60 s): a conductor whose heartbeat is younger is alive.
	HeartbeatTimeout time.Duration
	// Interval is how often to prune (default DefaultPruneInterval).
	Interval time.Duration
}

// Pruner deletes the rows of conductors that have been gone for long (the
// conductors table otherwise keeps one row per hostname ever used: 47
// after a chaos run). A row goes when its conductor's last heartbeat is
// older than Retention (at least the heartbeat timeout: it is dead, see
// Liveness in doc.go), it owns no allocating allocation or group (those
// wait for takeover), and no database session of it is open (a paused
// process keeps its sessions and may resume). A conductor that starts again later registers anew
// (Register). Every metalloc-conductor runs one; concurrent prunes are
// harmless (PruneConductors).
type Pruner struct {
	q   *Queries
	cfg PrunerConfig
	log *zap.Logger
}

// NewPruner returns a Pruner on pool.
func NewPruner(pool *pgxpool.Pool, cfg PrunerConfig, log *zap.Logger) *Pruner {
	if cfg.Retention == 0 {
		cfg.Retention = DefaultOfflineRetention
	}
	if cfg.HeartbeatTimeout <= 0 {
		cfg.HeartbeatTimeout = 60 * time.Second
	}
	if cfg.Interval <= 0 {
		cfg.Interval = DefaultPruneInterval
	}
	if log == nil {
		log = zap.NewNop()
	}
	return &Pruner{q: New(pool), cfg: cfg, log: log}
}

// Prune deletes the conductors due now and returns their hostnames.
func (p *Pruner) Prune(ctx context.Context) ([]string, error) {
	if p.cfg.Retention < 0 {
		return nil, nil
	}
	// A retention of at least the heartbeat timeout makes every conductor
	// it selects dead, whatever else the liveness rule looks at.
	gone, err := p.q.PruneConductors(ctx, max(p.cfg.Retention, p.cfg.HeartbeatTimeout).Seconds())
	if err != nil {
		return nil, fmt.Errorf("pruning offline conductors: %w", err)
	}
	return gone, nil
}

// Run prunes at start and every Interval (jittered) until ctx ends.
func (p *Pruner) Run(ctx context.Context) {
	if p.cfg.Retention < 0 {
		return
	}
	for {
		gone, err := p.Prune(ctx)
		switch {
		case err != nil && ctx.Err() == nil:
			p.log.Warn("pruning offline conductors failed", zap.Error(err))
		case len(gone) > 0:
			p.log.Info("offline conductors pruned", zap.Strings("hostnames", gone),
				zap.Duration("retention", p.cfg.Retention))
		}
		d := p.cfg.Interval
		d = d*3/4 + time.Duration(rand.Int64N(int64(d/2)+1))
		select {
		case <-ctx.Done():
			return
		case <-time.After(d):
		}
	}
}
