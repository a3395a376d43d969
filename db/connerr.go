package db

import (
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"syscall"

	"github.com/jackc/pgx/v5/pgconn"
)

// tlsRefused is pgx's message when the server answers an SSLRequest with
// "no TLS here".
const tlsRefused = "tls error: server refused TLS connection"

// connectError is a *pgconn.ConnectError described for a person: one line
// per address tried, what happened there. It wraps the original, so that
// errors.As and IsUnavailable see pgx's error as before.
type connectError struct {
	msg string
	err error
}

func (e *connectError) Error() string { return e.msg }
func (e *connectError) Unwrap() error { return e.err }

// DescribeConnectError rewrites the pgx connect error inside err (a
// *pgconn.ConnectError, possibly wrapped) so that it says what happened,
// and returns err unchanged when there is none. pgx lists every attempt,
// and under libpq's default sslmode=prefer it first tries TLS: against a
// server without TLS the first line was "tls error: server refused TLS
// connection" while the real cause (connection refused, "database ... does
// not exist") came after it, or twice (the plaintext retry of a refused
// connection). The rewrite drops that TLS refusal when a plaintext attempt
// at the same address followed, drops repeated lines, and names each
// address with what it answered:
//
//	cannot connect to the database (user=metalloc database=metalloc): 127.0.0.1:5432: connection refused (is PostgreSQL running and listening there?)
//	cannot connect to the database (user=metalloc database=nosuch): 127.0.0.1:5432: the server answered: FATAL: database "nosuch" does not exist (SQLSTATE 3D000)
//
// Messages carry the user, database and addresses, never the password (pgx
// does not put it in its errors either). The text around the connect error
// in err ("connecting to database: ...") is kept.
func DescribeConnectError(err error) error {
	var ce *pgconn.ConnectError
	var done *connectError
	if err == nil || !errors.As(err, &ce) || errors.As(err, &done) {
		return err
	}
	var attempts []error
	switch inner := errors.Unwrap(ce).(type) {
	case interface{ Unwrap() []error }:
		attempts = inner.Unwrap()
	case nil:
		return err
	default:
		attempts = []error{inner}
	}
	type line struct{ addr, what string }
	var lines []line
	seen := map[line]bool{}
	for _, a := range attempts {
		l := line{}
		l.addr, l.what = describeAttempt(a)
		if !seen[l] {
			seen[l] = true
			lines = append(lines, l)
		}
	}
	var out []string
	for i, l := range lines {
		if l.what == tlsRefused && slices.ContainsFunc(lines[i+1:], func(o line) bool { return o.addr == l.addr }) {
			continue // sslmode=prefer: the plaintext attempt that followed says more
		}
		if l.addr != "" {
			out = append(out, l.addr+": "+l.what)
		} else {
			out = append(out, l.what)
		}
	}
	msg := fmt.Sprintf("cannot connect to the database (user=%s database=%s):", ce.Config.User, ce.Config.Database)
	if len(out) == 1 {
		msg += " " + out[0]
	} else {
		msg += "\n\t" + strings.Join(out, "\n\t")
	}
	return &connectError{msg: strings.Replace(err.Error(), ce.Error(), msg, 1), err: err}
}

// describeAttempt splits one attempt's error of pgx ("ADDR (HOST): dial
// error: dial tcp ADDR: connect: connection refused") into its address and
// what happened there, in words.
func describeAttempt(err error) (addr, what string) {
	msg := err.Error()
	if i := strings.Index(msg, " ("); i > 0 {
		if j := strings.Index(msg[i:], "): "); j > 0 {
			addr, msg = msg[:i], msg[i+j+3:]
		}
	}
	var pgErr *pgconn.PgError
	var dnsErr *net.DNSError
	switch {
	case errors.As(err, &dnsErr):
		return addr, fmt.Sprintf("cannot resolve the host name %s: %s", dnsErr.Name, dnsErr.Err)
	case errors.As(err, &pgErr):
		return addr, "the server answered: " + pgErr.Error()
	case errors.Is(err, syscall.ECONNREFUSED):
		return addr, "connection refused (is PostgreSQL running and listening there?)"
	case pgconn.Timeout(err):
		return addr, "no answer within the connect timeout (" + msg + ")"
	}
	return addr, msg
}
