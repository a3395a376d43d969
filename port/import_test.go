package port_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/metalloc/metalloc/db/dbtest"
	"github.com/metalloc/metalloc/node"
	"github.com/metalloc/metalloc/port"
)

// importFile is an `openstack baremetal create` file with a node's ports
// and a port group with member ports.
const importFile = `
nodes:
  - name: imp-1
    driver: fake-hardware
    resource_class: gold
    ports:
      - address: "52:54:00:00:10:01"
        physical_network: physnet1
        local_link_connection: {switch_id: "aa:bb:cc:dd:ee:ff", port_id: "Eth1/1"}
    portgroups:
      - name: imp-1-bond
        mode: 802.3ad
        address: "52:54:00:00:10:F0"
        ports:
          - address: "52:54:00:00:10:02"
            pxe_enabled: false
          - address: "52:54:00:00:10:03"
            pxe_enabled: false
`

// TestImportPorts: node import creates a node's ports and port groups (MACs
// normalised, members in their group), a second run changes nothing, a
// changed field is updated, and a node whose port cannot be created is not
// created either.
func TestImportPorts(t *testing.T) {
	t.Parallel()
	pool := dbtest.New(t)
	store := node.NewStore(pool)
	ctx := t.Context()
	opts := node.ImportOptions{Ports: port.Importer{}}

	res, err := node.Import(ctx, store, strings.NewReader(importFile), opts, nil)
	require.NoError(t, err)
	require.Equal(t, 1, res.Created)
	require.Equal(t, 3, res.Ports)
	require.Equal(t, 1, res.Portgroups)
	require.Empty(t, res.Warnings)
	require.Equal(t, 2, dbtest.Count(t, pool, `SELECT count(*) FROM ports p JOIN portgroups g ON g.id = p.portgroup_id
		WHERE g.name = 'imp-1-bond' AND g.address = '52:54:00:00:10:f0' AND g.mode = '802.3ad' AND NOT p.pxe_enabled`))
	require.Equal(t, 1, dbtest.Count(t, pool, `SELECT count(*) FROM ports WHERE address = '52:54:00:00:10:01'
		AND physical_network = 'physnet1' AND local_link_connection->>'port_id' = 'Eth1/1' AND pxe_enabled AND portgroup_id IS NULL`))

	res, err = node.Import(ctx, store, strings.NewReader(importFile), opts, nil)
	require.NoError(t, err)
	require.Equal(t, 1, res.Unchanged)
	require.Zero(t, res.Ports+res.Portgroups)

	changed := strings.Replace(importFile, "physnet1", "physnet2", 1)
	res, err = node.Import(ctx, store, strings.NewReader(changed), opts, nil)
	require.NoError(t, err)
	require.Equal(t, 1, res.Updated)
	require.Equal(t, 1, res.Ports)
	require.Equal(t, 1, dbtest.Count(t, pool, `SELECT count(*) FROM ports WHERE physical_network = 'physnet2'`))

	// A port whose MAC another node's port has: the new node is rolled
	// back with it.
	clash := `
nodes:
  - name: imp-2
    driver: fake-hardware
    ports:
      - address: "52:54:00:00:10:01"
`
	_, err = node.Import(ctx, store, strings.NewReader(clash), opts, nil)
	require.ErrorContains(t, err, "A port with MAC address 52:54:00:00:10:01 already exists")
	require.Zero(t, dbtest.Count(t, pool, `SELECT count(*) FROM nodes WHERE name = 'imp-2'`))

	// Without an importer, ports are skipped with a warning.
	other := strings.ReplaceAll(strings.ReplaceAll(importFile, "imp-1", "imp-3"), "52:54:00:00:10", "52:54:00:00:20")
	res, err = node.Import(ctx, store, strings.NewReader(other), node.ImportOptions{}, nil)
	require.NoError(t, err)
	require.Len(t, res.Warnings, 1)
	require.Equal(t, 3, dbtest.Count(t, pool, `SELECT count(*) FROM ports`), "imp-3's ports were not imported")
}
