package e2e

import (
	"bufio"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/metalloc/metalloc/internal/child"
	"github.com/metalloc/metalloc/internal/freeport"
)

// TestDevUpHA runs `metalloc-manage dev up --ha` as a developer does: it
// must print where etcd, each Patroni member and the API listen, answer
// an allocation on the members' multi-host URL, show one leader and two
// standbys at the printed Patroni REST address, and at Ctrl-C stop
// everything and delete the members' directory.
func TestDevUpHA(t *testing.T) {
	if testing.Short() {
		t.Skip("starts etcd and Patroni")
	}
	port, err := freeport.Pick()
	require.NoError(t, err)
	api := "127.0.0.1:" + strconv.Itoa(port)
	cmd := exec.Command(filepath.Join(binDir, "metalloc-manage"), "dev", "up", "--ha", "--nodes", "sample",
		"--listen", api, "--placement-listen", "off", "--env-file", filepath.Join(t.TempDir(), "dev.env"))
	// dev up --ha refuses a DATABASE_URL (dev exec sets one for the tests).
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "DATABASE_URL=") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	var stderr lockedBuffer // dev up writes it while the test reads it
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	done := make(chan error, 1)
	require.NoError(t, child.Start(cmd, func(err error) { done <- err }))
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
	})

	// Read what it prints until it is up.
	lines := make(chan string, 100)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	var out []string
	deadline := time.After(3 * time.Minute)
	for up := false; !up; {
		select {
		case l, ok := <-lines:
			require.True(t, ok, "dev up --ha exited before it was up:\n%s\n%s", strings.Join(out, "\n"), stderr.String())
			out = append(out, l)
			up = strings.Contains(l, "Ctrl-C stops everything")
		case <-deadline:
			t.Fatalf("dev up --ha not up within 3 minutes:\n%s\n%s", strings.Join(out, "\n"), stderr.String())
		}
	}
	printed := strings.Join(out, "\n")
	t.Logf("dev up --ha printed:\n%s", printed)
	require.Regexp(t, `etcd: +http://127\.0\.0\.1:\d+ http://127\.0\.0\.1:\d+ http://127\.0\.0\.1:\d+`, printed)
	members := regexp.MustCompile(`(pg\d): +PostgreSQL 127\.0\.0\.1:\d+, Patroni REST (http://127\.0\.0\.1:\d+) \((primary|standby);`).
		FindAllStringSubmatch(printed, -1)
	require.Len(t, members, 3, "three members printed")
	require.Regexp(t, `database: +postgres://postgres@127\.0\.0\.1:\d+,127\.0\.0\.1:\d+,127\.0\.0\.1:\d+/metalloc\?.*target_session_attrs=read-write`, printed)
	dir := regexp.MustCompile(`data and logs in (\S+)\)`).FindStringSubmatch(printed)
	require.NotNil(t, dir, "the members' directory printed")

	// Patroni's view: one leader, two standbys running.
	resp, err := http.Get(members[0][2] + "/cluster")
	require.NoError(t, err)
	var cluster struct {
		Members []struct{ Name, Role, State string }
	}
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&cluster))
	resp.Body.Close()
	roles := map[string]int{}
	for _, m := range cluster.Members {
		require.Contains(t, []string{"running", "streaming"}, m.State, "%+v", cluster.Members)
		roles[m.Role]++
	}
	require.Equal(t, 1, roles["leader"], "%+v", cluster.Members)
	require.Equal(t, 2, roles["sync_standby"]+roles["replica"], "%+v", cluster.Members)

	// An allocation, through the API on the multi-host URL.
	req, _ := http.NewRequest(http.MethodPost, "http://"+api+"/v1/allocations",
		strings.NewReader(`{"resource_class": "baremetal-gold"}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-OpenStack-Ironic-API-Version", "1.82")
	req.Header.Set("Prefer", "wait=30")
	resp, err = http.DefaultClient.Do(req)
	require.NoError(t, err)
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.Equal(t, http.StatusCreated, resp.StatusCode, string(raw))
	var alloc struct {
		State    string `json:"state"`
		NodeUUID string `json:"node_uuid"`
	}
	require.NoError(t, json.Unmarshal(raw, &alloc))
	require.Equal(t, "active", alloc.State, string(raw))
	require.NotEmpty(t, alloc.NodeUUID)

	// Ctrl-C: everything stops, the members' data goes.
	stopAt := time.Now()
	require.NoError(t, cmd.Process.Signal(os.Interrupt))
	select {
	case <-done:
	case <-time.After(90 * time.Second):
		t.Fatalf("dev up --ha still running 90 s after Ctrl-C:\n%s", stderr.String())
	}
	t.Logf("stopped in %s", time.Since(stopAt).Round(time.Millisecond))
	_, err = os.Stat(dir[1])
	require.True(t, os.IsNotExist(err), "%s removed at exit: %v", dir[1], err)
}
