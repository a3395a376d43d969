package main

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/metalloc/metalloc/db"
	"github.com/metalloc/metalloc/db/dbtest"
)

func TestTopologySetShow(t *testing.T) {
	url := dbtest.NewURL(t)
	pool, err := db.Open(context.Background(), url, db.PoolOptions{MaxConns: 2, ApplicationName: "topology_test"})
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	for _, rack := range []string{"1", "1", "2"} {
		id, _ := dbtest.Node(t, pool, dbtest.NodeSpec{ResourceClass: "gpu"})
		_, err := pool.Exec(context.Background(), `UPDATE nodes SET extra = jsonb_build_object('row', 7, 'rack', $2::text) WHERE id = $1`, id, rack)
		require.NoError(t, err)
	}
	yaml := "database:\n  url: " + url + "\n"

	out, code := runManage(t, yaml, "topology", "set", "row=extra.row", "rack=extra.rack")
	require.Equal(t, 0, code)
	require.Equal(t, "topology set: row=extra.row rack=extra.rack\n", out)
	out, _ = runManage(t, yaml, "topology", "show", "--resource-class", "gpu")
	require.Equal(t, `topology: row=extra.row rack=extra.rack
nodes of gpu: free (available to allocate) / total
DOMAIN         FREE  TOTAL
all               3      3
  row 7           3      3
    rack 7/1      2      2
    rack 7/2      1      1
`, out)
	out, _ = runManage(t, yaml, "topology", "show", "--resource-class", "gpu", "-f", "json")
	require.JSONEq(t, `[
		{"Domain": "all", "Level": "", "Path": "", "Free": 3, "Total": 3},
		{"Domain": "row 7", "Level": "row", "Path": "7", "Free": 3, "Total": 3},
		{"Domain": "rack 7/1", "Level": "rack", "Path": "7/1", "Free": 2, "Total": 2},
		{"Domain": "rack 7/2", "Level": "rack", "Path": "7/2", "Free": 1, "Total": 1}]`, out)
	out, _ = runManage(t, yaml, "topology", "show", "-f", "value", "-c", "path", "-c", "free")
	require.Equal(t, " 3\n7 3\n7/1 2\n7/2 1\n", out)
	out, _ = runManage(t, yaml, "topology", "set", "--clear")
	require.Equal(t, "topology removed\n", out)
}
