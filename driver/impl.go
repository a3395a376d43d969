package driver

import (
	"bytes"
	_ "embed"
	"fmt"
	"slices"
	"sync"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/metalloc/metalloc/web"
)

// What each interface implementation answers when the node API asks it
// something. metalloc drives no hardware: the fake implementations answer
// as Ironic's fake ones do, the others as far as they can without a BMC or
// a network service (validation of the node's own data, RAID
// configurations, VIFs on ports); what needs the hardware is refused as a
// driver without the feature is (Unsupported).

// ValidatedInterfaces are the interface types GET /v1/nodes/{id}/validate
// reports, Ironic's core then optional interfaces (vendor needs a method
// and is not validated there).
var ValidatedInterfaces = []string{"boot", "deploy", "management", "network", "power",
	"bios", "console", "inspect", "raid", "rescue", "storage"}

// NodeFacts is what an implementation looks at when validating a node.
type NodeFacts struct {
	UUID, Driver     string
	DriverInfo       map[string]any
	InstanceInfo     map[string]any
	TargetRAIDConfig map[string]any
	// Ports is how many ports the node has.
	Ports int
}

// Validation is one interface's line of a validate answer.
type Validation struct {
	Result bool
	// Reason says why Result is false ("" when true).
	Reason string
}

// Unsupported is Ironic's UnsupportedDriverExtension message for driver
// and an interface type or method.
func Unsupported(driver, extension string) string {
	return fmt.Sprintf("Driver %s does not support %s (disabled or not implemented).", driver, extension)
}

// noInterfaces are the implementations that stand for "no such feature".
var noInterfaces = []string{"no-bios", "no-console", "no-inspect", "no-raid", "no-rescue", "no-vendor"}

// Validate is Ironic's validate of one interface (ifaceType, implemented by
// impl) for the node f: its result and, when it fails, the reason.
func Validate(f NodeFacts, ifaceType, impl string) Validation {
	fail := func(format string, args ...any) Validation {
		return Validation{Reason: fmt.Sprintf(format, args...)}
	}
	switch {
	case slices.Contains(noInterfaces, impl):
		return fail("%s", Unsupported(f.Driver, ifaceType))
	case impl == "ipxe" || impl == "pxe":
		if f.Ports == 0 {
			return fail("Node %s does not have any port associated with it", f.UUID)
		}
		if m := missing(f.DriverInfo, "", "deploy_kernel", "deploy_ramdisk"); m != "" {
			return fail("Cannot validate PXE bootloader. Some parameters were missing in node's driver_info and configuration. Missing are: %s", m)
		}
	case impl == "direct":
		if f.Ports == 0 {
			return fail("Node %s does not have any port associated with it", f.UUID)
		}
		if m := missing(f.InstanceInfo, "instance_info.", "image_source"); m != "" {
			return fail("Node %s failed to validate deploy image info. Some parameters were missing. Missing are: %s", f.UUID, m)
		}
	case impl == "ipmitool" && (ifaceType == "power" || ifaceType == "management"):
		if m := missing(f.DriverInfo, "", "ipmi_address"); m != "" {
			return fail("Missing the following IPMI credentials in node's driver_info: %s.", m)
		}
	case ifaceType == "raid" && len(f.TargetRAIDConfig) > 0:
		if err := ValidateRAIDConfig(f.TargetRAIDConfig); err != nil {
			return fail("%s", err.Message)
		}
	}
	return Validation{Result: true}
}

// missing lists, as a Python list, the keys of info that are unset or
// empty (each with prefix), "" when none is.
func missing(info map[string]any, prefix string, keys ...string) string {
	var out []string
	for _, k := range keys {
		if v, ok := info[k]; !ok || v == nil || v == "" {
			out = append(out, prefix+k)
		}
	}
	if len(out) == 0 {
		return ""
	}
	return web.PyRepr(out)
}

// SupportsRAID reports whether a RAID implementation takes target RAID
// configurations (fake and agent; no-raid does not).
func SupportsRAID(impl string) bool { return impl == "fake" || impl == "agent" }

//go:embed raid_schema.json
var raidSchemaJSON []byte

var (
	raidOnce   sync.Once
	raidSchema *jsonschema.Schema
	raidErr    error
)

// ValidateRAIDConfig checks a target RAID configuration against Ironic's
// RAID schema (raid_schema.json, draft 4) and its one-root-volume rule, as
// the RAID interfaces' validate_raid_config does: *Invalid with "RAID config
// validation error: <python-jsonschema's message>" or the root volume
// message. An empty configuration is the caller's business (it clears).
func ValidateRAIDConfig(cfg map[string]any) *Invalid {
	raidOnce.Do(func() {
		doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(raidSchemaJSON))
		if err != nil {
			raidErr = err
			return
		}
		schs, err := web.CompileSchemas(map[string]any{"raid.json": doc})
		if err != nil {
			raidErr = err
			return
		}
		raidSchema = schs["raid.json"]
	})
	if raidErr != nil {
		panic(fmt.Sprintf("driver: RAID schema: %v", raidErr)) // a bad embedded schema; any test catches it
	}
	if err := raidSchema.Validate(any(cfg)); err != nil {
		return invalidf("RAID config validation error: %s", web.SchemaMessage(err, cfg))
	}
	roots := 0
	for _, d := range cfg["logical_disks"].([]any) {
		if m, ok := d.(map[string]any); ok && m["is_root_volume"] == true {
			roots++
		}
	}
	if roots > 1 {
		return invalidf("Raid config cannot have more than one root volume. %d root volumes were specified", roots)
	}
	return nil
}
