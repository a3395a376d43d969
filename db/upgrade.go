package db

import (
	"bufio"
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"
	"go.uber.org/zap"

	"github.com/metalloc/metalloc/migrations"
)

// Rolling upgrades (issue 41; docs/operations.md, "Upgrading"). Every
// migration declares a kind on its second line, "-- Kind: expand" or
// "-- Kind: contract":
//
//   - expand: binaries built for the version before it keep working on it
//     (new tables, columns with defaults, function bodies). `metalloc-manage
//     db sync` applies these while older binaries run.
//   - contract: only binaries that know it may run on it (a dropped or
//     renamed column or function, a changed signature, a new NOT NULL
//     without a default); the binaries that know it must not need it either.
//     `metalloc-manage db sync --contract` applies these once every live
//     API and conductor runs a binary that knows them.
//
// A binary knowing migrations up to N runs on a database at version V when
// V == N; when V > N and every migration in N+1..V is expand (an older
// binary after the new release's db sync; the kinds of migrations it does
// not know are read from schema_migration_kinds); when V < N and every
// migration in V+1..N is contract (a newer binary before db sync
// --contract). That is its compatibility window (CheckWindow).

// Kind is a migration's kind: KindExpand or KindContract.
type Kind string

// The kinds of migration. A migration applied by a newer binary whose kind
// that binary did not record reads as Kind("") and counts as contract.
const (
	KindExpand   Kind = "expand"
	KindContract Kind = "contract"
)

// Migration is one embedded goose migration: its version (the file name's
// number), file name and kind.
type Migration struct {
	Version int64
	Name    string
	Kind    Kind
}

// kindPrefix starts the line of a migration's header naming its kind.
const kindPrefix = "-- Kind: "

// Migrations are the migrations embedded in this binary, oldest first,
// each with the kind its header declares. A file without a valid Kind line
// in its leading comment block is an error (a unit test checks every file).
func Migrations() ([]Migration, error) {
	return parseMigrations(migrations.FS)
}

// parseMigrations reads the NNNNN_name.sql files at fsys's root.
func parseMigrations(fsys fs.FS) ([]Migration, error) {
	entries, err := fs.ReadDir(fsys, ".")
	if err != nil {
		return nil, fmt.Errorf("reading migrations: %w", err)
	}
	var out []Migration
	for _, e := range entries {
		name := e.Name()
		if !strings.HasSuffix(name, ".sql") {
			continue
		}
		num, _, _ := strings.Cut(name, "_")
		v, err := strconv.ParseInt(num, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("migration %s: bad version prefix", name)
		}
		b, err := fs.ReadFile(fsys, name)
		if err != nil {
			return nil, fmt.Errorf("reading migration %s: %w", name, err)
		}
		k, err := parseKind(b)
		if err != nil {
			return nil, fmt.Errorf("migration %s: %w", name, err)
		}
		out = append(out, Migration{Version: v, Name: name, Kind: k})
	}
	slices.SortFunc(out, func(a, b Migration) int { return int(a.Version - b.Version) })
	return out, nil
}

// parseKind finds the "-- Kind: expand" or "-- Kind: contract" line in the
// leading comment block of a migration file (the kind word may be followed
// by "." and the reason).
func parseKind(b []byte) (Kind, error) {
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if !strings.HasPrefix(line, "--") {
			break
		}
		rest, ok := strings.CutPrefix(line, kindPrefix)
		if !ok {
			continue
		}
		word, _, _ := strings.Cut(rest, ".")
		switch k := Kind(strings.TrimSpace(word)); k {
		case KindExpand, KindContract:
			return k, nil
		default:
			return "", fmt.Errorf("kind %q: want expand or contract", word)
		}
	}
	return "", errors.New(`no "-- Kind: expand" or "-- Kind: contract" line in its header`)
}

// SchemaError is CheckWindow's error: Err is ErrSchemaOutdated or
// ErrSchemaTooNew (errors.Is matches it), Have the database's version,
// Known the binary's latest migration, Command what brings the binary
// inside its window ("`metalloc-manage db sync`", "`metalloc-manage db
// sync --contract`", or "upgrade metalloc to a binary that knows version
// V").
type SchemaError struct {
	Err         error
	Have, Known int64
	Command     string
	msg         string
}

