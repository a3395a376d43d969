package db_test

import (
	"context"
	"fmt"
	"io/fs"
	"strconv"
	"strings"
	"testing"
	"testing/fstest"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/metalloc/metalloc/db"
	"github.com/metalloc/metalloc/db/dbtest"
	"github.com/metalloc/metalloc/migrations"
)

// TestMigrationsDeclareKind: every embedded migration declares its kind
// on its second line, right after "-- +goose Up"; a file without a Kind
// line, or with another word, is refused by the parser.
func TestMigrationsDeclareKind(t *testing.T) {
	t.Parallel()
	known, err := db.Migrations()
	require.NoError(t, err)
	files, err := fs.Glob(migrations.FS, "*.sql")
	require.NoError(t, err)
	require.Len(t, known, len(files))
	for _, m := range known {
		require.Contains(t, []db.Kind{db.KindExpand, db.KindContract}, m.Kind, m.Name)
		b, err := fs.ReadFile(migrations.FS, m.Name)
		require.NoError(t, err)
		lines := strings.SplitN(string(b), "\n", 3)
		require.Equal(t, "-- +goose Up", lines[0], m.Name)
		require.True(t, strings.HasPrefix(lines[1], "-- Kind: "+string(m.Kind)), "%s: the Kind line comes second", m.Name)
	}

	for body, want := range map[string]string{
		"-- +goose Up\n-- Adds a.\nCREATE TABLE a ();\n":                     `no "-- Kind: expand" or "-- Kind: contract" line`,
		"-- +goose Up\n-- Kind: additive.\nCREATE TABLE a ();\n":             `kind "additive": want expand or contract`,
		"-- +goose Up\nCREATE TABLE a ();\n-- Kind: expand.\n":               `no "-- Kind: expand"`, // not in the header
		"-- +goose Up\n-- Kind: contract. Drops b.\nALTER TABLE a DROP b;\n": "",
	} {
		_, err := db.ParseMigrations(fstest.MapFS{"00001_a.sql": {Data: []byte(body)}})
		if want == "" {
			require.NoError(t, err)
			continue
		}
		require.ErrorContains(t, err, "migration 00001_a.sql: "+want)
	}
}

// TestCheckWindow: the compatibility window over the kinds. A binary knowing
// up to N runs on V == N; on V > N when N+1..V are all expand; on V < N
// when V+1..N are all contract; otherwise the error names the command.
func TestCheckWindow(t *testing.T) {
	t.Parallel()
	m := func(v int64, k db.Kind) db.Migration { return db.Migration{Version: v, Kind: k} }
	e, c := db.KindExpand, db.KindContract
	mixed := []db.Migration{m(1, e), m(2, e), m(3, c), m(4, e)}
	tail := []db.Migration{m(1, e), m(2, e), m(3, c), m(4, c)}
	for _, tc := range []struct {
		name   string
		known  []db.Migration
		have   int64
		beyond []db.Migration
		is     error  // nil: inside
		want   string // in the message
	}{
		{name: "same version", known: mixed, have: 4},
		{name: "expand pending", known: mixed, have: 3, is: db.ErrSchemaOutdated,
			want: "database is at version 3, this binary needs 4; run `metalloc-manage db sync`"},
		{name: "expand after a pending contract", known: mixed, have: 2, is: db.ErrSchemaOutdated,
			want: "this binary needs 4; run `metalloc-manage db sync --contract` (db sync stops"},
		{name: "only contract pending", known: tail, have: 2},
		{name: "expand then contract pending", known: tail, have: 1, is: db.ErrSchemaOutdated,
			want: "database is at version 1, this binary needs 2; run `metalloc-manage db sync`"},
		{name: "never migrated", known: tail, have: 0, is: db.ErrSchemaOutdated,
			want: "database is at version 0, this binary needs 2; run `metalloc-manage db sync`"},
		{name: "never migrated, expand after a contract", known: mixed, have: 0, is: db.ErrSchemaOutdated,
			want: "database is at version 0, this binary needs 4; run `metalloc-manage db sync`"},
		{name: "newer, all expand", known: mixed, have: 6, beyond: []db.Migration{m(5, e), m(6, e)}},
		{name: "newer with a contract", known: mixed, have: 6, beyond: []db.Migration{m(5, e), m(6, c)},
			is:   db.ErrSchemaTooNew,
			want: "database is at version 6, this binary knows up to 4; migration 6 is contract: upgrade metalloc to a binary that knows version 6"},
		{name: "newer, kind not recorded", known: mixed, have: 5, beyond: []db.Migration{m(5, "")},
			is: db.ErrSchemaTooNew, want: "migration 5 has no recorded kind: upgrade metalloc"},
	} {
		err := db.CheckWindow(tc.known, tc.have, tc.beyond)
		if tc.is == nil {
			require.NoError(t, err, tc.name)
			continue
		}
		require.ErrorIs(t, err, tc.is, tc.name)
		require.ErrorContains(t, err, tc.want, tc.name)
		var se *db.SchemaError
		require.ErrorAs(t, err, &se, tc.name)
		require.Contains(t, se.Error(), se.Command, tc.name)
	}
}

