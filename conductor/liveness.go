package conductor

import (
	"context"
	"time"

	"go.uber.org/zap"
)

// Liveness, as this package writes and reads it (doc.go, "Liveness"):
// registration and every heartbeat write the conductor's expiry into its
// row, now plus its own Config.HeartbeatTimeout, by the database clock;
// everyone (registration, DeadOwners, TakeOver, the conductors API and its
// metrics) judges a conductor alive while it is online and that expiry has
// not passed (metalloc_conductor_alive, db/schema.sql). The two durations
// below follow from the heartbeat settings and live here, named, so that
// nothing else derives them.

// PostOutageGrace is how long a conductor whose heartbeats just started
// succeeding (at start-up, or after it could not reach the database) waits
// before it judges its peers dead: two heartbeat intervals. When this
// conductor could not reach the database its peers likely could not
// either, and their expiries passed through no fault of theirs; after two
// intervals the live ones have written theirs again.
func PostOutageGrace(heartbeatInterval time.Duration) time.Duration {
	return 2 * heartbeatInterval
}

// IdleInTransactionTimeout is the idle_in_transaction_session_timeout a
// conductor sets on its database sessions: its heartbeat timeout. A
// conductor that stalls inside a transaction (paused, swapping,
// partitioned) holds row locks; PostgreSQL ends such a session after this
// long, so its locks are gone by the time its expiry has passed and its
// peers take its rows over. Zero or less means config.DefaultHeartbeatTimeout
// (Config.WithDefaults).
func IdleInTransactionTimeout(heartbeatTimeout time.Duration) time.Duration {
	return Config{HeartbeatTimeout: heartbeatTimeout}.WithDefaults().HeartbeatTimeout
}

// heartbeat refreshes the conductor's row (its expiry) every
// HeartbeatInterval. It tracks since when heartbeats succeed without a gap
// (healthySince), which the takeover task consults (inGrace). A stop ends
// the loop, not a heartbeat being written: one given up on would still be
// run by PostgreSQL (see work), possibly after GoOffline, and set the row
// online again, the conductor alive for another HeartbeatTimeout (its
// hostname refused meanwhile). A heartbeat that takes longer than
// HeartbeatTimeout keeps nobody alive and is given up. After each one it
// reads whether the conductor was asked to drain (checkDrain), in case the
// notification was missed.
func (c *Service) heartbeat(ctx context.Context) {
	t := time.NewTicker(c.cfg.HeartbeatInterval)
	defer t.Stop()
	failing := false
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			hctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.cfg.HeartbeatTimeout)
			_, err := c.q.Heartbeat(hctx, HeartbeatParams{ID: c.id, TimeoutSeconds: c.cfg.HeartbeatTimeout.Seconds()})
			cancel()
			if err != nil {
				if ctx.Err() == nil {
					c.log.Warn("heartbeat failed", zap.Error(err))
				}
				failing = true
				continue
			}
			if failing {
				failing = false
				c.healthySince.Store(time.Now().UnixNano())
				c.log.Info("heartbeat written again")
			}
			c.Metrics.heartbeat()
			c.signals.heartbeatWritten()
			// The drain's fallback: a notification missed (drain.go).
			dctx, cancel := context.WithTimeout(ctx, c.cfg.HeartbeatTimeout)
			c.checkDrain(dctx)
			cancel()
		}
	}
}

// inGrace reports whether this conductor's heartbeats resumed less than
// PostOutageGrace ago (registration counts as resuming): takeover waits.
func (c *Service) inGrace() bool {
	return time.Since(time.Unix(0, c.healthySince.Load())) < PostOutageGrace(c.cfg.HeartbeatInterval)
}
