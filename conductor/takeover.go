package conductor

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/robfig/cron/v3"
	"go.uber.org/zap"
)

// TakeoverOff is the TakeoverSchedule value that disables takeover: a dead
// conductor's allocating rows then wait for it to come back.
const TakeoverOff = "off"

// parseSchedule parses a takeover schedule: a robfig/cron spec ("@every
// 60s", "*/2 * * * *") or TakeoverOff (nil schedule).
func parseSchedule(spec string) (cron.Schedule, error) {
	if strings.EqualFold(strings.TrimSpace(spec), TakeoverOff) {
		return nil, nil
	}
	s, err := cron.ParseStandard(spec)
	if err != nil {
		return nil, fmt.Errorf("conductor.takeover_schedule %q: %w (use a cron spec such as @every 60s, or %q)",
			spec, err, TakeoverOff)
	}
	return s, nil
}

// startTakeover starts the periodic takeover task on robfig/cron, unless the
// schedule is off. Runs never overlap (a slow one makes the next wait). The
// returned scheduler is stopped by Run, which waits for a run in progress.
func (c *Service) startTakeover(ctx, procCtx context.Context) *cron.Cron {
	sched, _ := parseSchedule(c.cfg.TakeoverSchedule) // validated by NewService
	if sched == nil {
		c.log.Info("takeover of dead conductors is off")
		return nil
	}
	logger := cronLogger{c.log.Sugar()}
	cr := cron.New(cron.WithLogger(logger), cron.WithChain(cron.Recover(logger), cron.SkipIfStillRunning(logger)))
	cr.Schedule(sched, cron.FuncJob(func() { c.takeover(ctx, procCtx) }))
	cr.Start()
	return cr
}

// takeover takes over the allocating rows of every dead conductor (offline,
// or its expiry passed) with one compare-and-set update
// per row, and queues the rows won for the workers. Later writes to those
// rows are guarded by conductor_affinity = this conductor, so a conductor
// that was only slow cannot overwrite them when it wakes up. Node row locks a
// dead conductor held die with its database session (PostgreSQL ends it when
// the process or host dies; a stalled transaction is ended by
// idle_in_transaction_session_timeout, IdleInTransactionTimeout), and the takeover
// never waits on one (SKIP LOCKED). A stop ends a run between dead
// conductors, not in a statement: its statements run on stmt (Run's
// procCtx, which the stop ends only ShutdownGrace later; see work), so that
// none wins a row after Release.
func (c *Service) takeover(ctx, stmt context.Context) {
	if ctx.Err() != nil {
		return
	}
	// After this conductor could not reach the database (or at start-up),
	// its peers likely could not either (PostOutageGrace).
	if c.inGrace() {
		c.log.Debug("takeover skipped: heartbeats only just resumed")
		return
	}
	c.takeOverDead(ctx, stmt, nil)
}

// takeoverOff reports whether takeover is disabled (TakeoverOff).
func (c *Service) takeoverOff() bool {
	sched, _ := parseSchedule(c.cfg.TakeoverSchedule)
	return sched == nil
}

// takeOverDead is one takeover run, without the post-outage grace: run by
// the schedule once past the grace (takeover; only nil: every dead
// conductor), and by the liveness watch at once for the peers it has seen
// crash (watchLiveness; only: their ids). It returns the dead conductors of
// only that may have rows left: some were locked, lost to a race, beyond
// one run's queueSize, or a statement failed (the watch runs again for
// them at its next poll).
func (c *Service) takeOverDead(ctx, stmt context.Context, only map[int64]bool) (left map[int64]bool) {
	// A drain releases this conductor's rows once no run is in progress
	// (idleDrained); runs after that see ctx ended.
	c.takeoverMu.Lock()
	defer c.takeoverMu.Unlock()
	if ctx.Err() != nil {
		return nil
	}
	dead, err := c.rows.DeadOwners(stmt, c.id)
	if err != nil {
		if stmt.Err() == nil {
			c.log.Warn("takeover: listing dead conductors", zap.Error(err))
		}
		return only
	}
	total := 0
	defer func() { c.signals.takeoverRan(total) }()
	for _, d := range dead {
		if only != nil && !only[d.ID] {
			continue
		}
		if ctx.Err() != nil {
			return nil // stopping: the peers take the rest
		}
		won, lost, err := c.rows.TakeOver(stmt, c.id, d, queueSize)
		if lost > 0 || err != nil || len(won) >= queueSize {
			if left == nil {
				left = map[int64]bool{}
			}
			left[d.ID] = true
		}
		total += len(won)
		for _, a := range won {
			c.Metrics.tookOver()
			c.log.Info("took over allocation from dead conductor", zap.Stringer("allocation", a.UUID),
				zap.String("from", d.Hostname), zap.Bool("from_online", d.Online),
				zap.Duration("heartbeat_age", time.Since(d.HeartbeatAt)))
			c.enqueue(a)
		}
		if err != nil && stmt.Err() == nil {
			c.log.Warn("takeover interrupted", zap.String("from", d.Hostname), zap.Error(err))
		}
		wonGroups, lostGroups, err := c.rows.TakeOverGroups(stmt, c.id, d, queueSize)
		if lostGroups > 0 || err != nil || len(wonGroups) >= queueSize {
			if left == nil {
				left = map[int64]bool{}
			}
			left[d.ID] = true
		}
		total += len(wonGroups)
		for _, g := range wonGroups {
			c.Metrics.tookOver()
			c.log.Info("took over allocation group from dead conductor", zap.Stringer("allocation_group", g.UUID),
				zap.String("from", d.Hostname))
			c.enqueueGroup(g)
		}
		if err != nil && stmt.Err() == nil {
			c.log.Warn("takeover of allocation groups interrupted", zap.String("from", d.Hostname), zap.Error(err))
		}
		lost += lostGroups
		if len(won)+len(wonGroups)+lost > 0 {
			c.log.Info("takeover of dead conductor", zap.String("from", d.Hostname),
				zap.Int("taken", len(won)+len(wonGroups)), zap.Int("lost_to_others", lost))
		}
	}
	return left
}

// cronLogger adapts zap to robfig/cron's Logger.
type cronLogger struct{ s *zap.SugaredLogger }

func (l cronLogger) Info(msg string, kv ...any) { l.s.Debugw("cron: "+msg, kv...) }

func (l cronLogger) Error(err error, msg string, kv ...any) {
	l.s.Errorw("cron: "+msg, append(kv, "error", err)...)
}
