package node

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"reflect"
	"slices"
	"strings"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/metalloc/metalloc/db"
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
// row lock; chassis are refused. Entries with ports take the per-node path,
// not the bulk COPY of new nodes.
//
// New nodes are written importChunk at a time (COPY); an import that
// created or changed analyzeAfter nodes or more vacuums and analyzes the
// node tables (VacuumAnalyzeNodes).
//
// progress, if not nil, is called with (done, total) for each node, once
// the chunk of up to importChunk entries it was imported with is done. A
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
	file, err := openImportFile(r)
	if err != nil {
		return res, err
	}
	res.Total = file.total
	// Two stages: one goroutine reads and prepares the next chunk while
	// this one writes the current (prepareChunk needs no database).
	pctx, cancel := context.WithCancel(ctx)
	prepared := make(chan *preparedChunk, 1)
	go func() {
		defer close(prepared)
		for lo := 0; lo < file.total; lo += importChunk {
			nodes, err := file.next(importChunk)
			p := &preparedChunk{first: lo, err: err}
			if err == nil {
				p = prepareChunk(pctx, store, nodes, lo, opts)
			}
			select {
			case prepared <- p:
			case <-pctx.Done():
				return
			}
			if err != nil {
				return
			}
		}
	}()
	defer func() {
		cancel()
		for range prepared { // let the reader go
		}
	}()
	var errs []error
	for p := range prepared {
		if p.err != nil {
			return res, errors.Join(append(errs, p.err)...)
		}
		errs = append(errs, writeChunk(ctx, store, p, opts, &res)...)
		for done := p.first + 1; progress != nil && done <= p.first+len(p.nodes); done++ {
			progress(done, file.total)
		}
		if ctx.Err() != nil {
			errs = append(errs, ctx.Err())
			break
		}
	}
	if res.Created+res.Updated+res.MadeAvailable >= analyzeAfter && ctx.Err() == nil {
		if err := store.q.VacuumAnalyzeNodes(ctx); err != nil {
			errs = append(errs, fmt.Errorf("vacuuming and analyzing the imported nodes: %w", err))
		}
	}
	return res, errors.Join(errs...)
}

// analyzeAfter is how many nodes an import must create or change before it
// vacuums and analyzes nodes and node_traits itself: autovacuum would, but
// only after its naptime, and plans made meanwhile by conductors and the
// API would see a table that is still empty, or still in enroll.
const analyzeAfter = 1000

// importChunk is how many file entries Import handles together: new nodes
// among them are written by one transaction (COPY).
const importChunk = 1000

// importLabel names file entry i (0-based) in errors.
func importLabel(i int, raw any) string {
	label := fmt.Sprintf("node %d", i+1)
	if m, ok := raw.(map[string]any); ok {
		if s, ok := m["name"].(string); ok {
			label += " (" + s + ")"
		} else if s, ok := m["uuid"].(string); ok {
			label += " (" + s + ")"
		}
	}
	return label
}

// preparedChunk is a chunk of file entries as prepareChunk leaves it for
// writeChunk: what needs no database.
type preparedChunk struct {
	nodes []any // the entries; the first is entry first of the file
	first int
	// entries[i] is nil when entry i is invalid (prepErrs[i] says why).
	entries  []*importEntry
	prepErrs []error
	// fresh[i] is entry i as a new node would be written, computed for
	// every valid entry without ports (writeChunk uses it only when the
	// entry names no existing node).
	fresh    []*freshNode
	warnings []string
	err      error // reading the file
}

// freshNode is an entry driven to its final state in memory, with its
// COPY row, or the error newImported gave.
type freshNode struct {
	node Node
	made bool
	row  CopyNodesParams
	err  error
}

// prepareChunk validates the file entries nodes and computes each one as
// a new node (the same state machine the API runs), without the database:
// Import runs it for the next chunk while writeChunk writes this one.
func prepareChunk(ctx context.Context, store *Store, nodes []any, first int, opts ImportOptions) *preparedChunk {
	p := &preparedChunk{nodes: nodes, first: first, entries: make([]*importEntry, len(nodes)),
		prepErrs: make([]error, len(nodes)), fresh: make([]*freshNode, len(nodes))}
	var res ImportResult // prepareImport's warnings
	for i, raw := range nodes {
		e, err := prepareImport(raw, opts, &res)
		if err != nil {
			p.prepErrs[i] = err
			continue
		}
		p.entries[i] = e
		if e.hasPorts() {
			continue
		}
		f := &freshNode{}
		if f.node, f.made, f.err = store.newImported(ctx, e, opts); f.err == nil {
			f.row, f.err = copyRow(f.node)
		}
		p.fresh[i] = f
	}
	p.warnings = res.Warnings
	return p
}