// withTestMigrations is the embedded migrations and, after them, extra
// ones (name: body).
func withTestMigrations(t *testing.T, extra map[string]string) fs.FS {
	t.Helper()
	out := fstest.MapFS{}
	require.NoError(t, fs.WalkDir(migrations.FS, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := fs.ReadFile(migrations.FS, p)
		out[p] = &fstest.MapFile{Data: b}
		return err
	}))
	for name, body := range extra {
		out[name] = &fstest.MapFile{Data: []byte(body)}
	}
	return out
}

// nextRelease is a database of the current schema (url, at version
// latest), and the embedded migrations followed by three more (fsys):
// expand, contract, expand, at versions v.
type nextRelease struct {
	url    string
	latest int64
	fsys   fs.FS
	v      [3]int64
}

func newNextRelease(t *testing.T) nextRelease {
	t.Helper()
	latest, err := db.LatestVersion()
	require.NoError(t, err)
	var v [3]int64
	extra := map[string]string{}
	for i, kind := range []string{"expand", "contract", "expand"} {
		v[i] = latest + 1 + int64(i)
		name := fmt.Sprintf("%05d_test_%s.sql", v[i], kind)
		extra[name] = "-- +goose Up\n-- Kind: " + kind + ". A test table.\nCREATE TABLE upgrade_test_" + itoa(v[i]) + " (id int);\n"
	}
	return nextRelease{url: dbtest.NewURL(t), latest: latest, fsys: withTestMigrations(t, extra), v: v}
}

func itoa(v int64) string { return strconv.FormatInt(v, 10) }

// TestSyncStopsBeforeContract: db sync applies the expand migration and
// stops before the contract one, saying what waits; the binary of the
// previous release (the embedded migrations) still runs on the result,
// reading the new migration's kind from the database; a second sync
// changes nothing. On a database never migrated, sync applies everything.
func TestSyncStopsBeforeContract(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	n := newNextRelease(t)
	fsys, v, url, latest := n.fsys, n.v, n.url, n.latest

	r, err := db.SyncFS(ctx, url, fsys, db.SyncOptions{})
	require.NoError(t, err)
	require.Equal(t, latest, r.From)
	require.Equal(t, v[0], r.Version)
	require.Equal(t, []int64{v[0]}, versions(r.Applied))
	require.Equal(t, []int64{v[1], v[2]}, versions(r.Waiting))
	require.Equal(t, db.KindContract, r.Waiting[0].Kind)

	pool, err := db.Open(ctx, url, db.PoolOptions{MaxConns: 2})
	require.NoError(t, err)
	defer pool.Close()
	require.NoError(t, db.CheckSchema(ctx, pool), "the previous release's binary runs on its expand migration")

	r, err = db.SyncFS(ctx, url, fsys, db.SyncOptions{})
	require.NoError(t, err)
	require.Empty(t, r.Applied)
	require.Equal(t, v[0], r.Version)

	empty := dbtest.NewEmptyURL(t)
	r, err = db.SyncFS(ctx, empty, fsys, db.SyncOptions{})
	require.NoError(t, err)
	require.Equal(t, v[2], r.Version, "a database never migrated gets everything")
	require.Empty(t, r.Waiting)
}