func (e *SchemaError) Error() string { return e.Err.Error() + ": " + e.msg }

// Unwrap returns Err.
func (e *SchemaError) Unwrap() error { return e.Err }

// CheckWindow decides whether a binary that knows the migrations known
// (oldest first) may run on a database at version have, as the package's
// rule says. beyond are the database's applied migrations newer than the
// binary's latest, with the kinds recorded for them (Kind "" when none
// was). It returns nil inside the window, else a *SchemaError naming both
// versions and the command that brings the binary inside.
func CheckWindow(known []Migration, have int64, beyond []Migration) error {
	var want int64
	if len(known) > 0 {
		want = known[len(known)-1].Version
	}
	switch {
	case have > want:
		for _, m := range beyond {
			if m.Version <= want || m.Version > have || m.Kind == KindExpand {
				continue
			}
			why := "is contract"
			if m.Kind == "" {
				why = "has no recorded kind"
			}
			cmd := fmt.Sprintf("upgrade metalloc to a binary that knows version %d", have)
			return &SchemaError{Err: ErrSchemaTooNew, Have: have, Known: want, Command: cmd,
				msg: fmt.Sprintf("database is at version %d, this binary knows up to %d; migration %d %s: %s",
					have, want, m.Version, why, cmd)}
		}
		return nil
	case have < want:
		// The oldest version this binary can run on: the last expand
		// migration it knows, if the database lacks it.
		var need int64
		contractSeen, expandAfterContract := false, false
		for _, m := range known {
			if m.Version <= have {
				continue
			}
			if m.Kind == KindExpand {
				need = m.Version
				expandAfterContract = expandAfterContract || contractSeen
			} else {
				contractSeen = true
			}
		}
		if need == 0 {
			return nil
		}
		cmd, why := "`metalloc-manage db sync`", ""
		if expandAfterContract && have > 0 {
			// db sync stops before the first contract migration, and
			// expand ones this binary needs come after it (on a database
			// never migrated it applies everything).
			cmd, why = "`metalloc-manage db sync --contract`", " (db sync stops before a contract migration)"
		}
		return &SchemaError{Err: ErrSchemaOutdated, Have: have, Known: want, Command: cmd,
			msg: fmt.Sprintf("database is at version %d, this binary needs %d; run %s%s", have, need, cmd, why)}
	}
	return nil
}

// CheckSchema verifies that the database at pool is inside this binary's
// compatibility window (CheckWindow): a *SchemaError (ErrSchemaOutdated or
// ErrSchemaTooNew, with both versions and the command that brings it
// inside), otherwise nil.
func CheckSchema(ctx context.Context, pool Queryer) error {
	known, err := Migrations()
	if err != nil {
		return err
	}
	have, err := SchemaVersion(ctx, pool)
	if err != nil {
		return err
	}
	var beyond []Migration
	if n := len(known); n > 0 && have > known[n-1].Version {
		if beyond, err = appliedKinds(ctx, pool, known[n-1].Version); err != nil {
			return err
		}
	}
	return CheckWindow(known, have, beyond)
}

// appliedKindsSQL lists the applied migrations newer than $1 with their
// recorded kinds (an empty kind when none was recorded).
const appliedKindsSQL = `SELECT g.version_id, coalesce(k.kind, '')
  FROM goose_db_version g LEFT JOIN schema_migration_kinds k ON k.version = g.version_id
 WHERE g.is_applied AND g.version_id > $1
 ORDER BY g.version_id`

// appliedKindsNoTableSQL is appliedKindsSQL on a database without
// schema_migration_kinds (before migration 00047): no kind is recorded.
const appliedKindsNoTableSQL = `SELECT version_id, '' FROM goose_db_version
 WHERE is_applied AND version_id > $1 ORDER BY version_id`