// writeChunk imports a prepared chunk. Entries that name no existing node
// and no other entry of the chunk are new: they are written together in
// one transaction. The rest, and every new entry again if that
// transaction fails (a node created meanwhile), go through applyImport,
// one transaction per step, in file order.
func writeChunk(ctx context.Context, store *Store, p *preparedChunk, opts ImportOptions, res *ImportResult) []error {
	var errs []error
	fail := func(i int, err error) {
		errs = append(errs, fmt.Errorf("%s: %w", importLabel(p.first+i, p.nodes[i]), err))
	}
	res.Warnings = append(res.Warnings, p.warnings...)
	entries := p.entries
	var uuids []uuid.UUID
	var names []string
	for i, e := range entries {
		if e == nil {
			fail(i, p.prepErrs[i])
			continue
		}
		uuids = append(uuids, e.node.UUID)
		if e.node.Name != nil {
			names = append(names, *e.node.Name)
		}
	}
	existing, err := store.q.ExistingNodeIdents(ctx, ExistingNodeIdentsParams{Uuids: uuids, Names: names})
	if err != nil {
		return append(errs, fmt.Errorf("looking up existing nodes: %w", err))
	}
	taken := map[string]bool{}
	for _, r := range existing {
		taken["u"+r.Uuid.String()] = true
		if r.Name != nil {
			taken["n"+*r.Name] = true
		}
	}
	done := make([]*uuid.UUID, len(entries))
	var fresh []int
	var nodes []Node
	var rows []CopyNodesParams
	for i, e := range entries {
		if e == nil {
			continue
		}
		keys := []string{}
		if _, set := e.doc["uuid"].(string); set && e.node.UUID != uuid.Nil {
			keys = append(keys, "u"+e.node.UUID.String())
		}
		if e.node.Name != nil {
			keys = append(keys, "n"+*e.node.Name)
		}
		clash := false
		for _, k := range keys {
			clash = clash || taken[k]
			taken[k] = true
		}
		if clash || e.hasPorts() {
			continue
		}
		f := p.fresh[i]
		if f.err != nil {
			fail(i, f.err)
			entries[i] = nil
			continue
		}
		e.made = f.made
		fresh = append(fresh, i)
		nodes, rows = append(nodes, f.node), append(rows, f.row)
	}
	if err := store.insertImported(ctx, nodes, rows); err == nil {
		for k, i := range fresh {
			done[i] = &nodes[k].UUID
			res.Created++
			if entries[i].made {
				res.MadeAvailable++
			}
		}
	} else if ctx.Err() != nil {
		return append(errs, err)
	}
	for i, e := range entries {
		if e == nil || done[i] != nil {
			continue
		}
		u, err := applyImport(ctx, store, e, opts, res)
		if u != uuid.Nil {
			done[i] = &u
		}
		if err != nil {
			fail(i, err)
		}
	}
	for _, u := range done {
		if u != nil {
			res.Nodes = append(res.Nodes, *u)
		}
	}
	return errs
}

// importEntry is a validated file entry.
type importEntry struct {
	doc       map[string]any
	node      Node
	traitsSet bool
	made      bool
	// portgroups and ports are the entry's lists (nil without a
	// PortImporter).
	portgroups, ports []any
}

// hasPorts reports whether the entry brings ports or port groups.
func (e *importEntry) hasPorts() bool { return len(e.portgroups)+len(e.ports) > 0 }

// newImported is the node a new entry creates, as Store.Create would store
// it, driven to available in memory when opts says so (with the state
// machine of Store.Provision and Store.SetPowerState).
func (s *Store) newImported(ctx context.Context, e *importEntry, opts ImportOptions) (Node, bool, error) {
	n := e.node.Clone()
	if err := opts.Driver.Validate(ctx, &n); err != nil {
		return Node{}, false, err
	}
	if n.UUID == uuid.Nil {
		n.UUID = uuid.New()
	}
	if n.ProvisionState == "" {
		n.ProvisionState = StateEnroll
	}
	n.ConductorGroup = strings.ToLower(n.ConductorGroup)
	if n.ProvisionUpdatedAt == nil {
		n.ProvisionUpdatedAt = ptr(s.now().UTC())
	}
	if !opts.MakeAvailable {
		return n, false, nil
	}
	before := n.Clone()
	made, err := makeAvailable(n, opts.Driver, func(n Node, req ProvisionRequest) (Node, error) {
		err := s.applyProvision(ctx, nil, &n, req, opts.Driver, nil)
		return n, err
	}, func(n Node, target string) (Node, error) {
		err := applyPower(ctx, &n, n.UUID.String(), target, opts.Driver)
		return n, err
	}, func(m Node) { n = m })
	if err != nil {
		return Node{}, false, err
	}
	if !reflect.DeepEqual(before, n) {
		n.UpdatedAt = ptr(s.now().UTC())
	}
	return n, made, nil
}

