package conductor

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/zap"
)

// Drain (doc.go, "Drain"): `metalloc-manage conductor drain HOST` asks a
// live conductor to hand its rows over while it keeps running. The command
// sets drain_requested_at on its row (RequestDrain) and notifies it on
// NotifyChannel with DrainNotifyPayload and its id; the conductor reads
// the column again at every heartbeat and whenever its listener
// (re)connects, so a missed notification costs at most a heartbeat
// interval. Draining is a SIGTERM's stop without the exit: the workers
// stop claiming, in-flight rows get conductor.shutdown_grace, the rest are
// released unowned (Rows.Release: peers claim them at once), and the
// conductor stops taking over dead peers' rows. It then writes drained_at
// and how many rows it released, and stays registered, heartbeating and
// holding its liveness lock, idle until it is stopped. A registration (a
// restart of the process) clears the drain.

// DrainNotifyPayload prefixes NotifyChannel's payload that asks one
// conductor to drain: "drain:<conductor id>". Conductors do not wake their
// workers for it.
const DrainNotifyPayload = "drain:"

// drainRetryInterval is how often a drained conductor retries writing its
// release when the database did not answer.
const drainRetryInterval = time.Second

// Errors of RequestDrain: the conductor named is not one that can drain.
var (
	// ErrConductorUnknown: no conductor has that hostname.
	ErrConductorUnknown = errors.New("no conductor has this hostname")
	// ErrConductorOffline: it stopped cleanly (nothing is left to hand over).
	ErrConductorOffline = errors.New("the conductor is offline (stopped cleanly): it holds no rows")
	// ErrConductorDead: online but its expiry passed, or its liveness lock
	// was seen free: its peers take its rows over.
	ErrConductorDead = errors.New("the conductor is dead (its heartbeat expired): its peers take its rows over, no drain needed")
)

// DrainRequest is a drain asked of one conductor process: its row id and
// its registration (started_at), which the drain does not outlive.
type DrainRequest struct {
	ID        int64
	StartedAt time.Time
}

// RequestDrain asks the live conductor named hostname to drain: it sets
// drain_requested_at on its row and notifies it. Asking again a conductor
// draining or drained is not an error (it keeps its first request). The
// errors are ErrConductorUnknown, ErrConductorOffline and ErrConductorDead
// (wrapped, with the hostname and the last heartbeat) or the database's.
func RequestDrain(ctx context.Context, pool *pgxpool.Pool, hostname string) (DrainRequest, error) {
	q := New(pool)
	t, err := q.DrainTarget(ctx, hostname)
	if errors.Is(err, pgx.ErrNoRows) {
		return DrainRequest{}, fmt.Errorf("conductor %q: %w", hostname, ErrConductorUnknown)
	} else if err != nil {
		return DrainRequest{}, fmt.Errorf("reading conductor %q: %w", hostname, err)
	}
	if !t.Online {
		return DrainRequest{}, fmt.Errorf("conductor %q: %w", hostname, ErrConductorOffline)
	}
	if !t.Alive {
		return DrainRequest{}, fmt.Errorf("conductor %q (last heartbeat %s): %w", hostname,
			t.HeartbeatAt.UTC().Format(time.RFC3339), ErrConductorDead)
	}
	n, err := q.RequestDrain(ctx, RequestDrainParams{ID: t.ID, StartedAt: t.StartedAt})
	if err != nil {
		return DrainRequest{}, fmt.Errorf("asking conductor %q to drain: %w", hostname, err)
	}
	if n == 0 {
		// It died or restarted between the two statements.
		return DrainRequest{}, fmt.Errorf("conductor %q: %w", hostname, ErrConductorDead)
	}
	// A notification that fails is not fatal: the conductor sees the
	// column at its next heartbeat.
	_ = q.NotifyDrain(ctx, NotifyDrainParams{Channel: NotifyChannel,
		Payload: DrainNotifyPayload + strconv.FormatInt(t.ID, 10)})
	return DrainRequest{ID: t.ID, StartedAt: t.StartedAt}, nil
}

