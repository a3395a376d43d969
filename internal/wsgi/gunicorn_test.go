package wsgi

import (
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"

	"github.com/metalloc/metalloc/db/dbtest"
	"github.com/metalloc/metalloc/internal/freeport"
)

// Stop ends gunicorn's whole process group, its worker included, not just
// the master.
func TestStopEndsTheProcessGroup(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "hello.py"), []byte(
		"def app(environ, start_response):\n    start_response('200 OK', [])\n    return [b'hello']\n"), 0o644))
	port, err := freeport.Pick()
	require.NoError(t, err)
	addr := "127.0.0.1:" + strconv.Itoa(port)
	g, err := Start("hello", dir, addr, "hello:app", filepath.Join(dir, "log"), os.Environ(), zaptest.NewLogger(t))
	require.NoError(t, err)
	t.Cleanup(g.Stop)
	dbtest.WaitEvery(t, 60*time.Second, 50*time.Millisecond, "gunicorn's worker to answer", func() bool {
		resp, err := http.Get("http://" + addr + "/")
		if err != nil {
			require.NoError(t, g.Exited())
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	pgid := g.Pid()
	g.Stop()
	require.Error(t, g.Exited(), "the master still runs")
	require.Equal(t, syscall.ESRCH, syscall.Kill(-pgid, 0), "a process of the group is left")
}
