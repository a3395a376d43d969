package node

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"reflect"
	"slices"
	"strings"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"go.yaml.in/yaml/v3"

	"github.com/metalloc/metalloc/web"
)

// ImportOptions configures Import.
type ImportOptions struct {
	// MakeAvailable drives every node in enroll (or manageable) through
	// manage -> power off -> provide, so it ends available with power state
	// "power off", ready for allocation. Nodes in other states are left as
	// they are (an available node without a power state is powered off).
	MakeAvailable bool
	// Driver validates drivers and interfaces and performs the power and
	// provisioning steps (nil = FakeDriver{}).
	Driver Driver
	// Ports imports each node's ports and portgroups (package port's
	// Importer; nil: they are skipped with a warning).
	Ports PortImporter
}

// PortImporter creates or updates the ports and port groups a node entry
// of an import file lists (package port implements it; cmd wiring injects
// it). It runs inside tx, which holds the row lock of node n, and returns
// how many ports and port groups it created or changed.
type PortImporter interface {
	ImportPorts(ctx context.Context, tx pgx.Tx, n Node, portgroups, ports []any) (PortCounts, error)
}

// PortCounts counts what a PortImporter created or changed.
type PortCounts struct {
	Ports, Portgroups int
}

// ImportResult counts what Import did.
type ImportResult struct {
	// Total is the number of nodes in the file.
	Total int
	// Created, Updated and Unchanged partition the nodes imported without
	// error.
	Created, Updated, Unchanged int
	// MadeAvailable counts nodes moved to available by MakeAvailable.
	MadeAvailable int
	// Nodes are the uuids of the nodes imported without error, in file
	// order.
	Nodes []uuid.UUID
	// Ports and Portgroups count the ports and port groups created or
	// changed.
	Ports, Portgroups int
	// Warnings are things in the file Import ignored (ports and port
	// groups when ImportOptions.Ports is nil).
	Warnings []string
}

// Import reads a file in the `openstack baremetal create` format (JSON or
// YAML: {"nodes": [{name, uuid, driver, driver_info, properties, extra,
// resource_class, traits: [...], ...}]}) and creates or updates each node:
// a node with a uuid matches an existing node by uuid, one without by name;
// a match gets the fields the file sets (and, when the file lists traits,
// exactly those traits), anything else is created (in enroll). Running it
// twice changes nothing the second time. Node fields are validated as POST
// /v1/nodes validates them at the newest microversion. A node's "ports" and
// "portgroups" (each port group with its own "ports") go to
// ImportOptions.Ports, in the transaction that creates the node (so a bad
// port leaves no node behind) or, for an existing node, in one holding its
// row lock; chassis are refused.
//
// progress, if not nil, is called with (done, total) after each node. A
// failing node does not stop the import: Import carries on and returns the
// failures joined, each naming its node.
func Import(ctx context.Context, store *Store, r io.Reader, opts ImportOptions, progress func(done, total int)) (ImportResult, error) {
	var res ImportResult
	if opts.Driver == nil {
		opts.Driver = FakeDriver{}
	}
	if err := loadSchemas(); err != nil {
		return res, err
	}
	nodes, err := readImportFile(r)
	if err != nil {
		return res, err
	}
	res.Total = len(nodes)
	var errs []error
	for i, raw := range nodes {
		label := fmt.Sprintf("node %d", i+1)
		if m, ok := raw.(map[string]any); ok {
			if s, ok := m["name"].(string); ok {
				label += " (" + s + ")"
			} else if s, ok := m["uuid"].(string); ok {
				label += " (" + s + ")"
			}
		}
		if err := importOne(ctx, store, raw, opts, &res); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", label, err))
		}
		if progress != nil {
			progress(i+1, len(nodes))
		}
		if ctx.Err() != nil {
			errs = append(errs, ctx.Err())
			break
		}
	}
	return res, errors.Join(errs...)
}