// DrainStatus is where a drain is (DrainProgress): whether the process
// asked is still the one registered and alive, whether it has drained,
// how many rows it released and how many it holds now.
type DrainStatus struct {
	// Restarted: another process registered the row since (the drain
	// ended with the process asked).
	Restarted bool
	// Alive, Requested, Drained: metalloc_conductor_alive, the request
	// still set, drained_at written.
	Alive, Requested, Drained bool
	// Released is how many rows and groups it handed back unowned once
	// drained; Held is how many allocating rows and groups it owns now.
	Released, Held int64
}

// ReadDrain reads the state of drain r.
func ReadDrain(ctx context.Context, pool *pgxpool.Pool, r DrainRequest) (DrainStatus, error) {
	p, err := New(pool).DrainProgress(ctx, r.ID)
	if errors.Is(err, pgx.ErrNoRows) {
		return DrainStatus{Restarted: true}, nil // pruned
	} else if err != nil {
		return DrainStatus{}, err
	}
	return DrainStatus{
		Restarted: !p.StartedAt.Equal(r.StartedAt), Alive: p.Alive, Requested: p.Requested,
		Drained: p.Drained, Released: p.Released, Held: p.Held,
	}, nil
}

// ConductorStates lists every conductor with its drain and the rows it
// holds (`metalloc-manage conductor list`).
func ConductorStates(ctx context.Context, pool *pgxpool.Pool) ([]ConductorStatesRow, error) {
	return New(pool).ConductorStates(ctx)
}

// drainPayload reports whether payload is a drain notification, and for
// this conductor (id).
func drainPayload(payload string, id int64) (drain, mine bool) {
	rest, ok := strings.CutPrefix(payload, DrainNotifyPayload)
	if !ok {
		return false, false
	}
	n, err := strconv.ParseInt(rest, 10, 64)
	return true, err == nil && n == id
}

// checkDrain reads whether this conductor was asked to drain and, if so,
// starts the drain (a notification missed while the listener was away).
func (c *Service) checkDrain(ctx context.Context) {
	if c.drainStarted.Load() {
		return
	}
	asked, err := c.q.DrainRequested(ctx, c.id)
	if err != nil || !asked {
		return
	}
	c.startDrain()
}

// startDrain ends the work context (Run: the workers stop claiming, the
// takeover stops); once only.
func (c *Service) startDrain() {
	if c.drainStarted.Swap(true) {
		return
	}
	c.log.Info("drain requested: stopping claims, finishing in-flight allocations",
		zap.Duration("grace", c.cfg.ShutdownGrace))
	c.endWork()
}

// idleDrained is the rest of a drained conductor's run, once its workers
// have stopped (Run): it waits for a takeover run of the liveness watch in
// progress (takeoverMu: none starts after, the work context having ended),
// releases its rows unowned as a stop would, writes drained_at and the
// count (retrying while the database does not answer), then waits for ctx
// (the process's stop).
func (c *Service) idleDrained(ctx context.Context) {
	c.takeoverMu.Lock()
	//lint:ignore SA2001 an empty critical section: a barrier behind the takeover in progress
	c.takeoverMu.Unlock()
	var released int64
	var done bool
	for !done && ctx.Err() == nil {
		n, err := c.rows.Release(ctx, c.id)
		released += n
		if err == nil {
			err = c.q.MarkDrained(ctx, MarkDrainedParams{ID: c.id, Released: released})
		}
		if err == nil {
			done = true
			break
		}
		if ctx.Err() == nil {
			c.log.Warn("drain: releasing rows failed; retrying", zap.Error(err))
		}
		select {
		case <-ctx.Done():
		case <-time.After(drainRetryInterval):
		}
	}
	if done {
		c.log.Info("conductor drained: idle until stopped", zap.Int64("released", released))
		c.signals.drainedNow(released)
	}
	<-ctx.Done()
}