// TestSyncContractWaitsForOldBinaries: db sync --contract refuses while a
// live API and a live conductor run binaries that know less than its
// target, lists them (not the gone API, nor the up-to-date one) and applies
// nothing; once they are gone it applies the rest, after which the
// previous release's binary no longer runs on the database.
func TestSyncContractWaitsForOldBinaries(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	n := newNextRelease(t)
	fsys, v, url, latest := n.fsys, n.v, n.url, n.latest
	pool, err := db.Open(ctx, url, db.PoolOptions{MaxConns: 2})
	require.NoError(t, err)
	defer pool.Close()

	_, err = pool.Exec(ctx, `INSERT INTO api_servers (hostname, pid, service, version, schema_version, heartbeat_at) VALUES
  ('old-api', 101, 'api', '1.0', $1, now()),
  ('gone-api', 102, 'placement', '1.0', $1, now() - interval '1 minute'),
  ('new-api', 103, 'api', '1.1', $2, now())`, latest, v[2])
	require.NoError(t, err)
	_, err = pool.Exec(ctx, `INSERT INTO conductors (hostname, version, schema_version, pid, expires_at)
VALUES ('old-conductor', '1.0', $1, 201, now() + interval '1 minute')`, latest)
	require.NoError(t, err)

	r, err := db.SyncFS(ctx, url, fsys, db.SyncOptions{Contract: true})
	require.ErrorIs(t, err, db.ErrStragglers)
	var late *db.StragglersError
	require.ErrorAs(t, err, &late)
	require.Equal(t, v[2], late.Target)
	var names []string
	for _, b := range late.Stragglers {
		names = append(names, b.Kind+" "+b.Hostname)
		require.Equal(t, latest, b.SchemaVersion)
		require.True(t, b.Live)
	}
	require.ElementsMatch(t, []string{"api old-api", "conductor old-conductor"}, names)
	require.Equal(t, v[0], r.Version, "the expand migration is applied, the contract one waits")
	have, err := db.SchemaVersion(ctx, pool)
	require.NoError(t, err)
	require.Equal(t, v[0], have)

	_, err = pool.Exec(ctx, `UPDATE api_servers SET heartbeat_at = now() - interval '16 seconds' WHERE hostname = 'old-api'`)
	require.NoError(t, err)
	_, err = pool.Exec(ctx, `UPDATE conductors SET online = false WHERE hostname = 'old-conductor'`)
	require.NoError(t, err)
	r, err = db.SyncFS(ctx, url, fsys, db.SyncOptions{Contract: true})
	require.NoError(t, err)
	require.Equal(t, v[2], r.Version)
	require.Equal(t, []int64{v[1], v[2]}, versions(r.Applied))
	require.Empty(t, r.Waiting)

	err = db.CheckSchema(ctx, pool)
	require.ErrorIs(t, err, db.ErrSchemaTooNew, "past the contract, the previous release's binary is out of its window")
	require.ErrorContains(t, err, "is contract: upgrade metalloc to a binary that knows version "+itoa(v[2]))
}

// TestRegisterServer: an API process's row is there with this binary's
// schema version while it runs, listed live, and gone after Close.
func TestRegisterServer(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := dbtest.New(t)
	latest, err := db.LatestVersion()
	require.NoError(t, err)
	reg := db.RegisterServer(ctx, pool, db.ServerInfo{Service: "placement", Version: "9.9"}, zap.NewNop())
	bins, err := db.Binaries(ctx, pool)
	require.NoError(t, err)
	require.Len(t, bins, 1)
	require.Equal(t, "placement", bins[0].Kind)
	require.Equal(t, "9.9", bins[0].Version)
	require.Equal(t, latest, bins[0].SchemaVersion)
	require.NotZero(t, bins[0].PID)
	require.True(t, bins[0].Live)
	reg.Close()
	bins, err = db.Binaries(ctx, pool)
	require.NoError(t, err)
	require.Empty(t, bins)
}

func versions(ms []db.Migration) []int64 {
	out := []int64{}
	for _, m := range ms {
		out = append(out, m.Version)
	}
	return out
}

// lockRace is a database at the embedded migrations plus one that makes
// tables lock_a and lock_b (url), a pool on it, and a transaction that
// read lock_b and is still open (held). The next release (fsys) adds an
// expand migration at version v that alters lock_a and then lock_b,
// taking their ACCESS EXCLUSIVE locks in that order, in one transaction.
type lockRace struct {
	url  string
	fsys fs.FS
	v    int64
	pool *pgxpool.Pool
	held pgx.Tx
}

