// Package driver is metalloc's registry of hardware types (Ironic's
// "drivers"): which hardware types a conductor serves, which interface
// implementations each enables and which it uses by default, the driver
// properties they document, and what each implementation does when the API
// asks it something (validate, RAID, boot devices, indicators, VIFs, vendor
// methods). It is defined once, here: conductors register Names() in their
// conductors row, the node API checks drivers and interfaces against it
// (Lookup, HardwareType.Check), and package driver/driverapi serves it as
// Ironic's /v1/drivers.
//
// metalloc drives no hardware. The registry mirrors what an Ironic 21.4
// conductor with these settings reports, so that clients see what they
// expect:
//
//	enabled_hardware_types = fake-hardware, ipmi
//	enabled_<type>_interfaces = the union of Interfaces below
//
// fake-hardware matches the reference deployment (fake interfaces, noop
// network and storage; flat, agent RAID, ipxe/pxe boot and direct deploy
// are enabled too, as an Ironic with those enabled lists them). ipmi is
// there because clients written against devstack (gophercloud's acceptance
// tests) enrol ipmi nodes with ipxe boot and agent RAID; its operations
// complete at once like fake-hardware's.
//
// Everything here is pure data and functions: no database, no HTTP.
package driver
