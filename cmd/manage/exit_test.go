package main

import (
	"bytes"
	"context"
	"net"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/metalloc/metalloc/cmd/internal/cli"
	"github.com/metalloc/metalloc/db"
	"github.com/metalloc/metalloc/db/dbtest"
)

// run runs metalloc-manage args as main does and returns stdout, stderr
// and the exit status.
func run(args ...string) (string, string, int) {
	root := newRoot()
	var out, stderr bytes.Buffer
	root.SetOut(&out)
	code := cli.Run(root, args, &stderr)
	return out.String(), stderr.String(), code
}

// TestUnknownSubcommandExits2: a mistyped command at any depth is exit 2
// with cobra's suggestion, not the group's help and exit 0 (an upgrade
// script running `db snyc` would never migrate); a group without its
// command is exit 2 too; --help stays 0.
func TestUnknownSubcommandExits2(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args    []string
		message string
	}{
		{[]string{"db", "snyc"}, "unknown command \"snyc\" for \"metalloc-manage db\"\n\nDid you mean this?\n\tsync"},
		{[]string{"snyc"}, "unknown command \"snyc\" for \"metalloc-manage\""},
		{[]string{"status", "upgrade-chek"}, "Did you mean this?\n\tupgrade-check"},
		{[]string{"config", "shwo"}, "Did you mean this?\n\tshow"},
		{[]string{"db"}, "\"metalloc-manage db\" needs a command: "},
		{[]string{"db", "sync", "extra"}, "unknown command \"extra\" for \"metalloc-manage db sync\""},
		{[]string{"db", "sync", "--no-such-flag"}, "unknown flag: --no-such-flag"},
	} {
		out, stderr, code := run(tc.args...)
		require.Equal(t, cli.ExitUsage, code, "%v: %s%s", tc.args, out, stderr)
		require.Contains(t, stderr, tc.message, tc.args)
	}
	out, _, code := run("db", "--help")
	require.Equal(t, 0, code)
	require.Contains(t, out, "sync")
}

// TestHelpUnknownTopicExits2: `help nosuch` is exit 2 with the
// unknown-command message, as `nosuch` is (it printed the root's help and
// exited 0); `help db snyc` suggests sync; `help db sync` is db sync's help.
func TestHelpUnknownTopicExits2(t *testing.T) {
	t.Parallel()
	_, stderr, code := run("help", "nosuch")
	require.Equal(t, cli.ExitUsage, code)
	require.Equal(t, "metalloc-manage: unknown command \"nosuch\" for \"metalloc-manage\"\nRun 'metalloc-manage --help' for usage.\n", stderr)
	_, stderr, code = run("help", "db", "snyc")
	require.Equal(t, cli.ExitUsage, code)
	require.Contains(t, stderr, "unknown command \"snyc\" for \"metalloc-manage db\"\n\nDid you mean this?\n\tsync")
	out, _, code := run("help", "db", "sync")
	require.Equal(t, 0, code)
	require.Contains(t, out, "metalloc-manage db sync [--contract]")
}

// TestSubcommandHelpShowsFlagsItReads: a subcommand's --help lists the
// configuration flags of the sections it reads and names --help-all for
// the rest (db sync --help was 63 lines, mostly ironic.*, keystone.*,
// placement_backend.*); --help-all (also `help CMD --help-all`) lists
// them all; every flag is still accepted.
func TestSubcommandHelpShowsFlagsItReads(t *testing.T) {
	t.Parallel()
	out, _, code := run("db", "sync", "--help")
	require.Equal(t, 0, code)
	require.LessOrEqual(t, strings.Count(out, "\n"), 30, out)
	require.Contains(t, out, "--database.url")
	require.Contains(t, out, "--log.level")
	require.Contains(t, out, "'metalloc-manage db sync --help-all'")
	require.NotContains(t, out, "--ironic.")
	require.NotContains(t, out, "--keystone.")
	require.NotContains(t, out, "--api.")

	for _, args := range [][]string{{"db", "sync", "--help-all"}, {"help", "db", "sync", "--help-all"}} {
		all, _, code := run(args...)
		require.Equal(t, 0, code, args)
		require.Contains(t, all, "--ironic.endpoint", args)
		require.Contains(t, all, "--placement_backend.cpu_allocation_ratio", args)
		require.NotContains(t, all, "--help-all'", args)
	}

	out, _, code = run("allocation", "create", "--help")
	require.Equal(t, 0, code)
	require.Contains(t, out, "--api.auth_strategy")
	require.Contains(t, out, "--keystone.auth_url")
	require.NotContains(t, out, "--database.url")
	require.NotContains(t, out, "--ironic.")

	out, _, code = run("status", "upgrade-check", "--help")
	require.Equal(t, 0, code)
	require.Contains(t, out, "--placement_backend.cpu_allocation_ratio")

	// Hidden from help, still accepted: the flag reaches the command.
	_, stderr, code := run("db", "version", "--ironic.timeout", "5")
	require.Equal(t, cli.ExitUsage, code, stderr)
	require.Contains(t, stderr, "invalid argument \"5\" for \"--ironic.timeout\" flag")
}

