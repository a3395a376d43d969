package patroni

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"
)

// Start gives two members, one the leader and the other its synchronous
// standby, a multi-host URL that reaches the primary's database, and Stop
// leaves nothing behind. (The failovers: e2e TestPatroniFailover.)
func TestStartStop(t *testing.T) {
	if testing.Short() {
		t.Skip("starts etcd and Patroni")
	}
	ctx := context.Background()
	c, err := Start(ctx, Options{Members: 2, LogDir: t.TempDir(), Log: zaptest.NewLogger(t)})
	require.NoError(t, err)
	t.Cleanup(c.Stop)

	conn, err := pgx.Connect(ctx, c.URL("metalloc"))
	require.NoError(t, err)
	_, err = conn.Exec(ctx, `CREATE TABLE t (x int); INSERT INTO t VALUES (1)`)
	require.NoError(t, err)
	var port int
	require.NoError(t, conn.QueryRow(ctx, `SELECT current_setting('port')::int`).Scan(&port))
	conn.Close(ctx)
	primary := c.Primary(ctx)
	require.NotNil(t, primary)
	require.Equal(t, primary.Port, port, "the URL leads to the primary")

	states, err := c.State(ctx)
	require.NoError(t, err)
	roles := map[string]string{}
	for _, s := range states {
		roles[s.Name] = s.Role
	}
	require.Len(t, roles, 2, "%+v", states)
	for _, m := range c.Members {
		if m == primary {
			require.Equal(t, "leader", roles[m.Name])
		} else {
			require.Equal(t, "sync_standby", roles[m.Name])
		}
	}

	var pids []int
	for _, m := range c.Members {
		pid, err := postmasterPID(m.DataDir)
		require.NoError(t, err)
		require.True(t, c.isPostgres(pid), "%s's server runs", m.Name)
		pids = append(pids, pid)
	}
	dir := c.Dir()
	stopAt := time.Now()
	c.Stop()
	t.Logf("stopped in %s", time.Since(stopAt).Round(time.Millisecond))
	_, err = os.Stat(dir)
	require.True(t, os.IsNotExist(err), "%s removed: %v", dir, err)
	for _, pid := range pids {
		require.False(t, c.isPostgres(pid), "server %d stopped", pid)
	}
}
