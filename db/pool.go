package db

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// applyTimeouts sets the connect timeout and installs the acquire deadline
// of opt on cfg (see PoolOptions.ConnectTimeout and AcquireTimeout).
func applyTimeouts(cfg *pgxpool.Config, opt PoolOptions) error {
	acquire := opt.AcquireTimeout
	if s, ok := cfg.ConnConfig.RuntimeParams[acquireTimeoutParam]; ok {
		// Ours, not a server setting: keep it out of the start-up message.
		delete(cfg.ConnConfig.RuntimeParams, acquireTimeoutParam)
		d, err := time.ParseDuration(s)
		if err != nil {
			return fmt.Errorf("parsing database url: %s: %w", acquireTimeoutParam, err)
		}
		if acquire == 0 {
			acquire = d
		}
	}
	if acquire == 0 {
		acquire = DefaultAcquireTimeout
	}
	if acquire > 0 {
		if cfg.ConnConfig.Tracer != nil {
			return fmt.Errorf("database pool: a query tracer is already set; cannot bound acquires")
		}
		cfg.ConnConfig.Tracer = acquireDeadline(acquire)
	}
	switch {
	case opt.ConnectTimeout > 0:
		cfg.ConnConfig.ConnectTimeout = opt.ConnectTimeout
	case cfg.ConnConfig.ConnectTimeout <= 0: // the URL sets none
		cfg.ConnConfig.ConnectTimeout = DefaultConnectTimeout
	}
	return nil
}

// acquireDeadline bounds pgxpool.Pool.Acquire through pgxpool's
// AcquireTracer hook, whose returned context "is used for the rest of the
// call" (pgxpool has no acquire timeout of its own). The deadline covers the
// wait for a free connection, the construction of a new one (pgxpool lets a
// construction outlive a caller that gave up, bounded by ConnectTimeout) and
// the ping of a long-idle one; it does not apply to the queries run on the
// connection afterwards.
type acquireDeadline time.Duration

type acquireCancelKey struct{}

// unboundedAcquireKey marks a context whose acquires acquireDeadline leaves
// alone (Open's first ping).
type unboundedAcquireKey struct{}

// TraceAcquireStart implements pgxpool.AcquireTracer.
func (d acquireDeadline) TraceAcquireStart(ctx context.Context, _ *pgxpool.Pool, _ pgxpool.TraceAcquireStartData) context.Context {
	if ctx.Value(unboundedAcquireKey{}) != nil {
		return ctx
	}
	ctx, cancel := context.WithTimeout(ctx, time.Duration(d))
	return context.WithValue(ctx, acquireCancelKey{}, cancel)
}

// TraceAcquireEnd implements pgxpool.AcquireTracer: it releases the timer.
func (acquireDeadline) TraceAcquireEnd(ctx context.Context, _ *pgxpool.Pool, _ pgxpool.TraceAcquireEndData) {
	if cancel, ok := ctx.Value(acquireCancelKey{}).(context.CancelFunc); ok {
		cancel()
	}
}

// TraceQueryStart implements pgx.QueryTracer (required of a ConnConfig
// tracer); it does nothing.
func (acquireDeadline) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	return ctx
}

// TraceQueryEnd implements pgx.QueryTracer; it does nothing.
func (acquireDeadline) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}
