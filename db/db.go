// Package db opens metalloc's PostgreSQL pool, applies and checks the goose
// migrations embedded in package migrations, and holds the small helpers every
// domain package uses for transactions and error classification.
package db

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// ErrSchemaOutdated is returned by CheckSchema when the database lacks
// migrations this binary needs (expand migrations: the database is below
// its compatibility window, CheckWindow); ErrSchemaTooNew when it has
// migrations this binary does not know and cannot run on (contract ones,
// or ones whose kind is not recorded: above the window).
var (
	ErrSchemaOutdated = errors.New("database schema is outdated")
	ErrSchemaTooNew   = errors.New("database schema is newer than this binary")
)

// PoolOptions tunes Open. Zero values mean pgx defaults.
type PoolOptions struct {
	// MaxConns caps the pool size (pgx default: max(4, GOMAXPROCS)).
	MaxConns int32
	// MinConns connections are opened at start and kept open, so that a
	// burst of work does not pay for connection set-up (default MaxConns/2).
	MinConns int32
	// ApplicationName is reported in pg_stat_activity.
	ApplicationName string
	// WarmUp makes every new connection run metalloc_warm_up()
	// (migrations/00032_connection_warm_up.sql) before the pool hands it
	// out: a few milliseconds of the server's time per connection, taken
	// at start for the MinConns connections, instead of on the first
	// allocations each backend serves. A warm-up that fails (a schema
	// without the function: CheckSchema reports that) is ignored; the
	// connection is used all the same. For metalloc-api and the
	// conductors, whose first requests are allocations.
	WarmUp bool
	// RuntimeParams are extra PostgreSQL settings for every connection, such
	// as {"idle_in_transaction_session_timeout": "60000"} (values in the
	// setting's own unit, as SET takes them).
	RuntimeParams map[string]string
	// ConnectTimeout bounds establishing one connection (TCP connect,
	// TLS, start-up and authentication). Zero means the URL's
	// connect_timeout if it sets one, else DefaultConnectTimeout. (pgxpool's
	// own fallback is 2 minutes, far too long for a request to wait on a
	// database host that drops packets.)
	ConnectTimeout time.Duration
	// AcquireTimeout bounds how long one Acquire (every query and
	// transaction on the pool starts with one) waits for a connection:
	// queueing behind other callers when the pool is exhausted, opening a
	// new connection, and the liveness ping of a connection idle for more
	// than a second. On expiry the query fails with an error wrapping
	// context.DeadlineExceeded, which IsUnavailable reports (the API
	// answers 503). A shorter deadline of the caller's own still applies.
	// Zero means the URL's pool_acquire_timeout (a Go duration such as
	// "3s", like pgxpool's own pool_* URL parameters) if set, else
	// DefaultAcquireTimeout; negative means no bound.
	AcquireTimeout time.Duration
}

// warmUpSQL is what PoolOptions.WarmUp runs on a new connection.
const warmUpSQL = "SELECT metalloc_warm_up()"

// Defaults for PoolOptions.ConnectTimeout and PoolOptions.AcquireTimeout.
// With the database down, connecting to its closed port fails at once;
// these bounds matter when its host is unreachable (a connect hangs) or
// when every pooled connection is busy.
const (
	DefaultConnectTimeout = 5 * time.Second
	DefaultAcquireTimeout = 5 * time.Second
)

// acquireTimeoutParam is the URL parameter that sets AcquireTimeout.
const acquireTimeoutParam = "pool_acquire_timeout"