// appliedKinds reads the applied migrations newer than after, each with
// the kind the db sync that applied it recorded.
func appliedKinds(ctx context.Context, q Queryer, after int64) ([]Migration, error) {
	var exists bool
	if err := q.QueryRow(ctx, `SELECT to_regclass('schema_migration_kinds') IS NOT NULL`).Scan(&exists); err != nil {
		return nil, fmt.Errorf("reading migration kinds: %w", err)
	}
	sql := appliedKindsSQL
	if !exists {
		sql = appliedKindsNoTableSQL
	}
	rows, err := q.Query(ctx, sql, after)
	if err != nil {
		return nil, fmt.Errorf("reading migration kinds: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Migration, error) {
		var m Migration
		err := r.Scan(&m.Version, &m.Kind)
		return m, err
	})
	if err != nil {
		return nil, fmt.Errorf("reading migration kinds: %w", err)
	}
	return out, nil
}

// recordKinds writes the kinds of known's migrations the database has
// applied into schema_migration_kinds, so that older binaries can read the
// kinds of migrations they do not know. Nothing on a database without the
// table (before migration 00047).
func recordKinds(ctx context.Context, q *pgx.Conn, known []Migration, have int64) error {
	var versions []int64
	var kinds []string
	for _, m := range known {
		if m.Version <= have {
			versions = append(versions, m.Version)
			kinds = append(kinds, string(m.Kind))
		}
	}
	_, err := q.Exec(ctx, `INSERT INTO schema_migration_kinds (version, kind)
SELECT v, k FROM unnest($1::bigint[], $2::text[]) AS x(v, k)
ON CONFLICT (version) DO UPDATE SET kind = EXCLUDED.kind WHERE schema_migration_kinds.kind <> EXCLUDED.kind`,
		versions, kinds)
	if err != nil && !isUndefinedTable(err) {
		return fmt.Errorf("recording migration kinds: %w", err)
	}
	return nil
}

// SyncOptions tunes Sync.
type SyncOptions struct {
	// Contract applies the contract migrations too, once no live API or
	// conductor runs a binary that knows less than this one's latest
	// migration (otherwise a *StragglersError).
	Contract bool
	// Log gets a line per applied migration (nil: none).
	Log *zap.Logger
}

// SyncResult is what Sync did: the database's version before and after,
// the migrations it applied and those left waiting (the first of them a
// contract migration), oldest first.
type SyncResult struct {
	From, Version int64
	Applied       []Migration
	Waiting       []Migration
}

// ErrStragglers is returned (as a *StragglersError) by Sync with Contract
// while live binaries know less than the contract's target.
var ErrStragglers = errors.New("binaries older than the contract's target are running")

// StragglersError lists the live APIs and conductors whose binaries know
// less than Target, the version `db sync --contract` would bring the
// database to. It matches ErrStragglers with errors.Is.
type StragglersError struct {
	Target     int64
	Stragglers []Binary
}

func (e *StragglersError) Error() string {
	return fmt.Sprintf("%v: %d live process(es) know less than version %d; replace them, then run `metalloc-manage db sync --contract` again",
		ErrStragglers, len(e.Stragglers), e.Target)
}

// Is makes errors.Is(err, ErrStragglers) hold.
func (e *StragglersError) Is(target error) bool { return target == ErrStragglers }

// Sync is `metalloc-manage db sync`: it applies the database's pending
// migrations in order while they are expand and stops before the first
// contract one (SyncResult.Waiting). With opt.Contract it then applies the
// rest, once every live API and conductor (Binaries) reports a binary that
// knows at least this binary's latest migration; otherwise it returns a
// *StragglersError and leaves the contract migrations waiting. A database
// never migrated (version 0) gets every migration at once: no binary can
// run on it, so none needs the old schema. A database newer than this
// binary is ErrSchemaTooNew and left alone. Concurrent callers are
// serialised by goose's session lock (a PostgreSQL advisory lock).
func Sync(ctx context.Context, url string, opt SyncOptions) (SyncResult, error) {
	return syncFS(ctx, url, migrations.FS, opt)
}