// readImportFile decodes the file (YAML, of which JSON is a subset) into
// generic JSON values and returns its node list.
func readImportFile(r io.Reader) ([]any, error) {
	raw, err := io.ReadAll(r)
	if err != nil {
		return nil, fmt.Errorf("reading node file: %w", err)
	}
	var doc any
	if err := yaml.Unmarshal(raw, &doc); err != nil {
		return nil, fmt.Errorf("node file is neither valid JSON nor valid YAML: %w", err)
	}
	// Round-trip through JSON so values have the types request bodies have.
	b, err := json.Marshal(doc)
	if err != nil {
		return nil, fmt.Errorf("node file holds values JSON cannot represent: %w", err)
	}
	if doc, err = decodeJSON(b); err != nil {
		return nil, fmt.Errorf("node file: %w", err)
	}
	top, ok := doc.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("node file: the top level must be an object with a \"nodes\" list")
	}
	for k, v := range top {
		switch k {
		case "nodes":
		case "chassis":
			if l, ok := v.([]any); !ok || len(l) > 0 {
				return nil, fmt.Errorf("node file: chassis are not supported by metalloc")
			}
		default:
			return nil, fmt.Errorf("node file: unknown top-level key %q (expected \"nodes\")", k)
		}
	}
	nodes, ok := top["nodes"].([]any)
	if !ok && top["nodes"] != nil {
		return nil, fmt.Errorf("node file: \"nodes\" must be a list")
	}
	return nodes, nil
}

func importOne(ctx context.Context, store *Store, raw any, opts ImportOptions, res *ImportResult) error {
	doc, ok := raw.(map[string]any)
	if !ok {
		return fmt.Errorf("expected an object, got %s", web.PyRepr(raw))
	}
	doc = maps.Clone(doc)
	var traits []string
	traitsSet := false
	if t, ok := doc["traits"]; ok {
		delete(doc, "traits")
		list, ok := t.([]any)
		if !ok && t != nil {
			return fmt.Errorf("traits must be a list")
		}
		traitsSet = true
		for _, x := range list {
			s, ok := x.(string)
			if !ok {
				return fmt.Errorf("trait %s is not a string", web.PyRepr(x))
			}
			traits = append(traits, s)
		}
	}
	var lists [2][]any // portgroups, ports
	for i, k := range []string{"portgroups", "ports"} {
		if v, ok := doc[k]; ok {
			delete(doc, k)
			l, ok := v.([]any)
			if !ok && v != nil {
				return fmt.Errorf("%s must be a list", k)
			}
			lists[i] = l
		}
	}
	hasPorts := len(lists[0])+len(lists[1]) > 0
	if hasPorts && opts.Ports == nil {
		res.Warnings = append(res.Warnings, fmt.Sprintf("%v: ports and portgroups ignored", doc["name"]))
		hasPorts = false
	}
	var counts PortCounts
	importPorts := func(tx pgx.Tx, n Node) (err error) {
		counts, err = opts.Ports.ImportPorts(ctx, tx, n, lists[0], lists[1])
		return err
	}
	if err := validateSchema(createSchema, "node", doc); err != nil {
		return err
	}
	n, err := nodeFromCreate(web.IronicMaxVersion, doc)
	if err != nil {
		return err
	}
	if traitsSet {
		if n.Traits, err = normaliseTraits(n.UUID, traits); err != nil {
			return err
		}
	}

	existing, found, err := findExisting(ctx, store, doc)
	if err != nil {
		return err
	}
	var cur Node
	if !found {
		if err := opts.Driver.Validate(ctx, &n); err != nil {
			return err
		}
		var then func(pgx.Tx, Node) error
		if hasPorts {
			then = importPorts
		}
		if cur, err = store.CreateWith(ctx, n, then); err != nil {
			return err
		}
		res.Created++
	} else {
		want := existing.Clone()
		applyImported(&want, n, doc)
		if err := opts.Driver.Validate(ctx, &want); err != nil {
			return err
		}
		changed := !reflect.DeepEqual(patchDocument(&existing), patchDocument(&want)) ||
			existing.ConsoleEnabled != want.ConsoleEnabled
		traitsChanged := traitsSet && !slices.Equal(existing.Traits, n.Traits)
		cur = existing
		if changed {
			if cur, err = store.Update(ctx, existing.UUID.String(), opts.Driver, nil, func(x *Node) error {
				applyImported(x, n, doc)
				return nil
			}); err != nil {
				return err
			}
		}
		if traitsChanged {
			if cur, err = store.SetTraits(ctx, existing.UUID.String(), n.Traits); err != nil {
				return err
			}
		}
		if hasPorts {
			if err := store.Locked(ctx, existing.UUID.String(), importPorts); err != nil {
				return err
			}
		}
		if changed || traitsChanged || counts != (PortCounts{}) {
			res.Updated++
		} else {
			res.Unchanged++
		}
	}
	res.Nodes = append(res.Nodes, cur.UUID)
	res.Ports += counts.Ports
	res.Portgroups += counts.Portgroups
	if opts.MakeAvailable {
		made, err := makeAvailable(ctx, store, cur, opts.Driver)
		if err != nil {
			return err
		}
		if made {
			res.MadeAvailable++
		}
	}
	return nil
}

