package loadgen

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestNodeFiles: the benchmarks' fleets as node files, entry for entry
// (`metalloc-manage node import` reads them).
func TestNodeFiles(t *testing.T) {
	t.Parallel()
	require.Equal(t, `{"nodes":[]}`, string(NodeFile(0, 4)))
	require.Equal(t, `{"nodes":[`+
		`{"name":"bench-node-0","driver":"fake-hardware","resource_class":"bench-0","traits":["CUSTOM_NVME","CUSTOM_25GBE"]},`+
		`{"name":"bench-node-1","driver":"fake-hardware","resource_class":"bench-1","traits":["CUSTOM_NVME","CUSTOM_25GBE"]}]}`,
		string(NodeFile(2, 2)))

	var file struct{ Nodes []json.RawMessage }
	require.NoError(t, json.Unmarshal(LeaseNodeFile(41), &file))
	require.Len(t, file.Nodes, 41)
	require.Equal(t, `{"name":"lease-node-0","driver":"fake-hardware","resource_class":"lease-gpu","traits":["CUSTOM_A100"],`+
		`"extra":{"rack":1,"row":1},"reservable":true}`, string(file.Nodes[0]))
	require.Equal(t, `{"name":"lease-node-40","driver":"fake-hardware","resource_class":"lease-cpu","traits":["CUSTOM_NVME"],`+
		`"extra":{"rack":2,"row":1},"reservable":true}`, string(file.Nodes[40]))
}
