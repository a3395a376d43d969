// Package examples holds the sample fleet the documentation uses, so that a
// plain clone (and an installed metalloc-manage) has it: dc1-nodes.yaml is
// 240 nodes of a data centre of 3 rows of 10 racks of 8 (name
// r<row>-rack<rack>-n<slot>, driver fake-hardware, extra row, rack and slot,
// a CUSTOM_ROW<row>_RACK<rack> trait; resource classes baremetal-gold, -gpu,
// -silver and -storage with traits such as CUSTOM_NVME), in the format
// `openstack baremetal create` reads plus traits (`metalloc-manage node
// import`). `make run` imports it; `dev up --nodes sample` imports the copy
// built into the binary.
package examples

import _ "embed"

// DC1Nodes is dc1-nodes.yaml as built in: `dev up --nodes sample` imports
// it. Do not modify.
//
//go:embed dc1-nodes.yaml
var DC1Nodes []byte
