package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/metalloc/metalloc/db"
	"github.com/metalloc/metalloc/db/dbtest"
	"github.com/metalloc/metalloc/devstack"
	"github.com/metalloc/metalloc/web"
)

// get GETs url (with basic credentials when user is set) and returns the
// status and body.
func get(t *testing.T, url, user, password string) (int, string) {
	t.Helper()
	req, err := http.NewRequest("GET", url, nil)
	require.NoError(t, err)
	if user != "" {
		req.SetBasicAuth(user, password)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, string(body)
}

// TestHealthVersionAndLogs: every daemon answers /healthz and /readyz
// without credentials (the APIs here require http_basic for everything
// else) on its listener (the conductor on its metrics listener), /readyz
// turns 503 naming both versions when the schema is not the binary's, and
// the conductor's only once it is registered; every /metrics has
// metalloc_build_info; each daemon's start-up line has its version; the
// access log line of a 4xx answer has the reason the client got.
func TestHealthVersionAndLogs(t *testing.T) {
	t.Parallel()
	users := filepath.Join(t.TempDir(), "htpasswd")
	htpasswd(t, users, "operator", "op-pw")
	dbURL := dbtest.NewURL(t)
	stack, _ := startStackOpts(t, 1, devstack.Options{
		DatabaseURL: dbURL, Placement: true,
		Env: []string{
			"METALLOC_LOG_LEVEL=info",
			"METALLOC_API_AUTH_STRATEGY=http_basic",
			"METALLOC_API_HTTP_BASIC_AUTH_USER_FILE=" + users,
			"METALLOC_PLACEMENT_AUTH_STRATEGY=http_basic",
			"METALLOC_PLACEMENT_HTTP_BASIC_AUTH_USER_FILE=" + users,
		},
	})
	conductorURL := strings.TrimSuffix(stack.Conductors[0].MetricsURL, "/metrics")
	bases := map[string]string{"api": stack.APIURL, "placement": stack.PlacementURL, "conductor": conductorURL}
	for name, base := range bases {
		code, body := get(t, base+web.HealthzPath, "", "")
		require.Equal(t, http.StatusOK, code, name)
		require.JSONEq(t, `{"status":"ok"}`, body, name)
		// The conductor is ready once registered.
		require.Eventually(t, func() bool {
			code, _ := get(t, base+web.ReadyzPath, "", "")
			return code == http.StatusOK
		}, 60*time.Second, 50*time.Millisecond, name)
		_, body = get(t, base+web.ReadyzPath, "", "")
		var ready web.HealthBody
		require.NoError(t, json.Unmarshal([]byte(body), &ready), body)
		require.Equal(t, "ok", ready.Checks["database"], name)
		if name == "conductor" {
			require.Equal(t, "ok", ready.Checks["conductor"])
		}
		metrics := base + "/metrics"
		code, body = get(t, metrics, "", "")
		require.Equal(t, http.StatusOK, code, metrics)
		require.Regexp(t, `(?m)^metalloc_build_info\{build_date="[^"]+",commit="[^"]+",goversion="go[^"]+",version="[^"]+"\} 1$`, body, name)
	}
	code, _ := get(t, stack.APIURL+"/v1/nodes", "", "")
	require.Equal(t, http.StatusUnauthorized, code, "the rest of the API still wants credentials")

	// A schema newer than the binaries: every daemon's /readyz says so.
	ctx := context.Background()
	pool, err := db.Open(ctx, dbURL, db.PoolOptions{MaxConns: 1})
	require.NoError(t, err)
	defer pool.Close()
	want, err := db.LatestVersion()
	require.NoError(t, err)
	_, err = pool.Exec(ctx, `INSERT INTO goose_db_version (version_id, is_applied) VALUES ($1, true)`, want+1)
	require.NoError(t, err)
	for name, base := range bases {
		code, body := get(t, base+web.ReadyzPath, "", "")
		require.Equal(t, http.StatusServiceUnavailable, code, name)
		require.Contains(t, body, "database is at version "+strconv.FormatInt(want+1, 10)+", this binary knows up to "+
			strconv.FormatInt(want, 10), name)
		code, _ = get(t, base+web.HealthzPath, "", "")
		require.Equal(t, http.StatusOK, code, "%s: alive all the same", name)
	}
	// The same migration recorded as expand (the newer release's db
	// sync): inside every daemon's window, ready again.
	_, err = pool.Exec(ctx, `INSERT INTO schema_migration_kinds (version, kind) VALUES ($1, 'expand')`, want+1)
	require.NoError(t, err)
	for name, base := range bases {
		code, body := get(t, base+web.ReadyzPath, "", "")
		require.Equal(t, http.StatusOK, code, "%s: %s", name, body)
	}
	_, err = pool.Exec(ctx, `DELETE FROM goose_db_version WHERE version_id = $1`, want+1)
	require.NoError(t, err)
	code, _ = get(t, stack.APIURL+web.ReadyzPath, "", "")
	require.Equal(t, http.StatusOK, code)

	// Every daemon is in the registry db sync --contract reads, with its
	// pid and the schema version its binary knows.
	bins, err := db.Binaries(ctx, pool)
	require.NoError(t, err)
	pids := map[string]int{"api": stack.API.Cmd.Process.Pid, "placement": stack.Placement.Cmd.Process.Pid,
		"conductor": stack.Conductors[0].Cmd.Process.Pid}
	require.Len(t, bins, len(pids), "%+v", bins)
	for _, b := range bins {
		require.Equal(t, pids[b.Kind], int(b.PID), b.Kind)
		require.Equal(t, want, b.SchemaVersion, b.Kind)
		require.True(t, b.Live, b.Kind)
	}
	waitLog(t, stack.API.LogPath, `"msg":"registered in api_servers"`, fmt.Sprintf(`"schema_version":%d`, want))

	// The reason of a 4xx answer is in its access log line.
	code, body := get(t, stack.APIURL+"/v1/nodes/no-such-node", "operator", "op-pw")
	require.Equal(t, http.StatusNotFound, code, body)
	require.Contains(t, body, "Node no-such-node could not be found.")
	waitLog(t, stack.API.LogPath, `"msg":"request rejected"`, `"path":"/v1/nodes/no-such-node"`, `"status":404`,
		`"reason":"Node no-such-node could not be found."`)

	for _, p := range []*devstack.Process{stack.API, stack.Placement, stack.Conductors[0]} {
		waitLog(t, p.LogPath, `starting"`, `"version":"`, `"commit":"`)
	}
	// The HTTP daemons' garbage collector target, unless GOGC says otherwise
	// (docs/operations.md, Sizing).
	if _, set := os.LookupEnv("GOGC"); !set {
		waitLog(t, stack.API.LogPath, `starting"`, `"gogc":400`)
		waitLog(t, stack.Placement.LogPath, `starting"`, `"gogc":400`)
		waitLog(t, stack.Conductors[0].LogPath, `starting"`, `"gogc":100`)
	}

	// A clean stop deletes the API's row once it has drained.
	require.NoError(t, stack.Placement.Signal(syscall.SIGTERM))
	_ = stack.Placement.Wait(30 * time.Second)
	waitLog(t, stack.Placement.LogPath, `"msg":"deregistered from api_servers"`)
	bins, err = db.Binaries(ctx, pool)
	require.NoError(t, err)
	for _, b := range bins {
		require.NotEqual(t, "placement", b.Kind, "%+v", b)
	}
}

// waitLog waits until one line of the log at path contains every one of
// parts.
func waitLog(t *testing.T, path string, parts ...string) {
	t.Helper()
	require.Eventually(t, func() bool {
		raw, _ := os.ReadFile(path)
		for _, line := range strings.Split(string(raw), "\n") {
			all := true
			for _, p := range parts {
				all = all && strings.Contains(line, p)
			}
			if all {
				return true
			}
		}
		return false
	}, 30*time.Second, 50*time.Millisecond, "%s: no line with %q", path, parts)
}

// TestDaemonsNotifySystemd: each daemon, metalloc-placement included,
// tells systemd (Type=notify) READY=1 once it serves, pings the watchdog
// the unit asks for (WATCHDOG_USEC) and says STOPPING=1 at SIGTERM.
func TestDaemonsNotifySystemd(t *testing.T) {
	t.Parallel()
	url := dbtest.NewURL(t)
	for _, d := range []struct{ bin, listenFlag string }{
		{"metalloc-api", "--api.listen"},
		{"metalloc-placement", "--placement.listen"},
		{"metalloc-conductor", "--conductor.metrics_listen"},
	} {
		t.Run(d.bin, func(t *testing.T) {
			t.Parallel()
			dir, err := os.MkdirTemp("", "sd") // unix socket paths are limited to 108 bytes
			require.NoError(t, err)
			t.Cleanup(func() { os.RemoveAll(dir) })
			sock := filepath.Join(dir, "notify")
			conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: sock, Net: "unixgram"})
			require.NoError(t, err)
			t.Cleanup(func() { conn.Close() })
			msgs := make(chan string, 100)
			go func() {
				buf := make([]byte, 4096)
				for {
					n, err := conn.Read(buf)
					if err != nil {
						close(msgs)
						return
					}
					msgs <- string(buf[:n])
				}
			}()
			cmd := exec.Command(filepath.Join(binDir, d.bin), d.listenFlag, "127.0.0.1:0", "--conductor.hostname", "sd-test")
			if d.bin != "metalloc-conductor" {
				cmd.Args = cmd.Args[:3]
			}
			cmd.Env = append(os.Environ(), "DATABASE_URL="+url, "NOTIFY_SOCKET="+sock, "WATCHDOG_USEC=400000",
				"METALLOC_LOG_LEVEL=warn")
			var out bytes.Buffer
			cmd.Stdout, cmd.Stderr = &out, &out
			require.NoError(t, cmd.Start())
			done := make(chan error, 1)
			go func() { done <- cmd.Wait() }()
			t.Cleanup(func() {
				_ = cmd.Process.Kill()
				<-done
				if t.Failed() {
					t.Logf("%s output:\n%s", d.bin, out.String())
				}
			})
			next := func(want string) {
				t.Helper()
				deadline := time.After(60 * time.Second)
				for {
					select {
					case m := <-msgs:
						if m == want {
							return
						}
					case <-deadline:
						t.Fatalf("%s sent no %s", d.bin, want)
					}
				}
			}
			next("READY=1")
			next("WATCHDOG=1")
			require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
			next("STOPPING=1")
			select {
			case err := <-done:
				require.NoError(t, err, "a clean stop exits 0")
				done <- nil
			case <-time.After(60 * time.Second):
				t.Fatalf("%s did not exit after SIGTERM", d.bin)
			}
		})
	}
}
