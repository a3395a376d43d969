package cli

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"
)

// fakeNotifySocket listens where NOTIFY_SOCKET points and returns the
// datagrams systemd would receive.
func fakeNotifySocket(t *testing.T) <-chan string {
	t.Helper()
	dir, err := os.MkdirTemp("", "sd") // short: unix socket paths are limited to 108 bytes
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	path := filepath.Join(dir, "notify")
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	t.Setenv("NOTIFY_SOCKET", path)
	out := make(chan string, 100)
	go func() {
		buf := make([]byte, 4096)
		for {
			n, err := conn.Read(buf)
			if err != nil {
				close(out)
				return
			}
			out <- string(buf[:n])
		}
	}()
	return out
}

// nextNotify returns the next message sent to the fake systemd.
func nextNotify(t *testing.T, msgs <-chan string) string {
	t.Helper()
	select {
	case m := <-msgs:
		return m
	case <-time.After(30 * time.Second):
		t.Fatal("no sd_notify message")
		return ""
	}
}

func TestSystemdReadyStoppingOrder(t *testing.T) {
	msgs := fakeNotifySocket(t)
	t.Setenv("WATCHDOG_USEC", "")
	ctx, cancel := context.WithCancel(context.Background())
	sd := StartSystemd(ctx, zaptest.NewLogger(t))
	defer sd.Close()
	sd.Ready()
	sd.Ready() // once only
	if m := nextNotify(t, msgs); m != "READY=1" {
		t.Fatalf("first message %q, want READY=1", m)
	}
	cancel()
	if m := nextNotify(t, msgs); m != "STOPPING=1" {
		t.Fatalf("second message %q, want STOPPING=1", m)
	}
	sd.Ready() // after a stop began: nothing
	sd.Close()
	sd.Close()
	select {
	case m := <-msgs:
		t.Fatalf("unexpected message %q", m)
	case <-time.After(100 * time.Millisecond):
	}
}

func TestSystemdWatchdog(t *testing.T) {
	msgs := fakeNotifySocket(t)
	t.Setenv("WATCHDOG_USEC", "100000") // 100ms: pings every 50ms
	t.Setenv("WATCHDOG_PID", strconv.Itoa(os.Getpid()))
	sd := StartSystemd(context.Background(), zaptest.NewLogger(t))
	// Pings keep coming (no bound on their pace: a loaded machine may
	// delay them; the interval is half of WATCHDOG_USEC by construction).
	for range 3 {
		if m := nextNotify(t, msgs); m != "WATCHDOG=1" {
			t.Fatalf("message %q, want WATCHDOG=1", m)
		}
	}
	sd.Close()
}

func TestSystemdWatchdogOtherPID(t *testing.T) {
	msgs := fakeNotifySocket(t)
	t.Setenv("WATCHDOG_USEC", "100000")
	t.Setenv("WATCHDOG_PID", strconv.Itoa(os.Getpid()+1)) // the watchdog is someone else's
	sd := StartSystemd(context.Background(), zaptest.NewLogger(t))
	sd.Ready()
	if m := nextNotify(t, msgs); m != "READY=1" {
		t.Fatalf("message %q, want READY=1", m)
	}
	select {
	case m := <-msgs:
		t.Fatalf("unexpected message %q", m)
	case <-time.After(300 * time.Millisecond):
	}
	sd.Close()
}

func TestSystemdWithoutNotifySocket(t *testing.T) {
	t.Setenv("NOTIFY_SOCKET", "")
	ctx, cancel := context.WithCancel(context.Background())
	sd := StartSystemd(ctx, zaptest.NewLogger(t))
	sd.Ready()
	cancel()
	sd.Close()
}