// Open connects a pgx pool to url (a libpq URL or key=value DSN) and pings it.
// url may name several hosts, as libpq allows
// (postgres://a:5432,b:5432/metalloc?target_session_attrs=read-write): each
// new connection tries them in order and, with target_session_attrs, keeps
// only the one that accepts writes, so a promoted standby takes over without
// a configuration change.
//
// The pool reconnects by itself: a connection that fails (the server
// restarted, terminated it or went away) is dropped, and a later Acquire
// opens a new one. While the server is unreachable, queries fail quickly
// with errors IsUnavailable reports; no Acquire waits longer than
// opt.AcquireTimeout, and no connection attempt longer than
// opt.ConnectTimeout. A failed first connection is described by
// DescribeConnectError (what each address answered).
func Open(ctx context.Context, url string, opt PoolOptions) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("parsing database url: %w", err)
	}
	if opt.MaxConns > 0 {
		cfg.MaxConns = opt.MaxConns
	}
	cfg.MinConns = opt.MinConns
	if cfg.MinConns <= 0 {
		cfg.MinConns = cfg.MaxConns / 2
	}
	if opt.ApplicationName != "" {
		cfg.ConnConfig.RuntimeParams["application_name"] = opt.ApplicationName
	}
	for k, v := range opt.RuntimeParams {
		cfg.ConnConfig.RuntimeParams[k] = v
	}
	if err := applyTimeouts(cfg, opt); err != nil {
		return nil, err
	}
	// After a failover, a connection may still lead to a server that is a
	// standby now (demoted, or a read-only replica in a multi-host URL):
	// drop it instead of handing it out again, so that the next connection
	// follows target_session_attrs to the new primary. PostgreSQL 14+
	// reports in_hot_standby to clients whenever it changes.
	cfg.AfterConnect = func(ctx context.Context, c *pgx.Conn) error {
		RegisterUUID(c.TypeMap())
		if opt.WarmUp {
			// Autocommit: a failure leaves no transaction open, and the
			// connection serves cold. One that the failure closed (ctx
			// ended mid-statement, the server went away) is not handed
			// out: the pool drops it.
			if _, err := c.Exec(ctx, warmUpSQL); err != nil && c.IsClosed() {
				return fmt.Errorf("warming up a new connection: %w", err)
			}
		}
		return nil
	}
	cfg.AfterRelease = func(c *pgx.Conn) bool {
		return c.PgConn().ParameterStatus("in_hot_standby") != "on"
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, openError(err)
	}
	// The first connection is bounded by ConnectTimeout and these 10 s,
	// not by AcquireTimeout: a slow start (a loaded host, TLS, a remote
	// server) must not fail Open when every later acquire would succeed.
	pctx, cancel := context.WithTimeout(context.WithValue(ctx, unboundedAcquireKey{}, true), 10*time.Second)
	defer cancel()
	if err := pool.Ping(pctx); err != nil {
		pool.Close()
		return nil, openError(err)
	}
	return pool, nil
}

// openError is Open's error for a failed first connection: pgx's connect
// error described (DescribeConnectError, which says "cannot connect to the
// database"), anything else prefixed with "connecting to database".
func openError(err error) error {
	var ce *pgconn.ConnectError
	if errors.As(err, &ce) {
		return DescribeConnectError(err)
	}
	return fmt.Errorf("connecting to database: %w", err)
}

// LatestVersion is the highest migration version embedded in this binary.
func LatestVersion() (int64, error) {
	known, err := Migrations()
	if err != nil || len(known) == 0 {
		return 0, err
	}
	return known[len(known)-1].Version, nil
}

// schemaVersionSQL reads the highest applied migration of goose's table.
const schemaVersionSQL = `SELECT coalesce(max(version_id), 0) FROM goose_db_version WHERE is_applied`

// SchemaVersion is the version of the database's schema: its highest
// applied migration, 0 for a database never migrated.
func SchemaVersion(ctx context.Context, pool Queryer) (int64, error) {
	var have int64
	if err := pool.QueryRow(ctx, schemaVersionSQL).Scan(&have); err != nil && !isUndefinedTable(err) {
		return 0, fmt.Errorf("reading schema version: %w", err)
	}
	return have, nil
}

func isUndefinedTable(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "42P01"
}

// ErrRestart, returned (possibly wrapped) by a transaction's function, asks
// InTx to roll back and run the transaction again from the start: the
// function found that something it read before taking its locks changed
// meanwhile, and taking the lock it needs now would break the lock order
// (conductor/doc.go, "Lock order").
var ErrRestart = errors.New("transaction must start over")

// MaxTxAttempts is how many times InTx runs a transaction that keeps failing
// with a transient error or ErrRestart before it gives up and returns the
// last error.
const MaxTxAttempts = 5

// InTx runs fn in a transaction on pool, committing when fn returns nil and
// rolling back otherwise. A transaction that fails with a transient
// concurrency error (IsTransient) or ErrRestart runs again from the start,
// after a short random pause, up to MaxTxAttempts times in all: fn must only
// change the database through its tx, and reset any result it records.
func InTx(ctx context.Context, pool *pgxpool.Pool, fn func(pgx.Tx) error) error {
	return Retry(ctx, func() error { return pgx.BeginFunc(ctx, pool, fn) })
}

