// Package dbtest gives each test its own PostgreSQL database with metalloc's
// schema, cloned in a fraction of a second from a migrated template database.
//
// The server comes from the environment variable DATABASE_URL (`make test`
// starts a private one and sets it); the database that URL names is only used
// as the maintenance connection for creating and dropping databases.
package dbtest

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/metalloc/metalloc/db"
	"github.com/metalloc/metalloc/migrations"
)

// templateLockKey is the pg_advisory_lock key (on the maintenance database)
// serialising template creation across test processes.
const templateLockKey int64 = 0x6d65_7461_6c6c_6f63 // "metalloc"

var (
	tmplOnce sync.Once
	tmplName string
	tmplErr  error
)

// New returns a pool (MaxConns 10) on a fresh database cloned from a migrated
// template; the pool is closed and the database dropped at t.Cleanup.
func New(t testing.TB) *pgxpool.Pool {
	t.Helper()
	u := NewURL(t)
	pool, err := db.Open(t.Context(), u, db.PoolOptions{MaxConns: 10, ApplicationName: "dbtest"})
	if err != nil {
		t.Fatalf("dbtest: %v", err)
	}
	// Cleanups run last-registered first: the pool closes before the drop.
	t.Cleanup(pool.Close)
	return pool
}

// NewURL is like New but returns the database URL instead (for tests that
// spawn processes or open their own pools); the database is dropped at
// t.Cleanup, terminating any connections still open to it.
func NewURL(t testing.TB) string {
	t.Helper()
	server := serverURL(t)
	ctx := t.Context()
	tmplOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		tmplName, tmplErr = ensureTemplate(ctx, server)
	})
	if tmplErr != nil {
		t.Fatalf("dbtest: preparing template database: %v", tmplErr)
	}
	name := "metalloc_test_" + randomHex(8)
	if err := createFromTemplate(ctx, server, name, tmplName); err != nil {
		t.Fatalf("dbtest: %v", err)
	}
	return dropAtCleanup(t, server, name)
}

// NewEmptyURL returns the URL of a fresh database without metalloc's schema
// (never migrated), dropped at t.Cleanup: for the commands that must
// recognise one.
func NewEmptyURL(t testing.TB) string {
	t.Helper()
	server := serverURL(t)
	name := "metalloc_test_" + randomHex(8)
	if err := exec(t.Context(), server, "CREATE DATABASE "+ident(name)); err != nil {
		t.Fatalf("dbtest: creating %s: %v", name, err)
	}
	return dropAtCleanup(t, server, name)
}

// NewURLAt returns the URL of a fresh database migrated up to version and
// no further (db.MigrateTo), dropped at t.Cleanup: a database as an older
// release left it, for tests of upgrades. It runs the migrations (seconds),
// where NewURL clones a template.
func NewURLAt(t testing.TB, version int64) string {
	t.Helper()
	u := NewEmptyURL(t)
	if _, err := db.MigrateTo(t.Context(), u, version, nil); err != nil {
		t.Fatalf("dbtest: migrating to %d: %v", version, err)
	}
	return u
}

// serverURL is $DATABASE_URL, the test server's maintenance database.
func serverURL(t testing.TB) string {
	t.Helper()
	server := os.Getenv("DATABASE_URL")
	if server == "" {
		t.Fatal("DATABASE_URL is not set: run the tests with `make test`, which starts a private PostgreSQL")
	}
	return server
}

// dropAtCleanup drops database name at t.Cleanup, terminating the
// connections still open to it, and returns its URL.
func dropAtCleanup(t testing.TB, server, name string) string {
	t.Helper()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := exec(ctx, server, "DROP DATABASE IF EXISTS "+ident(name)+" WITH (FORCE)"); err != nil {
			t.Errorf("dbtest: dropping %s: %v", name, err)
		}
	})
	u, err := withDatabase(server, name)
	if err != nil {
		t.Fatalf("dbtest: %v", err)
	}
	return u
}

