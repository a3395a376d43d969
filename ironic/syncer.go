package ironic

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/robfig/cron/v3"
	"go.uber.org/zap"
)

// SyncOff is the sync schedule that runs the full sync only when a
// conductor takes the lease (at start, at takeover).
const SyncOff = "off"

// SyncerConfig configures a Syncer.
type SyncerConfig struct {
	// ConductorID is the conductors row of the conductor running it
	// (conductor.Service.ID): the lease's holder.
	ConductorID int64
	// Schedule is the robfig/cron period of the full sync ("@every 60s")
	// or SyncOff.
	Schedule string
	// RenewInterval is how often the lease is renewed, or tried by a
	// standby (the conductor's heartbeat interval, default 10 s); a failed
	// sync is retried after it too.
	RenewInterval time.Duration
	// LeaseTimeout is how old the holder's last renewal may be before a
	// standby takes the lease (the conductor's heartbeat timeout, default
	// 60 s); a holder that counts as a dead conductor loses it at once.
	LeaseTimeout time.Duration
}

// ParseSchedule checks a sync schedule: a robfig/cron spec, or SyncOff
// (nil schedule).
func ParseSchedule(spec string) (cron.Schedule, error) {
	if strings.EqualFold(strings.TrimSpace(spec), SyncOff) {
		return nil, nil
	}
	s, err := cron.ParseStandard(spec)
	if err != nil {
		return nil, fmt.Errorf("ironic.sync_schedule %q: %w (use a cron spec such as @every 60s, or %q)", spec, err, SyncOff)
	}
	return s, nil
}

// Syncer runs the mirror's full sync in one conductor at a time: every
// conductor runs one, the one holding the lease (ironic_sync_lease) syncs
// at once and then on the schedule, the others stand by and try the lease
// every RenewInterval, taking it over (compare-and-set) once the holder is
// dead or stopped renewing (doc.go).
type Syncer struct {
	m     *Mirror
	cfg   SyncerConfig
	sched cron.Schedule
	log   *zap.Logger
	// OnSync, when set, is called after every full sync this syncer ran.
	OnSync func(SyncResult, error)
	// Metrics, when set, records the syncs and the lease.
	Metrics *Metrics
	// Reconcile, when set, is given the complete list of Ironic's
	// allocations each successful full sync read, and when its reading
	// started (the Ironic allocation backend's reconciliation,
	// conductor/backend.Ironic.Reconcile); its error is logged.
	Reconcile func(ctx context.Context, allocs []Allocation, at time.Time) error
}

// NewSyncer returns the syncer of conductor cfg.ConductorID.
func NewSyncer(m *Mirror, cfg SyncerConfig, log *zap.Logger) (*Syncer, error) {
	sched, err := ParseSchedule(cfg.Schedule)
	if err != nil {
		return nil, err
	}
	if cfg.RenewInterval <= 0 {
		cfg.RenewInterval = 10 * time.Second
	}
	if cfg.LeaseTimeout <= 0 {
		cfg.LeaseTimeout = 60 * time.Second
	}
	if log == nil {
		log = zap.NewNop()
	}
	return &Syncer{m: m, cfg: cfg, sched: sched, log: log.With(zap.String("ironic", m.client.Root()))}, nil
}

// Run holds or waits for the lease and syncs until ctx ends; then it hands
// the lease back (a standby takes it at its next try) and returns.
func (s *Syncer) Run(ctx context.Context) {
	held := false
	var next time.Time // the next full sync while held; zero: at once
	tick := time.NewTicker(s.cfg.RenewInterval)
	defer tick.Stop()
	for {
		ok, err := s.acquire(ctx)
		switch {
		case err != nil && ctx.Err() == nil:
			s.log.Warn("ironic sync lease: database unavailable", zap.Error(err))
		case ok && !held:
			s.log.Info("holding the Ironic node sync lease")
			next = time.Time{}
		case !ok && held && err == nil:
			s.log.Info("another conductor holds the Ironic node sync lease now")
		}
		held = ok
		s.Metrics.holding(held)
		if held && !time.Now().Before(next) {
			next = s.sync(ctx)
			if next.IsZero() { // lease lost
				held = false
			}
		}
		select {
		case <-ctx.Done():
			if held {
				rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
				if _, err := s.m.q.ReleaseLease(rctx, s.cfg.ConductorID); err != nil {
					s.log.Warn("could not release the Ironic node sync lease; a standby takes it when it expires", zap.Error(err))
				}
				cancel()
			}
			s.Metrics.holding(false)
			return
		case <-tick.C:
		}
	}
}

// acquire takes or renews the lease (AcquireLease).
func (s *Syncer) acquire(ctx context.Context) (bool, error) {
	_, err := s.m.q.AcquireLease(ctx, AcquireLeaseParams{Me: s.cfg.ConductorID,
		TtlSeconds: s.cfg.LeaseTimeout.Seconds()})
	if errors.Is(err, pgx.ErrNoRows) {
		return false, nil
	}
	return err == nil, err
}

// sync runs one full sync and returns when the next is due: per the
// schedule after a success, RenewInterval after a failure, zero when the
// lease was lost.
func (s *Syncer) sync(ctx context.Context) time.Time {
	start := time.Now()
	res, err := s.m.FullSync(ctx, s.cfg.ConductorID)
	if s.OnSync != nil {
		s.OnSync(res, err)
	}
	took := time.Since(start)
	fields := []zap.Field{zap.Int("nodes", res.Nodes), zap.Int("created", res.Created), zap.Int("updated", res.Updated),
		zap.Int("deleted", res.Deleted), zap.Int("kept", res.Kept), zap.Int("stale", res.Stale), zap.Duration("took", took)}
	switch {
	case errors.Is(err, ErrLeaseLost):
		s.Metrics.synced("lost", 0, 0, 0)
		s.log.Info("Ironic node sync stopped: another conductor holds the lease", fields...)
		return time.Time{}
	case err != nil:
		if ctx.Err() != nil {
			return start.Add(s.cfg.RenewInterval)
		}
		s.Metrics.synced("failed", 0, 0, 0)
		s.log.Warn("Ironic node sync failed; retrying", append(fields, zap.Error(err))...)
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		_ = s.m.q.SyncFailed(rctx, SyncFailedParams{Error: err.Error(), Me: s.cfg.ConductorID})
		cancel()
		return time.Now().Add(s.cfg.RenewInterval)
	}
	if s.Reconcile != nil {
		if err := s.Reconcile(ctx, res.Allocations, res.AllocationsAt); err != nil && ctx.Err() == nil {
			s.log.Warn("reconciling allocations with Ironic's failed; the next sync retries", zap.Error(err))
		}
	}
	s.Metrics.synced("ok", took.Seconds(), res.Nodes, float64(time.Now().Unix()))
	if res.Created+res.Updated+res.Deleted > 0 {
		s.log.Info("Ironic node sync", fields...)
	} else {
		s.log.Debug("Ironic node sync", fields...)
	}
	if s.sched == nil {
		return time.Now().Add(100 * 365 * 24 * time.Hour)
	}
	return s.sched.Next(time.Now())
}
