package main

import (
	"bytes"
	"context"
	"strconv"
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
