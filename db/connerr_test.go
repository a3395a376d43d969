package db_test

import (
	"context"
	"net"
	"net/url"
	"os"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/metalloc/metalloc/db"
)

// TestOpenErrorSaysWhatHappened: a database that does not exist on a
// server without TLS, under libpq's default sslmode=prefer, is "the
// server answered: FATAL: database ... does not exist", not first "tls
// error: server refused TLS connection" (pgx's TLS attempt); a closed port
// is "connection refused" at that address, once. Neither message holds the
// password, and both still count as unavailable.
func TestOpenErrorSaysWhatHappened(t *testing.T) {
	t.Parallel()
	base := os.Getenv("DATABASE_URL")
	if base == "" {
		t.Skip("DATABASE_URL is not set: run under metalloc-manage dev exec")
	}
	u, err := url.Parse(base)
	require.NoError(t, err)
	u.User = url.UserPassword(u.User.Username(), "s3cret-pw")
	q := u.Query()
	q.Del("sslmode") // pgx's default: prefer
	u.RawQuery = q.Encode()
	u.Path = "/no_such_database"

	_, err = db.Open(context.Background(), u.String(), db.PoolOptions{MaxConns: 1})
	require.Error(t, err)
	msg := err.Error()
	require.NotContains(t, msg, "tls error", msg)
	require.NotContains(t, msg, "s3cret-pw")
	require.Regexp(t, `^cannot connect to the database \(user=\S+ database=no_such_database\): `+
		`127\.0\.0\.1:\d+: the server answered: FATAL: (database "no_such_database" does not exist \(SQLSTATE 3D000\)|password authentication failed.*)$`, msg)

	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	port := l.Addr().(*net.TCPAddr).Port
	require.NoError(t, l.Close())
	u.Host = "127.0.0.1:" + strconv.Itoa(port)
	_, err = db.Open(context.Background(), u.String(), db.PoolOptions{MaxConns: 1})
	require.Error(t, err)
	require.Equal(t, "cannot connect to the database (user="+u.User.Username()+" database=no_such_database): 127.0.0.1:"+
		strconv.Itoa(port)+": connection refused (is PostgreSQL running and listening there?)", err.Error())
	require.True(t, db.IsUnavailable(err))
}