// Retry runs fn, and again after a short random pause while it fails with
// a transient concurrency error (IsTransient) or ErrRestart, up to
// MaxTxAttempts times in all, as InTx does for a transaction: for work that
// is one autocommit statement (or a read, then one), where BEGIN and
// COMMIT would only add round trips.
func Retry(ctx context.Context, fn func() error) error {
	var err error
	for attempt := 1; ; attempt++ {
		err = fn()
		if attempt >= MaxTxAttempts || !(IsTransient(err) || errors.Is(err, ErrRestart)) {
			return err
		}
		pause := time.Duration(attempt) * (time.Millisecond + rand.N(5*time.Millisecond))
		select {
		case <-ctx.Done():
			return err
		case <-time.After(pause):
		}
	}
}

// IsTransient reports whether err is a concurrency failure that the same
// transaction may not hit again when it runs anew: serialization_failure
// (40001), deadlock_detected (40P01) or lock_not_available (55P03).
func IsTransient(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) &&
		(pgErr.Code == "40001" || pgErr.Code == "40P01" || pgErr.Code == "55P03")
}

// IsUniqueViolation reports whether err is a PostgreSQL unique_violation,
// optionally on the named constraint (empty matches any).
func IsUniqueViolation(err error, constraint string) bool {
	return hasCode(err, "23505", constraint)
}

// IsExclusionViolation reports whether err is a PostgreSQL
// exclusion_violation (23P01: a row conflicting with another under an
// EXCLUDE constraint, e.g. a lease's node booked twice over one time),
// optionally on the named constraint (empty matches any).
func IsExclusionViolation(err error, constraint string) bool {
	return hasCode(err, "23P01", constraint)
}

// IsForeignKeyViolation reports whether err is a PostgreSQL
// foreign_key_violation, optionally on the named constraint (empty matches
// any).
func IsForeignKeyViolation(err error, constraint string) bool {
	return hasCode(err, "23503", constraint)
}

// IsIntegrityError reports whether err is any PostgreSQL integrity constraint
// violation (class 23), e.g. a unique, foreign-key or check violation.
func IsIntegrityError(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && strings.HasPrefix(pgErr.Code, "23")
}

func hasCode(err error, code, constraint string) bool {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != code {
		return false
	}
	return constraint == "" || pgErr.ConstraintName == constraint
}

// DataException reports whether err is a PostgreSQL data exception (SQLSTATE
// class 22: invalid byte sequence, NUL in text, value out of range, invalid
// text representation) and returns PostgreSQL's message for it (for logs:
// clients get DataExceptionCode's meaning in the API's words).
func DataException(err error) (string, bool) {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && strings.HasPrefix(pgErr.Code, "22") {
		return pgErr.Message, true
	}
	return "", false
}

// DataExceptionCode is the SQLSTATE of a data exception err carries
// ("22021", ...), "" when it carries none.
func DataExceptionCode(err error) string {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && strings.HasPrefix(pgErr.Code, "22") {
		return pgErr.Code
	}
	return ""
}

// IsUnavailable reports whether err means the database could not be reached
// or the connection was lost (as opposed to a query error): the API maps it
// to 503. That covers a server that is down, starting up or shutting down
// (SQLSTATE 57P01 admin_shutdown, 57P02 crash_shutdown, 57P03
// cannot_connect_now), out of connection slots (53300), connection
// exceptions (class 08), a server that only accepts reads (25006
// read_only_sql_transaction: a standby, or a primary fenced during a
// failover), a failed connection attempt, a connection that
// broke mid-statement (reset, closed, unexpected EOF, network error), and a
// deadline that expired, such as PoolOptions.AcquireTimeout.
func IsUnavailable(err error) bool {
	if err == nil {
		return false
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return strings.HasPrefix(pgErr.Code, "08") || pgErr.Code == "57P01" ||
			pgErr.Code == "57P02" || pgErr.Code == "57P03" || pgErr.Code == "53300" ||
			pgErr.Code == "25006"
	}
	var connErr *pgconn.ConnectError
	var netErr net.Error
	switch {
	case errors.As(err, &connErr), errors.As(err, &netErr),
		errors.Is(err, pgconn.ErrConnClosed), errors.Is(err, io.ErrUnexpectedEOF),
		errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.ECONNRESET),
		errors.Is(err, syscall.EPIPE), errors.Is(err, context.DeadlineExceeded),
		pgconn.SafeToRetry(err), pgconn.Timeout(err):
		return true
	}
	return strings.Contains(err.Error(), "conn closed") || strings.Contains(err.Error(), "connection refused")
}
