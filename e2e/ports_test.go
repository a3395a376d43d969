package e2e

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/gophercloud/gophercloud/v2"
	"github.com/gophercloud/gophercloud/v2/openstack/baremetal/v1/nodes"
	"github.com/gophercloud/gophercloud/v2/openstack/baremetal/v1/ports"
	"github.com/stretchr/testify/require"
)

// noauthCLI runs `openstack --os-auth-type none` against endpoint at the
// CLI's newest microversion (1.78) and returns its combined output.
func noauthCLI(endpoint string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	argv := append([]string{"--os-auth-type", "none", "--os-endpoint", endpoint,
		"--os-baremetal-api-version", "1.78"}, args...)
	cmd := exec.CommandContext(ctx, "openstack", argv...)
	cmd.Env = append(os.Environ(), "PYTHONWARNINGS=ignore", "OS_CLOUD=", "OS_CLIENT_CONFIG_FILE=/dev/null")
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// okCLI returns noauthCLI at endpoint for t: its output, the test failed
// (with the command and its output) when it exits non-zero.
func okCLI(t *testing.T, endpoint string) func(args ...string) string {
	return func(args ...string) string {
		t.Helper()
		out, err := noauthCLI(endpoint, args...)
		require.NoError(t, err, "openstack %v:\n%s", args, out)
		return out
	}
}

// TestPortsEndToEnd drives the port and port group API of a real
// metalloc-api with gophercloud's baremetal/v1/ports package and with
// `openstack baremetal port ...`, `port group ...` and `baremetal create`
// (ironicclient's create_resources: a node file with ports and port
// groups).
func TestPortsEndToEnd(t *testing.T) {
	t.Parallel()
	stack, client := startStack(t, 0)
	ctx := context.Background()
	cli := okCLI(t, stack.APIURL)
	cliJSON := func(args ...string) map[string]any {
		t.Helper()
		out := cli(append(args, "-f", "json")...)
		var m map[string]any
		require.NoError(t, json.Unmarshal([]byte(out), &m), out)
		return m
	}

	n, err := nodes.Create(ctx, client, nodes.CreateOpts{Name: "port-node", Driver: "fake-hardware"}).Extract()
	require.NoError(t, err)

	// gophercloud
	pxe := true
	p, err := ports.Create(ctx, client, ports.CreateOpts{
		NodeUUID: n.UUID, Address: "52:54:00:AA:BB:01", PXEEnabled: &pxe, PhysicalNetwork: "physnet1",
		LocalLinkConnection: map[string]any{"switch_id": "aa:bb:cc:dd:ee:ff", "port_id": "Eth1/1"},
		Extra:               map[string]any{"rack": "r1"},
	}).Extract()
	require.NoError(t, err)
	require.Equal(t, "52:54:00:aa:bb:01", p.Address)
	require.Equal(t, n.UUID, p.NodeUUID)
	require.True(t, p.PXEEnabled)
	require.Equal(t, "physnet1", p.PhysicalNetwork)
	got, err := ports.Get(ctx, client, p.UUID).Extract()
	require.NoError(t, err)
	require.Equal(t, p.LocalLinkConnection, got.LocalLinkConnection)
	_, err = ports.Create(ctx, client, ports.CreateOpts{NodeUUID: n.UUID, Address: "52:54:00:aa:bb:01"}).Extract()
	require.True(t, gophercloud.ResponseCodeIs(err, http.StatusConflict), "duplicate MAC: %v", err)

	pages, err := ports.List(client, ports.ListOpts{Node: "port-node"}).AllPages(ctx)
	require.NoError(t, err)
	list, err := ports.ExtractPorts(pages)
	require.NoError(t, err)
	require.Len(t, list, 1)
	require.Equal(t, p.UUID, list[0].UUID)
	pages, err = ports.ListDetail(client, ports.ListOpts{Address: "52:54:00:AA:BB:01"}).AllPages(ctx)
	require.NoError(t, err)
	list, err = ports.ExtractPorts(pages)
	require.NoError(t, err)
	require.Len(t, list, 1)
	require.Equal(t, map[string]any{"rack": "r1"}, list[0].Extra)

	up, err := ports.Update(ctx, client, p.UUID, ports.UpdateOpts{
		ports.UpdateOperation{Op: ports.AddOp, Path: "/extra/slot", Value: "3"},
		ports.UpdateOperation{Op: ports.ReplaceOp, Path: "/pxe_enabled", Value: false},
	}).Extract()
	require.NoError(t, err)
	require.Equal(t, "3", up.Extra["slot"])
	require.False(t, up.PXEEnabled)

	// The openstack CLI.
	pg := cliJSON("baremetal", "port", "group", "create", "--node", n.UUID, "--name", "bond0",
		"--mode", "802.3ad", "--address", "52:54:00:aa:bb:f0", "--support-standalone-ports")
	require.Equal(t, "bond0", pg["name"])
	require.Equal(t, "802.3ad", pg["mode"])
	cp := cliJSON("baremetal", "port", "create", "--node", n.UUID, "--port-group", pg["uuid"].(string),
		"--pxe-enabled", "false", "52:54:00:AA:BB:02")
	require.Equal(t, "52:54:00:aa:bb:02", cp["address"])
	require.Equal(t, pg["uuid"], cp["portgroup_uuid"])
	shown := cliJSON("baremetal", "port", "show", cp["uuid"].(string))
	require.Equal(t, false, shown["pxe_enabled"])

	out := cli("baremetal", "port", "list", "--node", "port-node", "-f", "json")
	require.Equal(t, []string{"52:54:00:aa:bb:01", "52:54:00:aa:bb:02"}, column(t, out, "Address"))
	out = cli("baremetal", "port", "list", "--port-group", "bond0", "-f", "json")
	require.Equal(t, []string{"52:54:00:aa:bb:02"}, column(t, out, "Address"))
	out = cli("baremetal", "port", "list", "--long", "-f", "json")
	require.Contains(t, column(t, out, "Physical Network"), "physnet1")
	out = cli("baremetal", "port", "group", "list", "-f", "json")
	require.Equal(t, []string{"bond0"}, column(t, out, "Name"))

	out, err = noauthCLI(stack.APIURL, "baremetal", "port", "create", "--node", n.UUID, "52:54:00:aa:bb:02")
	require.Error(t, err)
	require.Contains(t, out, "A port with MAC address 52:54:00:aa:bb:02 already exists.")

	out, err = noauthCLI(stack.APIURL, "baremetal", "port", "group", "delete", "bond0")
	require.Error(t, err, out)
	cli("baremetal", "port", "delete", cp["uuid"].(string))
	cli("baremetal", "port", "group", "delete", "bond0")
	require.NoError(t, ports.Delete(ctx, client, p.UUID).ExtractErr())
	out = cli("baremetal", "port", "list", "-f", "json")
	require.Empty(t, column(t, out, "UUID"))

	// `openstack baremetal create`: a node with ports and a port group.
	file := filepath.Join(t.TempDir(), "nodes.json")
	require.NoError(t, os.WriteFile(file, []byte(`{"nodes": [{"name": "created-1", "driver": "fake-hardware",
		"ports": [{"address": "52:54:00:cc:00:01"}],
		"portgroups": [{"name": "created-1-bond", "ports": [{"address": "52:54:00:cc:00:02", "pxe_enabled": false}]}]}]}`), 0o600))
	cli("baremetal", "create", file)
	out = cli("baremetal", "port", "list", "--node", "created-1", "-f", "json")
	require.Equal(t, []string{"52:54:00:cc:00:01", "52:54:00:cc:00:02"}, column(t, out, "Address"))
	out = cli("baremetal", "port", "list", "--port-group", "created-1-bond", "-f", "json")
	require.Equal(t, []string{"52:54:00:cc:00:02"}, column(t, out, "Address"))

	// Deleting the node deletes its ports and port groups.
	require.NoError(t, nodes.Delete(ctx, client, "created-1").ExtractErr())
	out = cli("baremetal", "port", "list", "-f", "json")
	require.Empty(t, column(t, out, "UUID"))
	out = cli("baremetal", "port", "group", "list", "-f", "json")
	require.Empty(t, column(t, out, "UUID"))
}
