package db

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/zap"
)

// Listen holds a dedicated connection (outside pool, with its settings)
// LISTENing on channel until ctx ends, calling signal for every
// notification. After every (re)connection it calls listening, then signal
// once, since notifications may have been missed while it was away. A lost
// connection is logged and retried with back-off (100 ms doubling to 10 s,
// reset once listening again). Used by the conductor (new allocations) and
// the resource tracker (node changes).
func Listen(ctx context.Context, pool *pgxpool.Pool, channel string, log *zap.Logger, signal, listening func()) {
	ListenPayloads(ctx, pool, channel, log, func(string) { signal() }, func() {
		listening()
		signal()
	})
}

// ListenPayloads is Listen for callers that need each notification's
// payload: notify gets every payload, in the order PostgreSQL delivers them;
// listening is called after every (re)connection, once LISTEN is in effect,
// and is the only sign that notifications may have been missed while the
// connection was away (no synthetic notify follows). Used by metalloc-api's
// allocation event hub (one connection per process).
func ListenPayloads(ctx context.Context, pool *pgxpool.Pool, channel string, log *zap.Logger, notify func(payload string), listening func()) {
	ListenPayloadsLost(ctx, pool, channel, log, notify, listening, func() {})
}

// ListenPayloadsLost is ListenPayloads that also calls lost whenever the
// connection is lost (or could not be made), before it reconnects: from
// then until listening, notifications may be missed. The allocation event
// hub stops serving its cache meanwhile.
func ListenPayloadsLost(ctx context.Context, pool *pgxpool.Pool, channel string, log *zap.Logger, notify func(payload string), listening, lost func()) {
	backoff := 100 * time.Millisecond
	for ctx.Err() == nil {
		err := listenOnce(ctx, pool, channel, notify, func() {
			backoff = 100 * time.Millisecond
			listening()
		})
		lost()
		if ctx.Err() != nil {
			return
		}
		log.Warn("notification listener lost; reconnecting", zap.String("channel", channel), zap.Error(err),
			zap.Duration("backoff", backoff))
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, 10*time.Second)
	}
}

func listenOnce(ctx context.Context, pool *pgxpool.Pool, channel string, notify func(string), listening func()) error {
	conn, err := pgx.ConnectConfig(ctx, pool.Config().ConnConfig.Copy())
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{channel}.Sanitize()); err != nil {
		return err
	}
	listening()
	for {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			return err
		}
		notify(n.Payload)
	}
}
