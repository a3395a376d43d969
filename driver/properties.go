package driver

import "maps"

// The driver properties (GET /v1/drivers/{name}/properties): the
// driver_info keys the default interfaces of a hardware type read, each
// with a description in metalloc's words. The keys are Ironic 21.4's for
// the same interfaces; metalloc reads none of them (it drives no hardware)
// but stores and shows them on nodes, so tools that fill driver_info from
// this list work unchanged.

// fakeProperties are fake-hardware's: its fake vendor interface documents
// two placeholder keys.
var fakeProperties = map[string]string{
	"B1": "First placeholder key of the fake vendor interface. Required.",
	"B2": "Second placeholder key of the fake vendor interface. Required.",
}

// ipmiProperties are ipmi's: IPMI access (ipmitool power, management and
// vendor), the deploy ramdisk (ipxe boot, direct deploy) and rescue.
var ipmiProperties = map[string]string{
	"ipmi_address":                 "Address (IP or host name) of the node's BMC. Required.",
	"ipmi_username":                "BMC user name; the null user when unset. Optional.",
	"ipmi_password":                "BMC password. Optional.",
	"ipmi_hex_kg_key":              "Kg key (hexadecimal) for IPMI 2.0 authentication. Optional.",
	"ipmi_port":                    "BMC RMCP port. Optional.",
	"ipmi_priv_level":              "Privilege level: ADMINISTRATOR (default), CALLBACK, OPERATOR or USER. Optional.",
	"ipmi_bridging":                "Bridging type: \"no\" (default), \"single\" or \"dual\". Optional.",
	"ipmi_transit_channel":         "Transit channel of a bridged request; needed with dual bridging.",
	"ipmi_transit_address":         "Transit address of a bridged request; needed with dual bridging.",
	"ipmi_target_channel":          "Destination channel of a bridged request; needed with single or dual bridging.",
	"ipmi_target_address":          "Destination address of a bridged request; needed with single or dual bridging.",
	"ipmi_local_address":           "Local IPMB address of bridged requests (single or dual bridging). Optional.",
	"ipmi_protocol_version":        "IPMI protocol version: \"2.0\" (default) or \"1.5\". Optional.",
	"ipmi_force_boot_device":       "Set the boot device at every power on, for BMCs that forget it; false by default. Optional.",
	"ipmi_disable_boot_timeout":    "Whether to disable the BMC's 60 second boot timeout (default: the service setting). Optional.",
	"ipmi_cipher_suite":            "IPMI cipher suite number (3 or 17; 17 preferred). Optional.",
	"deploy_kernel":                "Image (UUID or URL) of the deploy ramdisk's kernel. Required.",
	"deploy_ramdisk":               "Image (UUID or URL) of the deploy ramdisk. Required.",
	"image_http_proxy":             "Proxy for HTTP image downloads. Optional.",
	"image_https_proxy":            "Proxy for HTTPS image downloads. Optional.",
	"image_no_proxy":               "Comma-separated hosts, addresses and .domains downloaded without the proxies. Optional.",
	"image_download_source":        "Where the deploy ramdisk fetches the image: \"swift\", \"http\" or \"local\". Optional.",
	"deploy_forces_oob_reboot":     "Reboot out of band after the deployment; false by default. Optional.",
	"agent_verify_ca":              "TLS verification of the agent: true (default), false, or a CA bundle file or directory. Optional.",
	"force_persistent_boot_device": "Persistence of boot device changes: \"Always\", \"Default\" or \"Never\". Optional.",
	"rescue_kernel":                "Image (UUID or URL) of the rescue ramdisk's kernel; needed for rescue.",
	"rescue_ramdisk":               "Image (UUID or URL) of the rescue ramdisk; needed for rescue.",
	"kernel_append_params":         "Extra kernel command line for the instance (%default% inserts the service default). Optional.",
}

// raidLogicalDiskProperties describe the keys of a logical disk in a
// target RAID configuration (GET /v1/drivers/{name}/raid/logical_disk_
// properties); the keys are raid_schema.json's.
var raidLogicalDiskProperties = map[string]string{
	"raid_level":               "RAID level: one of 'JBOD', '0', '1', '2', '5', '6', '1+0', '5+0', '6+0'. Required.",
	"size_gb":                  "Size in GiB (an integer), or 'MAX' for the rest of the space. Required.",
	"volume_name":              "Name of the volume (generated when unset). Optional.",
	"is_root_volume":           "Whether this disk is the root volume; false by default. Optional.",
	"share_physical_disks":     "Whether other logical disks may share its physical disks; false by default. Optional.",
	"disk_type":                "Preferred disk type, 'hdd' or 'ssd' (any when unset). Optional.",
	"interface_type":           "Preferred disk interface, 'sata', 'scsi' or 'sas' (any when unset). Optional.",
	"number_of_physical_disks": "Number of physical disks to use (the level's minimum when unset). Optional.",
	"controller":               "RAID controller to use (chosen by the driver when unset). Optional.",
	"physical_disks":           "Physical disks to use (chosen by the driver when unset). Optional.",
}

// RAIDLogicalDiskProperties returns the descriptions of a logical disk's
// keys (a fresh map).
func RAIDLogicalDiskProperties() map[string]string { return maps.Clone(raidLogicalDiskProperties) }

// PropertiesOf returns t's driver properties (a fresh map).
func (t *HardwareType) PropertiesOf() map[string]string { return maps.Clone(t.Properties) }
