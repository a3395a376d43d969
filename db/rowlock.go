package db

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// ErrLockWait is returned (wrapped) by RowLocks.InTx when the row lock the
// transaction waits for was not granted within the wait: the caller answers
// that the row is busy (Ironic's NodeLocked, 409).
var ErrLockWait = errors.New("row lock not granted in time")

// RowLocks runs transactions that start by taking one row's lock (a node's
// FOR UPDATE) so that waiting for a lock that someone holds for long does
// not take the pool: within this process, transactions on the same row take
// turns before they start, so that only one of them holds a connection
// while it waits in PostgreSQL (the others wait in memory, without one),
// and the whole wait, turn and lock together, is bounded by Wait
// (lock_timeout, set to what is left of it when the transaction begins).
// Then the transaction fails with ErrLockWait. Transactions on other rows
// are not held up at all. The zero value is not usable: see NewRowLocks.
type RowLocks struct {
	pool *pgxpool.Pool
	// Wait bounds how long one transaction waits, for its turn and for the
	// row lock together.
	Wait time.Duration

	mu    sync.Mutex
	turns map[string]*rowTurn
}

type rowTurn struct {
	held  chan struct{} // capacity 1: full while a transaction has the turn
	users int           // transactions holding or waiting for the turn
}

// NewRowLocks returns RowLocks on pool, waiting at most wait.
func NewRowLocks(pool *pgxpool.Pool, wait time.Duration) *RowLocks {
	return &RowLocks{pool: pool, Wait: wait, turns: map[string]*rowTurn{}}
}

// InTx runs fn as InTx does (committed when it returns nil, retried on
// transient failures), once it is this process's turn for key (the row fn
// locks first, such as "node/<uuid>"), with lock_timeout set to what is
// left of Wait. A turn or lock not obtained in time is ErrLockWait; ctx
// ending while waiting for the turn is ctx's error.
func (l *RowLocks) InTx(ctx context.Context, key string, fn func(pgx.Tx) error) error {
	deadline := time.Now().Add(l.Wait)
	release, err := l.turn(ctx, key, deadline)
	if err != nil {
		return err
	}
	defer release()
	return Retry(ctx, func() error {
		left := time.Until(deadline)
		if left <= 0 {
			return fmt.Errorf("%s: %w", key, ErrLockWait)
		}
		opts := pgx.TxOptions{BeginQuery: fmt.Sprintf("BEGIN; SET LOCAL lock_timeout = %d", max(1, left.Milliseconds()))}
		err := pgx.BeginTxFunc(ctx, l.pool, opts, fn)
		if isLockTimeout(err) && time.Until(deadline) <= 0 {
			return fmt.Errorf("%s: %w", key, ErrLockWait)
		}
		return err
	})
}

// isLockTimeout reports whether err is PostgreSQL's lock_not_available
// (55P03) of a lock_timeout (as opposed to NOWAIT's, which the caller may
// retry at once).
func isLockTimeout(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "55P03" && pgErr.Message == "canceling statement due to lock timeout"
}

// turn waits until key is free in this process (or deadline, then
// ErrLockWait, or ctx's end) and takes it; release gives it back.
func (l *RowLocks) turn(ctx context.Context, key string, deadline time.Time) (release func(), err error) {
	l.mu.Lock()
	t := l.turns[key]
	if t == nil {
		t = &rowTurn{held: make(chan struct{}, 1)}
		l.turns[key] = t
	}
	t.users++
	l.mu.Unlock()
	done := func() {
		l.mu.Lock()
		if t.users--; t.users == 0 {
			delete(l.turns, key)
		}
		l.mu.Unlock()
	}
	select {
	case t.held <- struct{}{}:
		return func() { <-t.held; done() }, nil
	default:
	}
	timer := time.NewTimer(time.Until(deadline))
	defer timer.Stop()
	select {
	case t.held <- struct{}{}:
		return func() { <-t.held; done() }, nil
	case <-timer.C:
		done()
		return nil, fmt.Errorf("%s: %w", key, ErrLockWait)
	case <-ctx.Done():
		done()
		return nil, ctx.Err()
	}
}
