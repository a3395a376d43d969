package e2e

import (
	"encoding/json"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
)

// TestBaremetalCLIVerbs runs the `openstack baremetal` verbs of the
// hardware interfaces and drivers against metalloc-api (noauth, the CLI's
// microversion): node validate, VIF attach/list/detach (noop and flat
// networks), boot device show/set, RAID configuration, driver
// list/show/property list, chassis and deploy templates, and what each
// shows.
func TestBaremetalCLIVerbs(t *testing.T) {
	t.Parallel()
	stack, _ := startStack(t, 2)
	cli := okCLI(t, stack.APIURL)
	rows := func(args ...string) []map[string]any {
		t.Helper()
		var out []map[string]any
		raw := cli(append(args, "-f", "json")...)
		require.NoError(t, json.Unmarshal([]byte(raw), &out), raw)
		return out
	}
	object := func(args ...string) map[string]any {
		t.Helper()
		var out map[string]any
		raw := cli(append(args, "-f", "json")...)
		require.NoError(t, json.Unmarshal([]byte(raw), &out), raw)
		return out
	}

	node := object("baremetal", "node", "create", "--driver", "fake-hardware", "--name", "cli-verbs")["uuid"].(string)
	for _, r := range rows("baremetal", "node", "validate", node) {
		require.Equal(t, true, r["Result"], "%v", r)
	}
	vif := uuid.NewString()
	cli("baremetal", "node", "vif", "attach", node, vif)
	require.Empty(t, rows("baremetal", "node", "vif", "list", node), "the noop network records no VIF")
	cli("baremetal", "node", "vif", "detach", node, vif)

	cli("baremetal", "node", "set", node, "--network-interface", "flat")
	cli("baremetal", "port", "create", "52:54:00:12:34:56", "--node", node)
	cli("baremetal", "node", "vif", "attach", node, vif)
	require.Equal(t, []map[string]any{{"ID": vif}}, rows("baremetal", "node", "vif", "list", node))
	cli("baremetal", "node", "vif", "detach", node, vif)
	require.Empty(t, rows("baremetal", "node", "vif", "list", node))

	require.Equal(t, "pxe", object("baremetal", "node", "boot", "device", "show", node)["boot_device"])
	require.Equal(t, "pxe", object("baremetal", "node", "boot", "device", "show", "--supported", node)["supported_boot_devices"])
	cli("baremetal", "node", "boot", "device", "set", node, "pxe", "--persistent")

	cli("baremetal", "node", "set", node, "--target-raid-config", `{"logical_disks":[{"size_gb":"MAX","raid_level":"1"}]}`)
	require.Equal(t, map[string]any{"logical_disks": []any{map[string]any{"size_gb": "MAX", "raid_level": "1"}}},
		object("baremetal", "node", "show", node, "--fields", "target_raid_config")["target_raid_config"])

	drivers := rows("baremetal", "driver", "list")
	require.Len(t, drivers, 2)
	require.Equal(t, "fake-hardware", drivers[0]["Supported driver(s)"])
	require.Equal(t, "noop", object("baremetal", "driver", "show", "fake-hardware")["default_network_interface"])
	require.Len(t, rows("baremetal", "driver", "property", "list", "fake-hardware"), 2)
	require.NotEmpty(t, rows("baremetal", "driver", "raid", "property", "list", "ipmi"))
	require.Empty(t, rows("baremetal", "driver", "passthru", "list", "ipmi"))

	chassis := object("baremetal", "chassis", "create", "--description", "rack 1")["uuid"].(string)
	cli("baremetal", "node", "set", node, "--chassis-uuid", chassis)
	require.Len(t, rows("baremetal", "node", "list", "--chassis", chassis), 1)
	cli("baremetal", "deploy", "template", "create", "CUSTOM_CLI", "--steps",
		`[{"interface":"bios","step":"apply_configuration","args":{},"priority":10}]`)
	require.Len(t, rows("baremetal", "deploy", "template", "list"), 1)
}