// Migrate applies every pending migration, expand and contract, to the
// database at url and returns the resulting version, without looking for
// older binaries: for fresh databases (dev up, tests, the test templates),
// on which nothing runs yet. It logs each applied migration (log may be
// nil). A database newer than this binary is ErrSchemaTooNew, with both
// versions, and left alone.
func Migrate(ctx context.Context, url string, log *zap.Logger) (int64, error) {
	r, err := migrateFS(ctx, url, migrations.FS, modeAll, 0, log)
	return r.Version, err
}

// MigrateTo is Migrate up to version (expand and contract migrations
// alike) and no further: a database as an older release's db sync left it,
// for tests of upgrades.
func MigrateTo(ctx context.Context, url string, version int64, log *zap.Logger) (int64, error) {
	r, err := migrateFS(ctx, url, migrations.FS, modeAll, version, log)
	return r.Version, err
}

// syncFS is Sync for the migrations in fsys (tests give their own).
func syncFS(ctx context.Context, url string, fsys fs.FS, opt SyncOptions) (SyncResult, error) {
	r, err := migrateFS(ctx, url, fsys, modeExpand, 0, opt.Log)
	if err != nil || !opt.Contract || len(r.Waiting) == 0 {
		return r, err
	}
	target := r.Waiting[len(r.Waiting)-1].Version
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return r, openError(err)
	}
	bins, err := Binaries(ctx, conn)
	_ = conn.Close(context.WithoutCancel(ctx))
	if err != nil {
		return r, err
	}
	var late []Binary
	for _, b := range bins {
		if b.Live && b.SchemaVersion < target {
			late = append(late, b)
		}
	}
	if len(late) > 0 {
		return r, &StragglersError{Target: target, Stragglers: late}
	}
	rc, err := migrateFS(ctx, url, fsys, modeAll, 0, opt.Log)
	rc.From, rc.Applied = r.From, append(r.Applied, rc.Applied...)
	return rc, err
}

// Migrations run while older binaries serve traffic (expand migrations,
// during a rolling upgrade). Each is one transaction that takes strong
// locks (ALTER TABLE, CREATE OR REPLACE VIEW or FUNCTION) one after another,
// in its own order, while the running binaries' transactions take weaker
// locks on the same objects in theirs (conductor/doc.go, "Lock order"). Two
// things follow, and migrateFS handles both:
//
//   - a deadlock (40P01): a migration holding allocation_events while it
//     waits for free_nodes, a conductor's pick holding free_nodes while it
//     waits to write an event. PostgreSQL aborts one of the two after
//     deadlock_timeout (1 s by default); either side runs again.
//   - a queue: a migration waiting for a lock makes every later request on
//     that table wait behind it. Its statements therefore run with
//     lock_timeout migrationLockTimeout: after that it gives up (55P03),
//     releasing what it holds, and runs again.
//
// A migration that fails either way has been rolled back whole (goose runs
// each in its own transaction, and no metalloc migration is marked NO
// TRANSACTION), so migrateFS applies it again from the start, after a
// pause that grows from 100 ms to 5 s, for up to migrationRetryFor in all.
// Any other error ends the run at once.
const (
	// migrationLockTimeout is the lock_timeout of migrations' statements:
	// how long a migration may make other requests queue behind it.
	migrationLockTimeout = 2 * time.Second
	// migrationRetryFor bounds how long migrateFS goes on applying again a
	// migration that deadlocked or timed out on a lock.
	migrationRetryFor = 2 * time.Minute
)

// openMigrationSQL opens url for goose (database/sql over pgx), with
// lock_timeout migrationLockTimeout on every session.
func openMigrationSQL(url string) (*sql.DB, error) {
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("parsing database url: %w", err)
	}
	cfg.RuntimeParams["lock_timeout"] = strconv.FormatInt(max(1, migrationLockTimeout.Milliseconds()), 10)
	return stdlib.OpenDB(*cfg), nil
}