// copyRow is n's row for CopyNodes.
func copyRow(n Node) (CopyNodesParams, error) {
	p, err := insertParams(n)
	if err != nil {
		return CopyNodesParams{}, err
	}
	return CopyNodesParams{p.Uuid, p.Name, p.Driver, p.ResourceClass, p.ProvisionState, p.TargetProvisionState,
		p.ProvisionUpdatedAt, p.PowerState, p.TargetPowerState, p.Maintenance, p.MaintenanceReason,
		p.Fault, p.LastError, p.InstanceUuid, p.Owner, p.Lessee, p.Description, p.ConductorGroup,
		p.Protected, p.ProtectedReason, p.Retired, p.RetiredReason, p.AutomatedClean, p.ConsoleEnabled,
		p.Shard, p.Properties, p.Extra, p.InstanceInfo, p.DriverInfo, p.DriverInternalInfo, p.Interfaces,
		p.NetworkData, p.RaidConfig, p.TargetRaidConfig, n.UpdatedAt, n.Reservable}, nil
}

// insertImported writes new nodes (rows[i] is nodes[i]'s, copyRow) and
// their traits in one transaction.
func (s *Store) insertImported(ctx context.Context, nodes []Node, rows []CopyNodesParams) error {
	if len(nodes) == 0 {
		return nil
	}
	uuids := make([]uuid.UUID, len(nodes))
	for i, n := range nodes {
		uuids[i] = n.UUID
	}
	return db.InTx(ctx, s.pool, func(tx pgx.Tx) error {
		q := s.q.WithTx(tx)
		if _, err := q.CopyNodes(ctx, rows); err != nil {
			return fmt.Errorf("writing nodes: %w", err)
		}
		ids, err := q.NodeIDsByUUID(ctx, uuids)
		if err != nil {
			return fmt.Errorf("reading node ids: %w", err)
		}
		byUUID := make(map[uuid.UUID]int64, len(ids))
		for _, r := range ids {
			byUUID[r.Uuid] = r.ID
		}
		var traits []CopyNodeTraitsParams
		for _, n := range nodes {
			for _, t := range n.Traits {
				traits = append(traits, CopyNodeTraitsParams{NodeID: byUUID[n.UUID], Trait: t})
			}
		}
		if _, err := q.CopyNodeTraits(ctx, traits); err != nil {
			return fmt.Errorf("writing node traits: %w", err)
		}
		return nil
	})
}

// prepareImport validates one file entry and parses it as a node.
func prepareImport(raw any, opts ImportOptions, res *ImportResult) (*importEntry, error) {
	doc, ok := raw.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("expected an object, got %s", web.PyRepr(raw))
	}
	doc = maps.Clone(doc)
	var traits []string
	traitsSet := false
	if t, ok := doc["traits"]; ok {
		delete(doc, "traits")
		list, ok := t.([]any)
		if !ok && t != nil {
			return nil, fmt.Errorf("traits must be a list")
		}
		traitsSet = true
		for _, x := range list {
			s, ok := x.(string)
			if !ok {
				return nil, fmt.Errorf("trait %s is not a string", web.PyRepr(x))
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
				return nil, fmt.Errorf("%s must be a list", k)
			}
			lists[i] = l
		}
	}
	if len(lists[0])+len(lists[1]) > 0 && opts.Ports == nil {
		res.Warnings = append(res.Warnings, fmt.Sprintf("%v: ports and portgroups ignored", doc["name"]))
		lists = [2][]any{}
	}
	// reservable is metalloc's (leases, issue 43), not in Ironic's create
	// schema: checked here, kept in doc so that applyImported sets it.
	reservable, reservableSet := doc["reservable"]
	delete(doc, "reservable")
	if _, ok := reservable.(bool); reservableSet && !ok {
		return nil, fmt.Errorf("reservable must be true or false, not %s", web.PyRepr(reservable))
	}
	if err := validateSchema(createSchema, "node", doc); err != nil {
		return nil, err
	}
	n, err := nodeFromCreate(web.IronicMaxVersion, doc)
	if err != nil {
		return nil, err
	}
	if reservableSet {
		n.Reservable = reservable.(bool)
		doc["reservable"] = reservable
	}
	if traitsSet {
		if n.Traits, err = normaliseTraits(n.UUID, traits); err != nil {
			return nil, err
		}
	}
	return &importEntry{doc: doc, node: n, traitsSet: traitsSet, portgroups: lists[0], ports: lists[1]}, nil
}