// TestDatabaseUnreachableMessage: db sync (through database/sql) and db
// version (a pool) against a closed port say "connection refused" at the
// address once (pgx listed its TLS attempt and the plaintext retry), and
// never the password.
func TestDatabaseUnreachableMessage(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	require.NoError(t, l.Close())
	url := "postgres://metalloc:s3cret-pw@" + addr + "/metalloc"
	for _, args := range [][]string{{"db", "sync"}, {"db", "version"}} {
		_, stderr, code := run(append(args, "--database.url", url)...)
		require.Equal(t, 1, code, args)
		require.Regexp(t, `^metalloc-manage: (reading schema version: )?cannot connect to the database \(user=metalloc database=metalloc\): `+
			regexp.QuoteMeta(addr)+`: connection refused \(is PostgreSQL running and listening there\?\)\n$`, stderr, args)
		require.NotContains(t, stderr, "s3cret-pw", args)
	}
}

// TestConfigCheckDatabaseURL: without database.url, config check warns
// naming the binaries that need it ("configuration OK with 1 warning(s)",
// exit 0: the daemons may have it in their own environment); with --for a
// binary that reads it, it is a problem (exit 1); a database command
// without it exits 78 as the daemons do. (It said "configuration OK".)
func TestConfigCheckDatabaseURL(t *testing.T) {
	t.Setenv("DATABASE_URL", "")
	t.Setenv("METALLOC_DATABASE_URL", "")
	out, _, code := run("config", "check")
	require.Equal(t, 0, code, out)
	require.Equal(t, "warning: database.url is not set; metalloc-api, metalloc-conductor, metalloc-placement and metalloc-manage need it where they run: "+
		"set database.url in the file, METALLOC_DATABASE_URL or DATABASE_URL (or check with --for BINARY, where a missing URL is a problem)\n"+
		"configuration OK with 1 warning(s): defaults and environment\n", out)

	out, _, code = run("config", "check", "--for", "metalloc-api,conductor")
	require.Equal(t, 1, code, out)
	require.Equal(t, "problem: database.url is not set and metalloc-api and metalloc-conductor need it: "+
		"set database.url in the file, METALLOC_DATABASE_URL or DATABASE_URL\n1 problem(s) in the configuration\n", out)

	_, stderr, code := run("config", "check", "--for", "nova")
	require.Equal(t, cli.ExitUsage, code)
	require.Contains(t, stderr, `--for "nova": not a metalloc binary`)

	out, _, code = run("config", "check", "--for", "api", "--database.url", "postgres://metalloc@db/metalloc")
	require.Equal(t, 0, code, out)
	require.Equal(t, "configuration OK: defaults and environment\n", out)

	_, stderr, code = run("db", "version")
	require.Equal(t, cli.ExitConfig, code, stderr)
	require.Contains(t, stderr, "database.url is not set")
}

// TestVersionFlag: --version prints the binary's version, commit, build
// date and Go version on one line.
func TestVersionFlag(t *testing.T) {
	t.Parallel()
	out, _, code := run("--version")
	require.Equal(t, 0, code)
	require.Regexp(t, `^metalloc-manage \S+ \(commit \S+, built \S+, go\S+ \S+/\S+\)\n$`, out)
}

// TestDBSyncRefusesNewerSchema: an older binary's db sync against a
// database migrated by a newer one fails naming both versions (exit 2)
// and changes nothing, instead of reporting "up to date".
func TestDBSyncRefusesNewerSchema(t *testing.T) {
	t.Parallel()
	url := dbtest.NewURL(t)
	pool, err := db.Open(context.Background(), url, db.PoolOptions{MaxConns: 2})
	require.NoError(t, err)
	defer pool.Close()
	want, err := db.LatestVersion()
	require.NoError(t, err)
	_, err = pool.Exec(context.Background(), `INSERT INTO goose_db_version (version_id, is_applied) VALUES ($1, true)`, want+1)
	require.NoError(t, err)

	_, stderr, code := run("db", "sync", "--database.url", url)
	require.Equal(t, cli.ExitUsage, code, stderr)
	require.Contains(t, stderr, "database is at version "+strconv.FormatInt(want+1, 10)+", this binary knows up to "+strconv.FormatInt(want, 10))

	out, _, code := run("db", "version", "--database.url", url)
	require.Equal(t, cli.ExitUsage, code)
	require.Contains(t, out, "database: "+strconv.FormatInt(want+1, 10)+"\nbinary: "+strconv.FormatInt(want, 10)+"\n")
	require.Contains(t, out, "upgrade metalloc")
}

