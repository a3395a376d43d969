package main

import (
	"context"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/metalloc/metalloc/cmd/internal/cli"
	"github.com/metalloc/metalloc/conductor"
	"github.com/metalloc/metalloc/conductor/backend"
	"github.com/metalloc/metalloc/config"
	"github.com/metalloc/metalloc/ironic"
)

// testPauseEnv names the test hook that stops every allocation at a stage
// of the Ironic backend for a while ("after_create:30s"; stages:
// backend.IronicConfig.Pause), logging "test pause" first: the e2e tests
// SIGKILL a conductor there, between its two writes.
const testPauseEnv = "METALLOC_TEST_IRONIC_PAUSE"

// newIronicBackend is the Ironic backend of this conductor (the ironic and
// conductor sections).
func newIronicBackend(pool *pgxpool.Pool, ic *ironic.Client, cfg config.Config, log *zap.Logger) *backend.Ironic {
	return backend.NewIronic(pool, ic, backend.IronicConfig{
		MaxInFlight: cfg.Ironic.MaxInFlight, FixedLimit: !cfg.Ironic.AdaptiveLimit, AllocationTimeout: cfg.Ironic.AllocationTimeout, Capacity: cfg.Conductor.Workers,
		LockedWait: cfg.Conductor.LockedNodeWait, Pause: testPause(log),
	}, log)
}

// testPause is the hook testPauseEnv asks for, or nil.
func testPause(log *zap.Logger) func(ctx context.Context, stage, allocation string) {
	spec := os.Getenv(testPauseEnv)
	stage, after, ok := strings.Cut(spec, ":")
	d, err := time.ParseDuration(after)
	if !ok || err != nil {
		return nil
	}
	return func(ctx context.Context, s, allocation string) {
		if s != stage {
			return
		}
		log.Info("test pause", zap.String("stage", s), zap.String("allocation", allocation), zap.Duration("for", d))
		select {
		case <-ctx.Done():
		case <-time.After(d):
		}
	}
}

// startIronic starts, once ready is closed (the conductor registered), the
// node mirror's syncer (one conductor at a time holds its lease; every
// full sync reconciles the allocations with Ironic's: ib.Reconcile) and
// ib's deletions of allocations in Ironic; stop ends both and waits.
func startIronic(ctx context.Context, env *cli.Service, svc *conductor.Service, ib *backend.Ironic, reg prometheus.Registerer,
	ready <-chan struct{}) (stop func(), err error) {
	im, err := ironic.NewMetrics(reg)
	if err != nil {
		return nil, err
	}
	if ib.Metrics, err = backend.NewIronicMetrics(reg); err != nil {
		return nil, err
	}
	c := env.Config.Conductor
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		select {
		case <-ready:
		case <-ctx.Done():
			return
		}
		syncer, err := ironic.NewSyncer(ironic.NewMirror(ib.Client(), env.Pool, env.Config.Ironic.SyncPageSize, env.Log),
			ironic.SyncerConfig{ConductorID: svc.ID(), Schedule: env.Config.Ironic.SyncSchedule,
				RenewInterval: c.HeartbeatInterval, LeaseTimeout: c.HeartbeatTimeout}, env.Log)
		if err != nil { // the schedule was checked by IronicClient
			env.Log.Error("Ironic node sync not started", zap.Error(err))
			return
		}
		syncer.Metrics = im
		syncer.Reconcile = ib.Reconcile
		wg.Add(1)
		go func() { defer wg.Done(); ib.Run(ctx) }()
		syncer.Run(ctx)
	}()
	return func() { cancel(); wg.Wait() }, nil
}