// upTo is prov.UpTo(target), applying again, as the comment above
// migrationLockTimeout says, a migration that failed with a transient
// error (IsTransient). It returns every migration applied, over all
// attempts, and the last error (a *goose.PartialError when some
// migration failed).
func upTo(ctx context.Context, prov *goose.Provider, target int64, log *zap.Logger) ([]*goose.MigrationResult, error) {
	var applied []*goose.MigrationResult
	deadline := time.Now().Add(migrationRetryFor)
	pause := 100 * time.Millisecond
	for attempt := 1; ; attempt++ {
		results, err := prov.UpTo(ctx, target)
		applied = append(applied, results...)
		var partial *goose.PartialError
		if errors.As(err, &partial) {
			applied = append(applied, partial.Applied...)
		}
		if err == nil || !IsTransient(err) || ctx.Err() != nil || time.Now().Add(pause).After(deadline) {
			return applied, err
		}
		if log != nil {
			log.Warn("migration failed on a lock, applying it again", zap.Int("attempt", attempt),
				zap.Duration("pause", pause), zap.Error(err))
		}
		select {
		case <-ctx.Done():
			return applied, err
		case <-time.After(pause + rand.N(pause/2)):
		}
		pause = min(2*pause, 5*time.Second)
	}
}

// migrateMode says how far migrateFS goes.
type migrateMode int

const (
	modeAll    migrateMode = iota // every pending migration
	modeExpand                    // up to the first contract one (all on a database never migrated)
)

// migrateFS applies fsys's pending migrations to the database at url as
// mode says, none beyond limit (0: no limit), records their kinds, and
// reports what it did.
func migrateFS(ctx context.Context, url string, fsys fs.FS, mode migrateMode, limit int64, log *zap.Logger) (SyncResult, error) {
	known, err := parseMigrations(fsys)
	if err != nil {
		return SyncResult{}, err
	}
	var want int64
	if len(known) > 0 {
		want = known[len(known)-1].Version
	}
	sqldb, err := openMigrationSQL(url)
	if err != nil {
		return SyncResult{}, err
	}
	defer sqldb.Close()
	locker, err := newLocker()
	if err != nil {
		return SyncResult{}, err
	}
	prov, err := goose.NewProvider(goose.DialectPostgres, sqldb, fsys, goose.WithSessionLocker(locker))
	if err != nil {
		return SyncResult{}, fmt.Errorf("loading migrations: %w", err)
	}
	var have int64
	if err := sqldb.QueryRowContext(ctx, schemaVersionSQL).Scan(&have); err != nil && !isUndefinedTable(err) {
		return SyncResult{}, fmt.Errorf("reading schema version: %w", err)
	}
	// An older binary must not report a newer schema "up to date".
	if have > want {
		return SyncResult{From: have, Version: have}, fmt.Errorf("%w: database is at version %d, this binary knows up to %d; run the db sync of the newer metalloc",
			ErrSchemaTooNew, have, want)
	}
	res := SyncResult{From: have}
	target := want
	if limit > 0 {
		target = min(target, limit)
	}
	if mode == modeExpand && have > 0 {
		for _, m := range known {
			if m.Version > have && m.Kind != KindExpand {
				target = min(target, m.Version-1)
				break
			}
		}
	}
	var results []*goose.MigrationResult
	if target > have {
		results, err = upTo(ctx, prov, target, log)
	}
	for _, r := range results {
		if log != nil {
			log.Info("applied migration", zap.Int64("version", r.Source.Version),
				zap.String("file", r.Source.Path), zap.Duration("took", r.Duration))
		}
		if i := slices.IndexFunc(known, func(m Migration) bool { return m.Version == r.Source.Version }); i >= 0 {
			res.Applied = append(res.Applied, known[i])
		}
	}
	if err != nil {
		return res, fmt.Errorf("applying migrations: %w", err)
	}
	if res.Version, err = prov.GetDBVersion(ctx); err != nil {
		return res, fmt.Errorf("reading schema version: %w", err)
	}
	for _, m := range known {
		if m.Version > res.Version {
			res.Waiting = append(res.Waiting, m)
		}
	}
	conn, err := sqldb.Conn(ctx)
	if err != nil {
		return res, fmt.Errorf("recording migration kinds: %w", err)
	}
	defer conn.Close()
	err = conn.Raw(func(dc any) error {
		return recordKinds(ctx, dc.(interface{ Conn() *pgx.Conn }).Conn(), known, res.Version)
	})
	return res, err
}
