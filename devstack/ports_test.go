package devstack

import (
	"errors"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// dev up must not report "metalloc is up" when another process answers on
// its port: Start fails with ErrPortBusy, naming the address and the holder.
func TestStartRefusesABusyPort(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	srv := &http.Server{Handler: http.NotFoundHandler()}
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { _ = srv.Close() })
	addr := l.Addr().String()

	_, err = Start(t.Context(), Options{DatabaseURL: "postgres://unused", APIListen: addr, BinDir: t.TempDir()})
	require.True(t, errors.Is(err, ErrPortBusy), "%v", err)
	require.ErrorContains(t, err, addr)
	require.ErrorContains(t, err, "held by pid "+strconv.Itoa(os.Getpid()))
}

func TestListensOn(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	port := l.Addr().(*net.TCPAddr).Port
	require.True(t, listensOn(os.Getpid(), port))
	require.False(t, listensOn(os.Getpid(), port+1)) // a port nobody here holds
	require.Contains(t, ListeningPorts(os.Getpid()), port)
	require.NotContains(t, ListeningPorts(os.Getpid()), port+1)
}

// A process that exits during the start is reported with the end of its
// log, where it says why (CI keeps the test's output, not its log files).
func TestExitedErrorQuotesTheLog(t *testing.T) {
	log := filepath.Join(t.TempDir(), "conductor-1.log")
	var lines []string
	for i := range 30 {
		lines = append(lines, "line "+strconv.Itoa(i))
	}
	require.NoError(t, os.WriteFile(log, []byte(strings.Join(lines, "\n")+"\n"), 0o644))
	err := (&Process{Name: "conductor-1", LogPath: log}).exitedError()
	require.ErrorContains(t, err, "conductor-1 exited")
	require.ErrorContains(t, err, log)
	require.ErrorContains(t, err, "line 20\n")
	require.ErrorContains(t, err, "line 29")
	require.NotContains(t, err.Error(), "line 19")
}
