package conductor

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"time"

	"github.com/jackc/pgx/v5"
	"go.uber.org/zap"

	"github.com/metalloc/metalloc/db"
	"github.com/metalloc/metalloc/driver"
)

// The liveness lock (doc.go, "Liveness"): every conductor holds, for its
// lifetime, a session-level advisory lock keyed (livenessLockClass, its
// row id) on a connection of its own, outside the pool. PostgreSQL
// releases it the moment that session ends, which it does at once when
// the process dies (SIGKILL, OOM, a reboot that closed its sockets): a
// free lock on a conductor that is online and unexpired means its process
// is gone. A process that is only silent (SIGSTOP, a partition) keeps its
// session, so its lock, and only its expiry makes it dead, as before.

// livenessLockClass is the first key of every conductor's liveness lock
// ("malc"); the second is the conductor's id, which must fit an int4.
const livenessLockClass int32 = 0x6d616c63

// livenessPoll is how often a conductor reads, on its lock connection,
// which peers' liveness locks are held. A peer is judged crashed after its
// lock was seen free on two consecutive polls of one unbroken session
// (livenessWatch.observe), so within 2 × livenessPoll of its death.
var livenessPoll = 500 * time.Millisecond

// registrationLockWait is how long registration waits for the liveness lock
// of a conductor row of its hostname: a process killed a moment ago has a
// session that PostgreSQL ends within milliseconds.
const registrationLockWait = 2 * time.Second

// ErrLivenessLockLost is returned by Run when the conductor's liveness lock
// session ended and it could not take the lock back, or another process has
// registered its hostname since: that process owns its rows now, so this
// one stops at once, without releasing them or going offline.
var ErrLivenessLockLost = errors.New("conductor lost its liveness lock to another process")

// lockID is id as the liveness lock's second key.
func lockID(id int64) (int32, error) {
	if id <= 0 || id > math.MaxInt32 {
		return 0, fmt.Errorf("conductor id %d does not fit the liveness lock's int4 key", id)
	}
	return int32(id), nil
}

// connectLockSession opens the conductor's dedicated lock connection, with
// the pool's settings and its application_name (so that PruneConductors
// sees it like the pool's sessions).
func (c *Service) connectLockSession(ctx context.Context) (*pgx.Conn, error) {
	conn, err := pgx.ConnectConfig(ctx, c.pool.Config().ConnConfig.Copy())
	if err != nil {
		return nil, fmt.Errorf("opening the liveness lock connection: %w", err)
	}
	return conn, nil
}

