package driver_test

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/metalloc/metalloc/driver"
)

// TestRegistry checks the registry's invariants: every type offers every
// interface type, its default among what it enables and all of those
// enabled on the conductors.
func TestRegistry(t *testing.T) {
	t.Parallel()
	require.Equal(t, []string{"fake-hardware", "ipmi"}, driver.Names())
	for _, name := range driver.Names() {
		ht, ok := driver.Lookup(name)
		require.True(t, ok)
		for _, it := range driver.InterfaceTypes {
			iface := ht.Interfaces[it]
			require.Contains(t, iface.Enabled, iface.Default, "%s %s", name, it)
			require.Subset(t, driver.Enabled(it), iface.Enabled, "%s %s", name, it)
		}
		ifaces := map[string]string{}
		require.NoError(t, ht.Check(ifaces))
		require.Len(t, ifaces, len(driver.InterfaceTypes))
	}
	_, ok := driver.Lookup("redfish")
	require.False(t, ok)
}

// TestRAIDConfig checks target RAID configurations against Ironic's schema,
// with the messages Ironic 21.4 gives for the same configurations.
func TestRAIDConfig(t *testing.T) {
	t.Parallel()
	for cfg, want := range map[string]string{
		`{"logical_disks":[{"size_gb":100,"raid_level":"5","is_root_volume":true,"disk_type":"hdd","number_of_physical_disks":5}]}`:              "",
		`{"logical_disks":[{"size_gb":"MAX","raid_level":"JBOD","controller":"software","physical_disks":[{"size":"> 100"},{"size":"> 100"}]}]}`: "",
		`{"logical_disks":[{"size_gb":100.5,"raid_level":"5"}]}`:                                                                                 "RAID config validation error: 100.5 is not valid under any of the given schemas",
		`{"logical_disks":[{"size_gb":-1,"raid_level":"1"}]}`:                                                                                    "RAID config validation error: -1 is less than the minimum of 0",
		`{"logical_disks":[{"size_gb":1,"raid_level":"1","number_of_physical_disks":0}]}`:                                                        "RAID config validation error: 0 is less than or equal to the minimum of 0",
		`{"logical_disks":[{"size_gb":1,"raid_level":"1","x":1}]}`:                                                                               "RAID config validation error: Additional properties are not allowed ('x' was unexpected)",
		`{"logical_disks":[{"size_gb":1,"raid_level":"1","physical_disks":["a"]}]}`:                                                              "RAID config validation error: 'controller' is a dependency of 'physical_disks'",
		`{"logical_disks":[{"size_gb":"MAX","raid_level":"7"}]}`:                                                                                 "RAID config validation error: '7' is not one of ['JBOD', '0', '1', '2', '5', '6', '1+0', '5+0', '6+0']",
		`{"foo":1}`: "RAID config validation error: 'logical_disks' is a required property",
		`{"logical_disks":[{"size_gb":1,"raid_level":"1","is_root_volume":true},{"size_gb":1,"raid_level":"1","is_root_volume":true}]}`: "Raid config cannot have more than one root volume. 2 root volumes were specified",
	} {
		var m map[string]any
		require.NoError(t, json.Unmarshal([]byte(cfg), &m))
		err := driver.ValidateRAIDConfig(m)
		if want == "" {
			require.Nil(t, err, cfg)
			continue
		}
		require.NotNil(t, err, cfg)
		require.Equal(t, want, err.Message, cfg)
	}
}
