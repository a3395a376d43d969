package devstack

import (
	"crypto/sha1"
	"fmt"
	"strings"

	"github.com/google/uuid"
)

// sampleClasses are the resource classes of the sample fleet, by slot
// (1-8) in its rack: the classes and traits the documentation's examples ask for.
var sampleClasses = [8]struct {
	class  string
	traits []string
}{
	{"baremetal-storage", []string{"CUSTOM_25GBE", "CUSTOM_HDD_JBOD", "HW_CPU_X86_AVX2"}},
	{"baremetal-gold", []string{"CUSTOM_25GBE", "CUSTOM_NVME", "HW_CPU_X86_AVX512F"}},
	{"baremetal-gpu", []string{"CUSTOM_GPU_A100", "CUSTOM_NVME", "HW_CPU_X86_AVX512F"}},
	{"baremetal-silver", []string{"CUSTOM_10GBE", "CUSTOM_RAID", "HW_CPU_X86_AVX2"}},
	{"baremetal-silver", []string{"CUSTOM_10GBE", "HW_CPU_X86_AVX2"}},
	{"baremetal-gold", []string{"CUSTOM_100GBE", "CUSTOM_NVME", "HW_CPU_X86_AVX512F"}},
	{"baremetal-silver", []string{"CUSTOM_10GBE", "CUSTOM_RAID", "HW_CPU_X86_AVX2"}},
	{"baremetal-gold", []string{"CUSTOM_25GBE", "HW_CPU_X86_AVX512F"}},
}

// SampleNodes returns a node file (YAML, `openstack baremetal create`
// format plus traits, as `metalloc-manage node import` reads) of n nodes in
// racks of 8 and rows of 10 racks, for `dev up --nodes sample` when no node
// file is at hand: node r<row>-rack<rack>-n<slot> (r1-rack01-n2), driver
// fake-hardware, extra row, rack and slot, a trait
// CUSTOM_ROW<row>_RACK<rack>, and by slot one of the resource classes
// baremetal-gold (slots 2, 6, 8), baremetal-gpu (3), baremetal-silver (4,
// 5, 7) and baremetal-storage (1) with their traits (CUSTOM_NVME,
// CUSTOM_GPU_A100, ...). Uuids are derived from the names, so the same n
// gives the same file.
func SampleNodes(n int) []byte {
	var b strings.Builder
	b.WriteString("# metalloc-manage dev up --nodes sample: a generated sample fleet\nnodes:\n")
	for i := range n {
		row, rack, slot := i/80+1, i/8%10+1, i%8+1
		name := fmt.Sprintf("r%d-rack%02d-n%d", row, rack, slot)
		c := sampleClasses[slot-1]
		fmt.Fprintf(&b, "- name: %s\n  uuid: %s\n  driver: fake-hardware\n  resource_class: %s\n", name,
			uuid.NewHash(sha1.New(), uuid.NameSpaceOID, []byte("metalloc-sample/"+name), 5), c.class)
		fmt.Fprintf(&b, "  properties: {cpus: 64, memory_mb: 262144, local_gb: 1920, cpu_arch: x86_64}\n")
		fmt.Fprintf(&b, "  extra: {row: %d, rack: %d, slot: %d}\n  traits:\n", row, rack, slot)
		for _, t := range append([]string{fmt.Sprintf("CUSTOM_ROW%d_RACK%02d", row, rack)}, c.traits...) {
			fmt.Fprintf(&b, "  - %s\n", t)
		}
	}
	return []byte(b.String())
}