// tryLock takes conductor id's liveness lock on conn, trying every 50 ms
// for up to wait; it reports whether it holds the lock.
func tryLock(ctx context.Context, conn *pgx.Conn, id int64, wait time.Duration) (bool, error) {
	key, err := lockID(id)
	if err != nil {
		return false, err
	}
	q := New(conn)
	deadline := time.Now().Add(wait)
	for {
		ok, err := q.TryLivenessLock(ctx, TryLivenessLockParams{Class: livenessLockClass, ID: key})
		if err != nil || ok || !time.Now().Before(deadline) {
			return ok, err
		}
		select {
		case <-ctx.Done():
			return false, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// register registers the conductor and takes its liveness lock on a
// connection of its own, which it returns with the row's id and
// started_at. Three cases:
//
//   - a new hostname: the row is inserted and the lock taken in one
//     transaction, so no peer sees the row online without its lock;
//   - a row of this hostname whose lock is free (or freed within
//     registrationLockWait): its process is dead, whatever its expiry says;
//     the row is registered again at once (Reclaim), and this process
//     resumes its rows;
//   - a row whose lock is held: registration follows the expiry rule
//     (Register): refused while the row is alive (ErrHostnameTaken); once
//     it has expired (a paused or partitioned process), the sessions
//     holding the lock are ended and the lock taken.
func (c *Service) register(ctx context.Context) (_ *pgx.Conn, id int64, started time.Time, err error) {
	conn, err := c.connectLockSession(ctx)
	if err != nil {
		return nil, 0, time.Time{}, err
	}
	defer func() {
		if err != nil {
			_ = conn.Close(context.WithoutCancel(ctx))
		}
	}()
	q := New(conn)
	// The highest migration this binary knows, for db sync --contract.
	known, err := db.LatestVersion()
	if err != nil {
		return nil, 0, time.Time{}, err
	}
	params := RegisterParams{
		Hostname: c.cfg.Hostname, ConductorGroup: c.cfg.Group, Drivers: driver.Names(),
		Version: c.cfg.Version, SchemaVersion: known, Pid: int32(os.Getpid()),
		TimeoutSeconds: c.cfg.HeartbeatTimeout.Seconds(),
	}
	old, err := q.ConductorByHostname(ctx, c.cfg.Hostname)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return c.registerNew(ctx, conn, params)
	case err != nil:
		return nil, 0, time.Time{}, fmt.Errorf("registering conductor: %w", err)
	}
	free, err := tryLock(ctx, conn, old.ID, registrationLockWait)
	if err != nil {
		return nil, 0, time.Time{}, fmt.Errorf("registering conductor: taking its liveness lock: %w", err)
	}
	if free {
		r, err := q.Reclaim(ctx, ReclaimParams{
			ConductorGroup: params.ConductorGroup, Drivers: params.Drivers, Version: params.Version,
			SchemaVersion: params.SchemaVersion, Pid: params.Pid,
			TimeoutSeconds: params.TimeoutSeconds, ID: old.ID, Hostname: c.cfg.Hostname,
		})
		if errors.Is(err, pgx.ErrNoRows) { // pruned meanwhile: a new row
			_ = conn.Close(ctx)
			return c.register(ctx)
		}
		if err != nil {
			return nil, 0, time.Time{}, fmt.Errorf("registering conductor: %w", err)
		}
		c.log.Info("registered again at once: the previous process of this hostname is dead (its liveness lock was free)",
			zap.Int64("id", r.ID), zap.Bool("previous_online", old.Online))
		return conn, r.ID, r.StartedAt, nil
	}
	r, err := q.Register(ctx, params)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, 0, time.Time{}, fmt.Errorf("%w: %q is alive (its process holds its liveness lock and the expiry its last heartbeat wrote has not passed); stop it first or wait for it to expire",
			ErrHostnameTaken, c.cfg.Hostname)
	}
	if err != nil {
		return nil, 0, time.Time{}, fmt.Errorf("registering conductor: %w", err)
	}
	// Expired but its session lives (paused, partitioned): end it, so that
	// the process, if it wakes, finds its lock gone and stops.
	ended, err := q.TerminateLivenessHolders(ctx, TerminateLivenessHoldersParams{Class: int64(livenessLockClass), ID: r.ID})
	if err != nil {
		return nil, 0, time.Time{}, fmt.Errorf("registering conductor: ending the expired process's session: %w", err)
	}
	c.log.Info("registered after the previous process of this hostname expired; ended its sessions holding the liveness lock",
		zap.Int64("id", r.ID), zap.Int32("sessions_ended", ended))
	if ok, err := tryLock(ctx, conn, r.ID, registrationLockWait); err != nil || !ok {
		return nil, 0, time.Time{}, fmt.Errorf("registering conductor: the liveness lock of %q stayed held (%v)", c.cfg.Hostname, err)
	}
	return conn, r.ID, r.StartedAt, nil
}

// registerNew inserts the row of a hostname seen for the first time and
// takes its lock in the same transaction (the row is invisible to the
// peers until both are done).
func (c *Service) registerNew(ctx context.Context, conn *pgx.Conn, params RegisterParams) (*pgx.Conn, int64, time.Time, error) {
	var r RegisterRow
	err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		var err error
		if r, err = New(tx).Register(ctx, params); err != nil {
			return err
		}
		key, err := lockID(r.ID)
		if err != nil {
			return err
		}
		// A session-level lock taken in a transaction outlives it. A new id
		// has no holder; a wait would mean a stale one, ended below.
		ok, err := New(tx).TryLivenessLock(ctx, TryLivenessLockParams{Class: livenessLockClass, ID: key})
		if err == nil && !ok {
			err = errors.New("the liveness lock of a new conductor id is held")
		}
		return err
	})
	if errors.Is(err, pgx.ErrNoRows) { // registered by another process meanwhile
		return nil, 0, time.Time{}, fmt.Errorf("%w: %q was registered by another process just now", ErrHostnameTaken, c.cfg.Hostname)
	}
	if err != nil {
		return nil, 0, time.Time{}, fmt.Errorf("registering conductor: %w", err)
	}
	return conn, r.ID, r.StartedAt, nil
}

// livenessKey names one registration of a conductor: its id and the
// started_at its process wrote.
type livenessKey struct {
	id      int64
	started time.Time
}

// livenessWatch is what one lock session has seen of the peers' locks:
// only a registration seen holding its lock on this session can be judged
// crashed, so that a conductor that never takes one (an older binary) is
// judged by its expiry only, and after this session was broken (a
// PostgreSQL restart ends every session at once) nobody is judged until
// seen holding its lock again: no takeover storm.
type livenessWatch struct {
	held    map[livenessKey]bool // seen holding its lock
	suspect map[livenessKey]bool // seen free once since
}

func newLivenessWatch() *livenessWatch {
	return &livenessWatch{held: map[livenessKey]bool{}, suspect: map[livenessKey]bool{}}
}

// observe takes one poll's rows and returns the peers crashed by the rule:
// seen holding their lock, then free on two consecutive polls (one free
// poll could straddle the moment a restart ends the sessions one by one).
func (w *livenessWatch) observe(rows []LivenessLocksRow) []LivenessLocksRow {
	var crashed []LivenessLocksRow
	present := map[livenessKey]bool{}
	for _, r := range rows {
		k := livenessKey{r.ID, r.StartedAt}
		present[k] = true
		switch {
		case r.Held:
			w.held[k] = true
			delete(w.suspect, k)
		case !w.held[k]:
		case w.suspect[k]:
			crashed = append(crashed, r)
		default:
			w.suspect[k] = true
		}
	}
	for k := range w.held {
		if !present[k] {
			delete(w.held, k)
			delete(w.suspect, k)
		}
	}
	return crashed
}

