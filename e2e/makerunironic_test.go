package e2e

import (
	"encoding/json"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/metalloc/metalloc/db"
	"github.com/metalloc/metalloc/db/dbtest"
)

// TestMakeRunIronic: `make run IRONIC=1` (dev up --ironic) starts a real
// Ironic 21.4 on IRONIC_PORT with the sample fleet enrolled in it, and
// metalloc in front with every node mirrored before it says it is up.
// The openstack CLI pointed at metalloc makes an allocation that is
// active in both systems (metalloc's API, and Ironic's own API read
// directly: the allocation and the node's allocation_uuid), and deploys
// its node through metalloc's proxied route to active. Ctrl-C stops
// Ironic too: its port closes, its directory and database are gone.
// Before, make run had no Ironic mode. The PostgreSQL server is the
// test's (DATABASE_URL), where Ironic's schema template is already made
// by the other Ironic tests; a newcomer's make run starts a private one.
func TestMakeRunIronic(t *testing.T) {
	t.Parallel()
	base := freePortRange(t, 3)
	port := func(i int) string { return strconv.Itoa(base + i) }
	tmp := t.TempDir()
	url := dbtest.NewURL(t)
	start := time.Now()
	r := startMakeRun(t, []string{"DATABASE_URL=" + url, "TMPDIR=" + tmp},
		"IRONIC=1", "API_PORT="+port(0), "PLACEMENT_PORT="+port(1), "IRONIC_PORT="+port(2))
	t.Logf("make run IRONIC=1 up in %s", time.Since(start).Round(time.Second))
	out := r.output()
	require.Regexp(t, `(?m)^  127\.0\.0\.1:`+port(2)+` +Ironic 21\.4's API`, out)
	require.Contains(t, out, "enrolling 240 nodes of examples/dc1-nodes.yaml in Ironic")
	api, ironicURL := "http://127.0.0.1:"+port(0), "http://127.0.0.1:"+port(2)

	// Up means mirrored: metalloc has every node of Ironic's, available.
	pool, err := db.Open(t.Context(), url, db.PoolOptions{MaxConns: 1})
	require.NoError(t, err)
	defer pool.Close()
	require.Equal(t, 240, dbtest.Count(t, pool,
		`SELECT count(*) FROM nodes WHERE provision_state = 'available' AND power_state = 'power off'`))

	// Ironic's database, from its configuration, to check it is dropped.
	confs, _ := filepath.Glob(filepath.Join(tmp, "metalloc-ironic-*", "etc", "ironic-api.conf"))
	require.Len(t, confs, 1, "Ironic's directory under TMPDIR")
	conf, err := os.ReadFile(confs[0])
	require.NoError(t, err)
	m := regexp.MustCompile(`(?m)^connection = .*/(ironic_test_[0-9a-f]+)`).FindSubmatch(conf)
	require.NotNil(t, m, "Ironic's database in %s", confs[0])
	ironicDB := string(m[1])

	cli := okCLI(t, api)
	var a allocDoc
	require.NoError(t, json.Unmarshal([]byte(cli("baremetal", "allocation", "create",
		"--resource-class", "baremetal-gold", "--wait", "60", "-f", "json")), &a))
	require.Equal(t, "active", a.State)
	require.NotNil(t, a.NodeUUID)
	node := *a.NodeUUID

	var mine, theirs allocDoc
	st, raw := apiCall(t, http.MethodGet, api+"/v1/allocations/"+a.UUID, nil)
	require.Equal(t, http.StatusOK, st, "%s", raw)
	require.NoError(t, json.Unmarshal(raw, &mine))
	st, raw = apiCall(t, http.MethodGet, ironicURL+"/v1/allocations/"+a.UUID, nil)
	require.Equal(t, http.StatusOK, st, "Ironic has no copy: %s", raw)
	require.NoError(t, json.Unmarshal(raw, &theirs))
	for _, got := range []allocDoc{mine, theirs} {
		require.Equal(t, "active", got.State)
		require.NotNil(t, got.NodeUUID)
		require.Equal(t, node, *got.NodeUUID)
	}
	var in struct {
		AllocationUUID *string `json:"allocation_uuid"`
		ProvisionState string  `json:"provision_state"`
		InstanceUUID   *string `json:"instance_uuid"`
	}
	st, raw = apiCall(t, http.MethodGet, ironicURL+"/v1/nodes/"+node, nil)
	require.Equal(t, http.StatusOK, st, "%s", raw)
	require.NoError(t, json.Unmarshal(raw, &in))
	require.NotNil(t, in.AllocationUUID)
	require.Equal(t, a.UUID, *in.AllocationUUID)

	// Deploy through metalloc (proxied to Ironic): fake-hardware is quick.
	cli("baremetal", "node", "set", node, "--instance-info", "image_source=http://images.example/a.qcow2")
	cli("baremetal", "node", "deploy", node, "--wait", "120")
	st, raw = apiCall(t, http.MethodGet, ironicURL+"/v1/nodes/"+node, nil)
	require.Equal(t, http.StatusOK, st, "%s", raw)
	require.NoError(t, json.Unmarshal(raw, &in))
	require.Equal(t, "active", in.ProvisionState)
	require.NotNil(t, in.InstanceUUID)
	require.Equal(t, a.UUID, *in.InstanceUUID)

	// Ctrl-C: Ironic stops and leaves nothing behind.
	require.True(t, r.stop(), "make run did not exit within a minute of SIGINT:\n%s", r.output())
	_, err = net.DialTimeout("tcp", "127.0.0.1:"+port(2), time.Second)
	require.Error(t, err, "Ironic still listens after Ctrl-C")
	left, _ := filepath.Glob(filepath.Join(tmp, "metalloc-ironic-*"))
	require.Empty(t, left, "Ironic's directory left after Ctrl-C")
	require.Zero(t, dbtest.Count(t, pool, `SELECT count(*) FROM pg_database WHERE datname = $1`, ironicDB),
		"Ironic's database left after Ctrl-C")
}