func newLockRace(t *testing.T) lockRace {
	t.Helper()
	ctx := context.Background()
	latest, err := db.LatestVersion()
	require.NoError(t, err)
	tables := map[string]string{fmt.Sprintf("%05d_test_tables.sql", latest+1): "-- +goose Up\n-- Kind: expand. Test tables.\n" +
		"CREATE TABLE lock_a (id int);\nCREATE TABLE lock_b (id int);\n"}
	r := lockRace{url: dbtest.NewURL(t), v: latest + 2}
	_, err = db.SyncFS(ctx, r.url, withTestMigrations(t, tables), db.SyncOptions{})
	require.NoError(t, err)
	tables[fmt.Sprintf("%05d_test_alter.sql", r.v)] = "-- +goose Up\n-- Kind: expand. Columns on both.\n" +
		"ALTER TABLE lock_a ADD COLUMN x int;\nALTER TABLE lock_b ADD COLUMN y int;\n"
	r.fsys = withTestMigrations(t, tables)

	r.pool, err = db.Open(ctx, r.url, db.PoolOptions{MaxConns: 3})
	require.NoError(t, err)
	t.Cleanup(r.pool.Close)
	r.held, err = r.pool.Begin(ctx)
	require.NoError(t, err)
	t.Cleanup(func() { _ = r.held.Rollback(ctx) })
	_, err = r.held.Exec(ctx, `SELECT * FROM lock_b`)
	require.NoError(t, err)
	return r
}

// synced is what a db sync returned.
type synced struct {
	r   db.SyncResult
	err error
}

// sync starts db sync to fsys and returns once its migration waits for
// lock_b (held), with the channel its result will come on.
func (r lockRace) sync(t *testing.T) <-chan synced {
	t.Helper()
	ctx := context.Background()
	done := make(chan synced, 1)
	go func() {
		res, err := db.SyncFS(ctx, r.url, r.fsys, db.SyncOptions{Log: zaptest.NewLogger(t)})
		done <- synced{res, err}
	}()
	// dbtest.WaitFor, not require.Eventually, whose condition runs on
	// another goroutine, where require may not stop the test.
	dbtest.WaitFor(t, time.Minute, "the migration waiting for lock_b", func() bool {
		var n int
		require.NoError(t, r.pool.QueryRow(ctx, `SELECT count(*) FROM pg_locks
 WHERE NOT granted AND mode = 'AccessExclusiveLock' AND relation = 'lock_b'::regclass`).Scan(&n))
		return n > 0
	})
	return done
}

// TestSyncAppliesAgainAfterDeadlock: the deadlock of the rolling upgrade
// (migration 00050 against the previous release's picks): the migration
// holds lock_a and waits for lock_b, which a running transaction holds
// and which then writes to lock_a. PostgreSQL aborts the migration (the
// first to wait, so the first to check); db sync applies it again once the
// other transaction has committed, and reports it applied once. The other
// transaction's write stands.
func TestSyncAppliesAgainAfterDeadlock(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	r := newLockRace(t)
	done := r.sync(t)
	_, err := r.held.Exec(ctx, `INSERT INTO lock_a VALUES (1)`)
	require.NoError(t, err, "the migration is the deadlock's victim")
	require.NoError(t, r.held.Commit(ctx))

	s := <-done
	require.NoError(t, s.err)
	require.Equal(t, r.v, s.r.Version)
	require.Equal(t, []int64{r.v}, versions(s.r.Applied))
	var n int
	require.NoError(t, r.pool.QueryRow(ctx, `SELECT count(*) FROM lock_a WHERE id = 1 AND x IS NULL`).Scan(&n))
	require.Equal(t, 1, n)
}

// TestSyncDoesNotQueueTraffic: a migration that waits for a lock held by a
// long transaction (on lock_b) does not make requests on the table it
// already altered (lock_a) wait as long: its lock_timeout ends the wait,
// the migration rolls back, and a read of lock_a gets through while the
// long transaction still runs (without the timeout it would wait for that
// transaction's end, behind the migration). Once the long transaction
// ends, the migration is applied.
func TestSyncDoesNotQueueTraffic(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	r := newLockRace(t)
	done := r.sync(t)
	var n int
	// Without the timeout the read would wait for ever: bound it, to fail.
	rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	require.NoError(t, r.pool.QueryRow(rctx, `SELECT count(*) FROM lock_a`).Scan(&n),
		"a read of lock_a waits behind the migration")
	select {
	case s := <-done:
		t.Fatalf("db sync ended while a transaction held its lock: %v", s.err)
	default:
	}
	require.NoError(t, r.held.Commit(ctx))
	s := <-done
	require.NoError(t, s.err)
	require.Equal(t, []int64{r.v}, versions(s.r.Applied))
	require.NoError(t, r.pool.QueryRow(ctx, `SELECT count(*) FROM information_schema.columns
 WHERE table_name IN ('lock_a', 'lock_b') AND column_name IN ('x', 'y')`).Scan(&n))
	require.Equal(t, 2, n)
}
