package scheduler

import (
	"errors"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/metalloc/metalloc/placement/client"
)

func TestSelectionGoldenAndRoundTrip(t *testing.T) {
	t.Parallel()
	node := uuid.MustParse("5d1c9d54-8d4e-4a4e-9f51-0a9a7f0c1e01")
	req := client.AllocationRequest{
		Allocations: map[uuid.UUID]client.ProviderResources{node: {Resources: client.Resources{"CUSTOM_GOLD": 1}}},
		Mappings:    map[string][]uuid.UUID{"": {node}},
	}
	s, err := NewSelection(node, "conductor-1", req, "1.39")
	require.NoError(t, err)
	b, err := s.Encode()
	require.NoError(t, err)
	const golden = `{"version":"1.1",` +
		`"compute_node_uuid":"5d1c9d54-8d4e-4a4e-9f51-0a9a7f0c1e01",` +
		`"service_host":"conductor-1",` +
		`"nodename":"5d1c9d54-8d4e-4a4e-9f51-0a9a7f0c1e01",` +
		`"cell_uuid":null,"limits":null,` +
		`"allocation_request":"{\"allocations\":{\"5d1c9d54-8d4e-4a4e-9f51-0a9a7f0c1e01\":{\"resources\":{\"CUSTOM_GOLD\":1}}},` +
		`\"mappings\":{\"\":[\"5d1c9d54-8d4e-4a4e-9f51-0a9a7f0c1e01\"]}}",` +
		`"allocation_request_version":"1.39",` +
		`"availability_zone":null}`
	require.Equal(t, golden, string(b))

	// Encoding twice gives the same bytes; decoding gives the same value.
	b2, err := s.Encode()
	require.NoError(t, err)
	require.Equal(t, b, b2)
	back, err := DecodeSelection(b)
	require.NoError(t, err)
	require.Equal(t, s, back)
	got, err := back.Request()
	require.NoError(t, err)
	require.Equal(t, req, got)

	// Limits and the optional fields survive too.
	v := int64(4)
	zone := "az1"
	cell := uuid.MustParse("00000000-0000-0000-0000-0000000000c1")
	s.Limits, s.AvailabilityZone, s.CellUUID = &Limits{VCPU: &v}, &zone, &cell
	b, err = s.Encode()
	require.NoError(t, err)
	require.Contains(t, string(b), `"limits":{"vcpu":4,"memory_mb":null,"disk_gb":null}`)
	back, err = DecodeSelection(b)
	require.NoError(t, err)
	require.Equal(t, s, back)

	// Encode fills in an empty version.
	s.Version = ""
	b, err = s.Encode()
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(string(b), `{"version":"1.1",`))
}

func TestDecodeSelectionVersions(t *testing.T) {
	t.Parallel()
	const node = `"compute_node_uuid":"5d1c9d54-8d4e-4a4e-9f51-0a9a7f0c1e01"`
	for _, tc := range []struct {
		name, in, err string
	}{
		{"older minor", `{"version":"1.0",` + node + `}`, ""},
		{"newer minor with a new field", `{"version":"1.7",` + node + `,"numa_limits":null}`, ""},
		{"unknown major", `{"version":"2.0",` + node + `}`, "unsupported Selection version"},
		{"no version", `{` + node + `}`, "no version"},
		{"malformed version", `{"version":"one",` + node + `}`, "malformed version"},
		{"unknown field at a known version", `{"version":"1.1",` + node + `,"bogus":1}`, "unknown field"},
		{"no node", `{"version":"1.1"}`, "compute_node_uuid is missing"},
		{"allocation_request not an object", `{"version":"1.1",` + node + `,"allocation_request":"[1]"}`, "not a JSON object"},
		{"not JSON", `nope`, "decoding Selection"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := DecodeSelection([]byte(tc.in))
			if tc.err == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorContains(t, err, tc.err)
		})
	}
	_, err := DecodeSelection([]byte(`{"version":"3.1","compute_node_uuid":"5d1c9d54-8d4e-4a4e-9f51-0a9a7f0c1e01"}`))
	require.True(t, errors.Is(err, ErrUnsupportedVersion))
}
