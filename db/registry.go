package db

import (
	"context"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/zap"
)

// The registry of running binaries, read by `db sync --contract` (Sync) and
// `metalloc-manage status versions`: the conductors table (each conductor
// writes its schema_version and pid at registration, package conductor) and
// api_servers, where metalloc-api and metalloc-placement register
// (RegisterServer). It lives here, beside the migrations, because its one
// purpose is the upgrade rule: which schema versions the running binaries
// know. (Package web is HTTP plumbing without a database; package conductor
// cannot be imported by the APIs' shared start-up.)

// ServerHeartbeat is how often a registered API process refreshes its
// api_servers row; a row older than ServerGone is a process gone (killed
// without its clean stop's delete) and no longer holds a contract back.
const (
	ServerHeartbeat = 5 * time.Second
	ServerGone      = 3 * ServerHeartbeat
)

// serverPruneAfter is how long a gone process's row stays listed (as gone)
// before a registration deletes it.
const serverPruneAfter = time.Hour

// Binary is one registered process: an API ("api", "placement") from
// api_servers or a "conductor" from conductors. SchemaVersion is the
// highest migration its binary knows (0: a conductor registered by a
// binary from before migration 00047, which did not say). PID is 0 for
// such a conductor too. Live: heartbeating (an API's heartbeat within
// ServerGone; a conductor alive by metalloc_conductor_alive).
type Binary struct {
	Kind          string
	Hostname      string
	PID           int32
	Version       string
	SchemaVersion int64
	StartedAt     time.Time
	HeartbeatAt   time.Time
	Live          bool
}

// binariesSQL lists both registries, live ones first ($1: ServerGone in
// seconds).
const binariesSQL = `SELECT service, hostname, pid, version, schema_version, started_at, heartbeat_at,
       heartbeat_at > now() - make_interval(secs => $1::float8) AS live
  FROM api_servers
UNION ALL
SELECT 'conductor', hostname, pid, version, schema_version, started_at, heartbeat_at,
       metalloc_conductor_alive(online, expires_at)
  FROM conductors
ORDER BY live DESC, service, hostname, pid`

// binariesBeforeRegistrySQL is binariesSQL on a database before migration
// 00047: no api_servers, and conductors that did not say which schema
// version they know (0).
const binariesBeforeRegistrySQL = `SELECT 'conductor', hostname, 0, version, 0::bigint, started_at, heartbeat_at,
       metalloc_conductor_alive(online, expires_at) AS live
  FROM conductors
 WHERE $1::float8 IS NOT NULL
ORDER BY live DESC, hostname`

// Binaries lists every registered API, Placement API and conductor, live or
// not, live ones first, then by kind, hostname and pid. On a database from
// before migration 00047 it lists the conductors only, each with schema
// version 0: APIs of those releases did not register.
func Binaries(ctx context.Context, q Queryer) ([]Binary, error) {
	var registry bool
	if err := q.QueryRow(ctx, `SELECT to_regclass('api_servers') IS NOT NULL`).Scan(&registry); err != nil {
		return nil, fmt.Errorf("listing registered processes: %w", err)
	}
	sql := binariesSQL
	if !registry {
		sql = binariesBeforeRegistrySQL
	}
	rows, err := q.Query(ctx, sql, ServerGone.Seconds())
	if err != nil {
		return nil, fmt.Errorf("listing registered processes: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Binary, error) {
		var b Binary
		err := r.Scan(&b.Kind, &b.Hostname, &b.PID, &b.Version, &b.SchemaVersion, &b.StartedAt, &b.HeartbeatAt, &b.Live)
		return b, err
	})
	if err != nil {
		return nil, fmt.Errorf("listing registered processes: %w", err)
	}
	return out, nil
}

// ServerInfo is what an API process registers: Service "api" or
// "placement", and its build's version (buildinfo).
type ServerInfo struct {
	Service string
	Version string
}

// Registration is an API process's row in api_servers, heartbeating until
// Close.
type Registration struct {
	pool *pgxpool.Pool
	info ServerInfo
	log  *zap.Logger
	stop context.CancelFunc
	done chan struct{}

	mu sync.Mutex
	id int64 // 0 while not registered
}

// RegisterServer registers this process in api_servers (hostname, pid,
// info, the highest migration this binary knows) and heartbeats its row
// every ServerHeartbeat until Close, which deletes it. A failure to
// register (the database down) is logged and retried at each heartbeat: the
// API serves on all the same. A row deleted meanwhile (pruned after a long
// outage) is registered again.
func RegisterServer(ctx context.Context, pool *pgxpool.Pool, info ServerInfo, log *zap.Logger) *Registration {
	ctx, stop := context.WithCancel(ctx)
	r := &Registration{pool: pool, info: info, log: log, stop: stop, done: make(chan struct{})}
	if err := r.beat(ctx); err != nil {
		log.Warn("registering in api_servers failed; retrying at the next heartbeat", zap.Error(err))
	}
	go r.run(ctx)
	return r
}

func (r *Registration) run(ctx context.Context) {
	defer close(r.done)
	t := time.NewTicker(ServerHeartbeat)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if err := r.beat(ctx); err != nil && ctx.Err() == nil {
			r.log.Warn("api_servers heartbeat failed", zap.Error(err))
		}
	}
}

// beat refreshes the row, inserting it when there is none.
func (r *Registration) beat(ctx context.Context) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.id != 0 {
		tag, err := r.pool.Exec(ctx, `UPDATE api_servers SET heartbeat_at = now() WHERE id = $1`, r.id)
		if err != nil || tag.RowsAffected() == 1 {
			return err
		}
		r.log.Warn("api_servers row gone (pruned after an outage?): registering again", zap.Int64("id", r.id))
	}
	known, err := LatestVersion()
	if err != nil {
		return err
	}
	host, err := os.Hostname()
	if err != nil {
		return fmt.Errorf("reading hostname: %w", err)
	}
	var id int64
	err = r.pool.QueryRow(ctx, `WITH pruned AS (
  DELETE FROM api_servers WHERE heartbeat_at < now() - make_interval(secs => $6::float8))
INSERT INTO api_servers (hostname, pid, service, version, schema_version)
VALUES ($1, $2, $3, $4, $5) RETURNING id`,
		host, os.Getpid(), r.info.Service, r.info.Version, known, serverPruneAfter.Seconds()).Scan(&id)
	if err != nil {
		return fmt.Errorf("registering in api_servers: %w", err)
	}
	r.id = id
	r.log.Info("registered in api_servers", zap.Int64("id", id), zap.String("hostname", host),
		zap.Int("pid", os.Getpid()), zap.Int64("schema_version", known))
	return nil
}

// Close stops the heartbeat and deletes the row (a clean stop: the process
// no longer holds a contract back). Call it once the process serves no
// more requests.
func (r *Registration) Close() {
	r.stop()
	<-r.done
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.id == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := r.pool.Exec(ctx, `DELETE FROM api_servers WHERE id = $1`, r.id); err != nil {
		r.log.Warn("deleting the api_servers row failed; it counts as gone after its heartbeats stop",
			zap.Int64("id", r.id), zap.Duration("after", ServerGone), zap.Error(err))
		return
	}
	r.log.Info("deregistered from api_servers", zap.Int64("id", r.id))
	r.id = 0
}