// findExisting finds the node a file entry refers to: by uuid when it has
// one, else by name.
func findExisting(ctx context.Context, store *Store, doc map[string]any) (Node, bool, error) {
	ident := ""
	if s, ok := doc["uuid"].(string); ok && s != "" {
		ident = s
	} else if s, ok := doc["name"].(string); ok && s != "" {
		ident = s
	}
	if ident == "" {
		return Node{}, false, nil
	}
	n, err := store.Get(ctx, ident)
	if errors.Is(err, ErrNotFound) {
		return Node{}, false, nil
	}
	if err != nil {
		return Node{}, false, err
	}
	return n, true, nil
}

// applyImported sets on dst the fields the file entry doc names, taking the
// values from the parsed node src.
func applyImported(dst *Node, src Node, doc map[string]any) {
	for k := range doc {
		switch k {
		case "name":
			dst.Name = src.Name
		case "driver":
			dst.Driver = src.Driver
		case "resource_class":
			dst.ResourceClass = src.ResourceClass
		case "owner":
			dst.Owner = src.Owner
		case "lessee":
			dst.Lessee = src.Lessee
		case "description":
			dst.Description = src.Description
		case "shard":
			dst.Shard = src.Shard
		case "retired_reason":
			dst.RetiredReason = src.RetiredReason
		case "retired":
			dst.Retired = src.Retired
		case "conductor_group":
			dst.ConductorGroup = src.ConductorGroup
		case "properties":
			dst.Properties = src.Properties
		case "extra":
			dst.Extra = src.Extra
		case "instance_info":
			dst.InstanceInfo = src.InstanceInfo
		case "driver_info":
			dst.DriverInfo = src.DriverInfo
		case "network_data":
			dst.NetworkData = src.NetworkData
		case "automated_clean":
			dst.AutomatedClean = src.AutomatedClean
		case "maintenance":
			dst.Maintenance = src.Maintenance
		case "console_enabled":
			dst.ConsoleEnabled = src.ConsoleEnabled
		case "instance_uuid":
			dst.InstanceUUID = src.InstanceUUID
		default:
			if strings.HasSuffix(k, "_interface") && slices.Contains(InterfaceFields, k) {
				if dst.Interfaces == nil {
					dst.Interfaces = map[string]string{}
				}
				if v, ok := src.Interfaces[k]; ok {
					dst.Interfaces[k] = v
				} else {
					delete(dst.Interfaces, k)
				}
			}
		}
	}
}

// makeAvailable drives n to available with power off (see ImportOptions).
func makeAvailable(ctx context.Context, store *Store, n Node, drv Driver) (bool, error) {
	id := n.UUID.String()
	var err error
	if n.ProvisionState == StateEnroll {
		if n, err = store.Provision(ctx, id, ProvisionRequest{Target: TargetManage}, drv, nil); err != nil {
			return false, fmt.Errorf("manage: %w", err)
		}
	}
	if n.ProvisionState != StateManageable && n.ProvisionState != StateAvailable {
		return false, nil
	}
	if deref(n.PowerState) != PowerOff && (n.ProvisionState == StateManageable || n.PowerState == nil) {
		if n, err = store.SetPowerState(ctx, id, PowerOff, drv); err != nil {
			return false, fmt.Errorf("power off: %w", err)
		}
		if n.LastError != nil && deref(n.PowerState) != PowerOff {
			return false, fmt.Errorf("power off: %s", *n.LastError)
		}
	}
	if n.ProvisionState != StateManageable {
		return false, nil
	}
	if n, err = store.Provision(ctx, id, ProvisionRequest{Target: TargetProvide}, drv, nil); err != nil {
		return false, fmt.Errorf("provide: %w", err)
	}
	if n.ProvisionState != StateAvailable {
		return false, fmt.Errorf("provide left the node in %q: %s", n.ProvisionState, deref(n.LastError))
	}
	return true, nil
}
