package scheduler

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
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

// The reading side of the Selection format, which only the tests need:
// what Encode writes must read back under these rules.

// ErrUnsupportedVersion is wrapped by DecodeSelection's error for a
// Selection of a major version this package does not know.
var ErrUnsupportedVersion = errors.New("unsupported Selection version")

// DecodeSelection decodes a Selection encoded by Encode (or by a newer
// writer of the same major version). It refuses a missing or malformed
// version, another major version, unknown fields at a version this package
// knows, a nil compute_node_uuid and an allocation_request that is not a
// JSON object. Fields added by a newer minor version are ignored.
func DecodeSelection(b []byte) (Selection, error) {
	var head struct {
		Version *string `json:"version"`
	}
	if err := json.Unmarshal(b, &head); err != nil {
		return Selection{}, fmt.Errorf("decoding Selection: %w", err)
	}
	if head.Version == nil {
		return Selection{}, errors.New("decoding Selection: no version")
	}
	major, minor, err := parseVersion(*head.Version)
	if err != nil {
		return Selection{}, fmt.Errorf("decoding Selection: %w", err)
	}
	if major != selectionMajor {
		return Selection{}, fmt.Errorf("decoding Selection: %w %q (this build reads %d.x)",
			ErrUnsupportedVersion, *head.Version, selectionMajor)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	if minor <= selectionMinor {
		dec.DisallowUnknownFields()
	}
	var s Selection
	if err := dec.Decode(&s); err != nil {
		return Selection{}, fmt.Errorf("decoding Selection %s: %w", *head.Version, err)
	}
	if s.ComputeNodeUUID == uuid.Nil {
		return Selection{}, errors.New("decoding Selection: compute_node_uuid is missing")
	}
	if s.AllocationRequest != "" {
		var obj map[string]json.RawMessage
		if err := json.Unmarshal([]byte(s.AllocationRequest), &obj); err != nil {
			return Selection{}, fmt.Errorf("decoding Selection: allocation_request is not a JSON object: %w", err)
		}
	}
	return s, nil
}

// parseVersion splits "MAJOR.MINOR".
func parseVersion(v string) (major, minor int, err error) {
	a, b, ok := strings.Cut(v, ".")
	if ok {
		major, err = strconv.Atoi(a)
		if err == nil {
			minor, err = strconv.Atoi(b)
		}
	}
	if !ok || err != nil || major < 0 || minor < 0 {
		return 0, 0, fmt.Errorf("malformed version %q (want MAJOR.MINOR)", v)
	}
	return major, minor, nil
}