// watchLiveness keeps the conductor's liveness lock and watches its peers'
// on conn until loop ends; it returns the lock connection then open (nil
// if none), which the caller closes once the conductor is offline. Every
// livenessPoll it reads the peers' locks; a peer crashed by
// livenessWatch.observe has its expiry ended (MarkCrashed, a compare-and-set
// on the registration seen) and, unless run has ended, its rows are taken
// over at once (statements on stmt), and again at each poll while some may
// be left (takeOverDead), without waiting for the takeover schedule or the
// post-outage grace: the lock, not an expiry, says it is dead. Only the
// peers it saw crash: a conductor dead by its expiry waits for the
// schedule and its grace. When conn breaks, the watch is forgotten, the connection opened
// again and the lock taken back; if another process holds it or has
// registered this hostname since, lost is called and the watch ends.
func (c *Service) watchLiveness(loop, run, stmt context.Context, conn *pgx.Conn, started time.Time, lost func(error)) *pgx.Conn {
	w := newLivenessWatch()
	// pending: crashed peers whose rows may not all be taken yet (a row
	// still locked by the dead process's last statement, a race), retried
	// every poll until HeartbeatTimeout after they were seen crashed (the
	// schedule takes over from there: they are offline).
	pending := map[int64]time.Time{}
	t := time.NewTicker(livenessPoll)
	defer t.Stop()
	for {
		select {
		case <-loop.Done():
			return conn
		case <-t.C:
		}
		rows, err := New(conn).LivenessLocks(loop, LivenessLocksParams{Class: int64(livenessLockClass), Me: c.id})
		if err != nil {
			if loop.Err() != nil {
				return conn
			}
			c.log.Warn("liveness lock session broken; taking the lock back", zap.Error(err))
			_ = conn.Close(loop)
			w = newLivenessWatch()
			var fatal error
			if conn, fatal = c.retakeLock(loop, started); fatal != nil {
				if loop.Err() == nil {
					c.log.Error("stopping at once: another process owns this conductor now", zap.Error(fatal))
					lost(fatal)
				}
				return nil
			}
			continue
		}
		crashed := w.observe(rows)
		for _, r := range crashed {
			n, err := New(conn).MarkCrashed(loop, MarkCrashedParams{ID: r.ID, StartedAt: r.StartedAt, Class: int64(livenessLockClass)})
			if err != nil {
				continue // the next poll sees it again
			}
			c.log.Info("peer conductor crashed: its liveness lock is free", zap.String("peer", r.Hostname),
				zap.Int64("peer_id", r.ID), zap.Bool("marked_offline", n > 0))
			pending[r.ID] = time.Now().Add(c.cfg.HeartbeatTimeout)
		}
		if len(pending) == 0 || c.takeoverOff() {
			continue
		}
		only := map[int64]bool{}
		for id, until := range pending {
			if time.Now().After(until) {
				delete(pending, id)
			} else {
				only[id] = true
			}
		}
		left := c.takeOverDead(run, stmt, only)
		for id := range pending {
			if !left[id] {
				delete(pending, id)
			}
		}
	}
}

// retakeLock opens the lock connection again (retrying every livenessPoll
// while the database is unreachable) and takes the conductor's lock back.
// It fails when another session holds the lock or the row was registered
// by another process since (started_at differs).
func (c *Service) retakeLock(ctx context.Context, started time.Time) (*pgx.Conn, error) {
	for {
		conn, err := c.connectLockSession(ctx)
		if err == nil {
			var ok bool
			ok, err = tryLock(ctx, conn, c.id, 0)
			if err == nil && !ok {
				_ = conn.Close(ctx)
				return nil, fmt.Errorf("%w: its liveness lock is held by another session", ErrLivenessLockLost)
			}
			var now time.Time
			if err == nil {
				now, err = New(conn).StartedAt(ctx, c.id)
			}
			if err == nil && !now.Equal(started) {
				_ = conn.Close(ctx)
				return nil, fmt.Errorf("%w: its hostname was registered again by another process", ErrLivenessLockLost)
			}
			if err == nil {
				// Peers may have marked it crashed meanwhile: alive again
				// at once, not at the next heartbeat.
				_, err = New(conn).Heartbeat(ctx, HeartbeatParams{ID: c.id, TimeoutSeconds: c.cfg.HeartbeatTimeout.Seconds()})
			}
			if err == nil {
				c.log.Info("liveness lock taken back")
				c.needResume.Store(true)
				return conn, nil
			}
			_ = conn.Close(ctx)
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		c.log.Debug("liveness lock connection not back yet", zap.Error(err))
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(livenessPoll):
		}
	}
}
