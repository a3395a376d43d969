package blazar

import (
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/metalloc/metalloc/node"
)

// TestParseFilter: Blazar's filter language onto a resource class,
// traits and node conditions; what does not map is a 400 naming it.
func TestParseFilter(t *testing.T) {
	t.Parallel()
	f, err := ParseFilter(1, `["and", ["=", "$resource_class", "gpu"], ["=", "$CUSTOM_A100", "true"],
		["==", "$CUSTOM_OLD", "false"], [">=", "$memory_mb", "4096"], ["=", "$gpu", "true"]]`, `[">", "$vcpus", "8"]`)
	require.NoError(t, err)
	require.Equal(t, "gpu", f.ResourceClass)
	require.Equal(t, []string{"CUSTOM_A100"}, f.Traits)
	require.Equal(t, []string{"CUSTOM_OLD"}, f.Forbidden)
	require.True(t, f.HasConditions())

	f, err = ParseFilter(1, "", "[]")
	require.NoError(t, err)
	require.Equal(t, &Filter{}, f)

	f, err = ParseFilter(1, `["!=", "$HW_CPU_X86_AVX2", "true"]`, "")
	require.NoError(t, err)
	require.Equal(t, []string{"HW_CPU_X86_AVX2"}, f.Forbidden)
	require.False(t, f.HasConditions())

	for in, want := range map[[2]string]string{
		{`["or", ["=", "$a", "1"], ["=", "$b", "2"]]`, ""}:                       `"or" is not supported`,
		{`["and", ["or", ["=", "$a", "1"]]]`, ""}:                                `"or" is not supported`,
		{`["~", "$a", "1"]`, ""}:                                                 `operator "~" is not supported`,
		{`["=", "a", "1"]`, ""}:                                                  `the key is a $name`,
		{`["=", "$memory_mb", 4096]`, ""}:                                        `operands are strings`,
		{`["=", "$memory_mb", "lots"]`, ""}:                                      `$memory_mb compares numbers`,
		{`{"memory_mb": 1}`, ""}:                                                 `expected a JSON list`,
		{`not json`, ""}:                                                         `not JSON`,
		{`[">", "$resource_class", "a"]`, ""}:                                    `$resource_class takes = only`,
		{`[">", "$CUSTOM_X", "true"]`, ""}:                                       `trait $CUSTOM_X takes = or !=`,
		{`["<", "$cpu_arch", "x86_64"]`, ""}:                                     `$cpu_arch takes = and != only`,
		{"", `["=", "$hypervisor_type", "QEMU"]`}:                                `$hypervisor_type is not supported in hypervisor_properties`,
		{`["and", ["=", "$CUSTOM_X", "true"], ["=", "$CUSTOM_X", "false"]]`, ""}: `trait CUSTOM_X is both required and forbidden`,
	} {
		_, err := ParseFilter(2, in[0], in[1])
		require.ErrorContains(t, err, want, "%s | %s", in[0], in[1])
		require.ErrorContains(t, err, "400: Invalid reservation 2", "%s | %s", in[0], in[1])
	}
}

// TestFilterMatches: conditions on properties and capabilities; a node
// without the property does not match.
func TestFilterMatches(t *testing.T) {
	t.Parallel()
	n := node.Node{UUID: uuid.New(), Properties: map[string]any{"memory_mb": float64(8192), "cpus": "16",
		"cpu_arch": "x86_64", "capabilities": "boot_mode:uefi,gpu:true,gen:3"}}
	for text, want := range map[string]bool{
		`[">=", "$memory_mb", "4096"]`:                              true,
		`["<", "$memory_mb", "4096"]`:                               false,
		`["=", "$cpus", "16"]`:                                      true,
		`["=", "$cpu_arch", "X86_64"]`:                              true,
		`["!=", "$cpu_arch", "x86_64"]`:                             false,
		`["and", ["=", "$gpu", "true"], [">", "$gen", "2"]]`:        true,
		`["=", "$boot_mode", "bios"]`:                               false,
		`["=", "$local_gb", "10"]`:                                  false,
		`["=", "$rack", "r1"]`:                                      false,
		`["and", ["=", "$boot_mode", "uefi"], ["<=", "$gen", "3"]]`: true,
	} {
		f, err := ParseFilter(1, text, "")
		require.NoError(t, err, text)
		require.Equal(t, want, f.Matches(n), text)
	}
}

// TestText: a reservation's class and traits in the filter language.
func TestText(t *testing.T) {
	t.Parallel()
	require.Equal(t, `["=","$resource_class","gpu"]`, Text("gpu", nil, nil))
	require.Equal(t, `["and",["=","$resource_class","gpu"],["=","$CUSTOM_A","true"],["=","$CUSTOM_B","false"]]`,
		Text("gpu", []string{"CUSTOM_A"}, []string{"CUSTOM_B"}))
}