// TestCommandsOnEmptyDatabase: on a database never migrated, db version
// says so (database 0), and upgrade-check, online-data-migrations and
// topology say in one line that db sync comes first, exit 2, without SQL
// errors; after db sync the versions agree.
func TestCommandsOnEmptyDatabase(t *testing.T) {
	t.Parallel()
	url := dbtest.NewEmptyURL(t)
	want, err := db.LatestVersion()
	require.NoError(t, err)
	w := strconv.FormatInt(want, 10)

	out, _, code := run("db", "version", "--database.url", url)
	require.Equal(t, cli.ExitUsage, code, out)
	require.Equal(t, "database: 0\nbinary: "+w+"\nthe database needs `metalloc-manage db sync`\n", out)

	for _, args := range [][]string{{"status", "upgrade-check"}, {"db", "online-data-migrations"}, {"topology", "show"}} {
		out, stderr, code := run(append(args, "--database.url", url)...)
		require.Equal(t, cli.ExitUsage, code, "%v: %s%s", args, out, stderr)
		require.Empty(t, out, args)
		require.Equal(t, "metalloc-manage: database schema is outdated: database is at version 0, this binary needs "+w+
			"; run `metalloc-manage db sync`\n", stderr, args)
		require.NotContains(t, stderr, "SQLSTATE", args)
	}

	_, stderr, code := run("db", "sync", "--database.url", url)
	require.Equal(t, 0, code, stderr)
	out, _, code = run("db", "version", "--database.url", url)
	require.Equal(t, 0, code, out)
	require.Equal(t, "database: "+w+"\nbinary: "+w+"\n", out)
}

// TestDBSyncContract: on a database an older release left before a
// contract migration (43) followed by expand ones, db sync applies nothing
// and says what waits (exit 0); db sync --contract refuses while a live
// conductor of that release runs, listing it (exit 2, nothing applied);
// once it stopped, --contract applies the rest. status versions lists the
// registered processes.
func TestDBSyncContract(t *testing.T) {
	t.Parallel()
	url := dbtest.NewURLAt(t, 42)
	want, err := db.LatestVersion()
	require.NoError(t, err)
	w := strconv.FormatInt(want, 10)

	out, stderr, code := run("db", "sync", "--database.url", url)
	require.Equal(t, 0, code, stderr)
	require.Contains(t, out, "database at version 42; "+strconv.FormatInt(want-42, 10)+
		" migration(s) wait, the first of them contract (migrations 43.."+w+"): run `metalloc-manage db sync --contract`")
	out, _, code = run("db", "version", "--database.url", url)
	require.Equal(t, cli.ExitUsage, code, out)
	require.Equal(t, "database: 42\nbinary: "+w+"\nthe database needs `metalloc-manage db sync --contract`\n", out)

	pool, err := db.Open(context.Background(), url, db.PoolOptions{MaxConns: 2})
	require.NoError(t, err)
	defer pool.Close()
	_, err = pool.Exec(context.Background(), `INSERT INTO conductors (hostname, version) VALUES ('old-conductor', '0.9')`)
	require.NoError(t, err)
	out, stderr, code = run("db", "sync", "--contract", "--database.url", url)
	require.Equal(t, cli.ExitUsage, code, out+stderr)
	require.Contains(t, out, "contract migration(s) wait (migrations 43.."+w+"); these processes run binaries that know less than version "+w)
	require.Regexp(t, `(?m)^\| conductor \| old-conductor \| 0 +\| 0\.9 +\| 0 +\|`, out)
	require.Contains(t, stderr, "binaries older than the contract's target are running: 1 live process(es) know less than version "+w)
	have, err := db.SchemaVersion(context.Background(), pool)
	require.NoError(t, err)
	require.Equal(t, int64(42), have, "nothing applied")

	_, err = pool.Exec(context.Background(), `UPDATE conductors SET online = false`)
	require.NoError(t, err)
	_, stderr, code = run("db", "sync", "--contract", "--database.url", url)
	require.Equal(t, 0, code, stderr)
	out, _, code = run("db", "version", "--database.url", url)
	require.Equal(t, 0, code, out)
	require.Equal(t, "database: "+w+"\nbinary: "+w+"\n", out)

	_, err = pool.Exec(context.Background(), `INSERT INTO api_servers (hostname, pid, service, version, schema_version)
VALUES ('api-1', 42, 'api', '1.0', $1)`, want)
	require.NoError(t, err)
	out, stderr, code = run("status", "versions", "-f", "value", "-c", "kind", "-c", "hostname", "-c", "schema_version", "-c", "live",
		"--database.url", url)
	require.Equal(t, 0, code, stderr)
	require.Equal(t, "api api-1 "+w+" True\nconductor old-conductor 0 False\n", out)

	// A newer release's expand migration: this binary is inside its window.
	next := strconv.FormatInt(want+1, 10)
	_, err = pool.Exec(context.Background(), `INSERT INTO goose_db_version (version_id, is_applied) VALUES ($1, true);`, want+1)
	require.NoError(t, err)
	_, err = pool.Exec(context.Background(), `INSERT INTO schema_migration_kinds (version, kind) VALUES ($1, 'expand')`, want+1)
	require.NoError(t, err)
	out, _, code = run("db", "version", "--database.url", url)
	require.Equal(t, 0, code, out)
	require.Equal(t, "database: "+next+"\nbinary: "+w+"\ninside this binary's window: the migrations it does not know are expand\n", out)
}