// ensureTemplate returns the name of the template database for the embedded
// migrations, creating and migrating it if no ready one exists. A template is
// ready once marked IS_TEMPLATE; a leftover unmarked one (a crashed run) is
// dropped and rebuilt.
func ensureTemplate(ctx context.Context, server string) (string, error) {
	hash, err := migrationsHash()
	if err != nil {
		return "", err
	}
	name := "metalloc_tmpl_" + hash[:12]

	conn, err := pgx.Connect(ctx, server)
	if err != nil {
		return "", fmt.Errorf("connecting to %s: %w", redact(server), err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "SELECT pg_advisory_lock($1)", templateLockKey); err != nil {
		return "", fmt.Errorf("locking: %w", err)
	}
	// Closing the connection would release the lock too; unlock explicitly
	// so that a slow close does not hold up other test binaries.
	defer func() { _, _ = conn.Exec(ctx, "SELECT pg_advisory_unlock($1)", templateLockKey) }()

	var ready *bool
	err = conn.QueryRow(ctx, "SELECT datistemplate FROM pg_database WHERE datname = $1", name).Scan(&ready)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return "", fmt.Errorf("looking up %s: %w", name, err)
	}
	if ready != nil && *ready {
		return name, nil
	}
	if ready != nil {
		if _, err := conn.Exec(ctx, "DROP DATABASE "+ident(name)+" WITH (FORCE)"); err != nil {
			return "", fmt.Errorf("dropping unfinished %s: %w", name, err)
		}
	}
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+ident(name)); err != nil {
		return "", fmt.Errorf("creating %s: %w", name, err)
	}
	u, err := withDatabase(server, name)
	if err != nil {
		return "", err
	}
	// Migrate closes all its connections before returning, as CREATE
	// DATABASE ... TEMPLATE requires.
	if _, err := db.Migrate(ctx, u, nil); err != nil {
		return "", fmt.Errorf("migrating %s: %w", name, err)
	}
	// Forbid connections so that a stray session (e.g. psql) cannot block
	// cloning, and mark the template ready.
	if _, err := conn.Exec(ctx, "ALTER DATABASE "+ident(name)+" WITH ALLOW_CONNECTIONS false IS_TEMPLATE true"); err != nil {
		return "", fmt.Errorf("marking %s ready: %w", name, err)
	}
	return name, nil
}

// migrationsHash is the hex sha256 of every embedded migration's name and
// contents, so that any change to them selects a new template.
func migrationsHash() (string, error) {
	h := sha256.New()
	err := fs.WalkDir(migrations.FS, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := fs.ReadFile(migrations.FS, p)
		if err != nil {
			return err
		}
		fmt.Fprintf(h, "%s\x00%d\x00", p, len(b))
		h.Write(b)
		return nil
	})
	if err != nil {
		return "", fmt.Errorf("hashing migrations: %w", err)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// createFromTemplate clones tmpl into name, retrying while another session
// briefly holds the template (SQLSTATE 55006 object_in_use).
func createFromTemplate(ctx context.Context, server, name, tmpl string) error {
	sql := "CREATE DATABASE " + ident(name) + " TEMPLATE " + ident(tmpl)
	var err error
	for attempt := 1; attempt <= 5; attempt++ {
		err = exec(ctx, server, sql)
		var pgErr *pgconn.PgError
		if !errors.As(err, &pgErr) || pgErr.Code != "55006" {
			break
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Duration(attempt) * 100 * time.Millisecond):
		}
	}
	if err != nil {
		return fmt.Errorf("creating database %s from %s: %w", name, tmpl, err)
	}
	return nil
}

// exec runs one statement on a short-lived maintenance connection.
func exec(ctx context.Context, server, sql string) error {
	conn, err := pgx.Connect(ctx, server)
	if err != nil {
		return fmt.Errorf("connecting to %s: %w", redact(server), err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	_, err = conn.Exec(ctx, sql)
	return err
}

// withDatabase returns server (a URL or key=value DSN) naming database name.
func withDatabase(server, name string) (string, error) {
	if strings.HasPrefix(server, "postgres://") || strings.HasPrefix(server, "postgresql://") {
		u, err := url.Parse(server)
		if err != nil {
			return "", fmt.Errorf("parsing DATABASE_URL: %w", err)
		}
		u.Path, u.RawPath = "/"+name, ""
		return u.String(), nil
	}
	return server + " dbname=" + name, nil // later keys override earlier ones
}

func redact(server string) string {
	if u, err := url.Parse(server); err == nil && u.User != nil {
		return u.Redacted()
	}
	return "DATABASE_URL"
}

func ident(name string) string { return pgx.Identifier{name}.Sanitize() }

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