// applyImport creates or updates the node of one prepared entry, one
// transaction per step, and returns its uuid.
func applyImport(ctx context.Context, store *Store, e *importEntry, opts ImportOptions, res *ImportResult) (uuid.UUID, error) {
	doc, n, traitsSet := e.doc, e.node, e.traitsSet
	existing, found, err := findExisting(ctx, store, doc)
	if err != nil {
		return uuid.Nil, err
	}
	var counts PortCounts
	var importPorts func(pgx.Tx, Node) error
	if e.hasPorts() {
		importPorts = func(tx pgx.Tx, n Node) (err error) {
			counts, err = opts.Ports.ImportPorts(ctx, tx, n, e.portgroups, e.ports)
			return err
		}
	}
	var cur Node
	if !found {
		if err := opts.Driver.Validate(ctx, &n); err != nil {
			return uuid.Nil, err
		}
		if cur, err = store.CreateWith(ctx, n, importPorts); err != nil {
			return uuid.Nil, err
		}
		res.Created++
	} else {
		want := existing.Clone()
		applyImported(&want, n, doc)
		if err := opts.Driver.Validate(ctx, &want); err != nil {
			return uuid.Nil, err
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
				return uuid.Nil, err
			}
		}
		if traitsChanged {
			if cur, err = store.SetTraits(ctx, existing.UUID.String(), n.Traits); err != nil {
				return uuid.Nil, err
			}
		}
		if importPorts != nil {
			if err := store.Locked(ctx, existing.UUID.String(), importPorts); err != nil {
				return uuid.Nil, err
			}
		}
		if changed || traitsChanged || counts != (PortCounts{}) {
			res.Updated++
		} else {
			res.Unchanged++
		}
	}
	res.Ports += counts.Ports
	res.Portgroups += counts.Portgroups
	if opts.MakeAvailable {
		id := cur.UUID.String()
		made, err := makeAvailable(cur, opts.Driver, func(_ Node, req ProvisionRequest) (Node, error) {
			return store.Provision(ctx, id, req, opts.Driver, nil)
		}, func(_ Node, target string) (Node, error) {
			return store.SetPowerState(ctx, id, target, opts.Driver)
		}, func(Node) {})
		if err != nil {
			return cur.UUID, err
		}
		if made {
			res.MadeAvailable++
		}
	}
	return cur.UUID, nil
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
		case "reservable":
			dst.Reservable = src.Reservable
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

// makeAvailable drives n to available with power off (see
// ImportOptions): provision and power run one step on the node as it is
// after the previous one and return the result; stored receives the node
// after every step.
func makeAvailable(n Node, drv Driver, provision func(Node, ProvisionRequest) (Node, error),
	power func(Node, string) (Node, error), stored func(Node)) (bool, error) {
	var err error
	if n.ProvisionState == StateEnroll {
		if n, err = provision(n, ProvisionRequest{Target: TargetManage}); err != nil {
			return false, fmt.Errorf("manage: %w", err)
		}
		stored(n)
	}
	if n.ProvisionState != StateManageable && n.ProvisionState != StateAvailable {
		return false, nil
	}
	if deref(n.PowerState) != PowerOff && (n.ProvisionState == StateManageable || n.PowerState == nil) {
		if n, err = power(n, PowerOff); err != nil {
			return false, fmt.Errorf("power off: %w", err)
		}
		stored(n)
		if n.LastError != nil && deref(n.PowerState) != PowerOff {
			return false, fmt.Errorf("power off: %s", *n.LastError)
		}
	}
	if n.ProvisionState != StateManageable {
		return false, nil
	}
	if n, err = provision(n, ProvisionRequest{Target: TargetProvide}); err != nil {
		return false, fmt.Errorf("provide: %w", err)
	}
	stored(n)
	if n.ProvisionState != StateAvailable {
		return false, fmt.Errorf("provide left the node in %q: %s", n.ProvisionState, deref(n.LastError))
	}
	return true, nil
}
