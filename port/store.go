package port

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/metalloc/metalloc/db"
	"github.com/metalloc/metalloc/web"
)

// NodeRef is what port operations need of a node: identity, access (owner,
// lessee) and the state the update rules look at.
type NodeRef struct {
	ID             int64
	UUID           uuid.UUID
	Owner, Lessee  *string
	ProvisionState string
	Maintenance    bool
	InstanceUUID   *uuid.UUID
}

// Store reads and writes ports and port groups in PostgreSQL. Every change
// runs in one transaction that first takes the row lock of the node the
// port or port group belongs to (lock order: node, then its ports), as
// Ironic's conductor holds the node's lock for port changes.
type Store struct {
	pool *pgxpool.Pool
	q    *Queries
}

// NewStore returns a Store on pool.
func NewStore(pool *pgxpool.Pool) *Store { return &Store{pool: pool, q: New(pool)} }

// Tx is a Store bound to one transaction (see Store.InTx and Importer).
type Tx struct {
	q *Queries
}

// InTx runs fn in one transaction.
func (s *Store) InTx(ctx context.Context, fn func(tx Tx) error) error {
	return db.InTx(ctx, s.pool, func(tx pgx.Tx) error { return fn(Tx{q: s.q.WithTx(tx)}) })
}

// read is a Tx reading outside any transaction.
func (s *Store) read() Tx { return Tx{q: s.q} }

// Node returns the node with uuid or name ident, or ErrNotFound.
func (s *Store) Node(ctx context.Context, ident string) (NodeRef, error) {
	return s.read().Node(ctx, ident)
}

// Port returns the port with uuid u, or ErrNotFound.
func (s *Store) Port(ctx context.Context, u uuid.UUID) (Port, error) { return s.read().Port(ctx, u) }

// Portgroup returns the port group with uuid or name ident, or ErrNotFound.
func (s *Store) Portgroup(ctx context.Context, ident string) (Portgroup, error) {
	return s.read().Portgroup(ctx, ident)
}

func notFound(err error, what, ident string) error {
	if errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("%w: %s %s", ErrNotFound, what, ident)
	}
	return fmt.Errorf("reading %s %s: %w", what, ident, err)
}

// Node returns the node with uuid or name ident, or ErrNotFound.
func (t Tx) Node(ctx context.Context, ident string) (NodeRef, error) {
	var p GetNodeRefParams
	if u, ok := web.UUIDLike(ident); ok {
		p.NodeUuid = &u
	} else {
		p.NodeName = &ident
	}
	r, err := t.q.GetNodeRef(ctx, p)
	if err != nil {
		return NodeRef{}, notFound(err, "node", ident)
	}
	return nodeRef(LockNodeRefRow(r)), nil
}

func nodeRef(r LockNodeRefRow) NodeRef {
	return NodeRef{ID: r.ID, UUID: r.Uuid, Owner: r.Owner, Lessee: r.Lessee, ProvisionState: r.ProvisionState,
		Maintenance: r.Maintenance, InstanceUUID: r.InstanceUuid}
}

// LockSecond locks node next while node held is locked, keeping the lock
// order of node rows (ascending id): a lower id is taken with NOWAIT, whose
// 55P03 makes db.InTx start the transaction over rather than wait in the
// opposite order of a concurrent move (a deadlock). It returns next.
func (t Tx) LockSecond(ctx context.Context, held, next int64) (NodeRef, error) {
	if next >= held {
		return t.LockNode(ctx, next)
	}
	r, err := t.q.LockNodeRefNowait(ctx, next)
	if err != nil {
		return NodeRef{}, notFound(err, "node", fmt.Sprint(next))
	}
	return nodeRef(LockNodeRefRow(r)), nil
}

// LockNode takes the row lock of node id and returns it.
func (t Tx) LockNode(ctx context.Context, id int64) (NodeRef, error) {
	r, err := t.q.LockNodeRef(ctx, id)
	if err != nil {
		return NodeRef{}, notFound(err, "node", fmt.Sprint(id))
	}
	return nodeRef(r), nil
}

// Port returns the port with uuid u, or ErrNotFound.
func (t Tx) Port(ctx context.Context, u uuid.UUID) (Port, error) {
	r, err := t.q.GetPort(ctx, u)
	if err != nil {
		return Port{}, notFound(err, "port", u.String())
	}
	return portFromRow(r.PortRow, r.NodeUuid, r.PortgroupUuid, r.NodeOwner, r.NodeLessee)
}

// Portgroup returns the port group with uuid or name ident, or ErrNotFound.
func (t Tx) Portgroup(ctx context.Context, ident string) (Portgroup, error) {
	if u, ok := web.UUIDLike(ident); ok {
		r, err := t.q.GetPortgroupByUUID(ctx, u)
		if err != nil {
			return Portgroup{}, notFound(err, "portgroup", ident)
		}
		return portgroupFromRow(r.PortgroupRow, r.NodeUuid, r.NodeOwner, r.NodeLessee)
	}
	r, err := t.q.GetPortgroupByName(ctx, &ident)
	if err != nil {
		return Portgroup{}, notFound(err, "portgroup", ident)
	}
	return portgroupFromRow(r.PortgroupRow, r.NodeUuid, r.NodeOwner, r.NodeLessee)
}

// CreatePort inserts p on node p.NodeID (locking it) and returns it as
// stored. A zero UUID gets a random one. Duplicate MAC address or uuid are
// 409 with Ironic's messages.
func (t Tx) CreatePort(ctx context.Context, p Port) (Port, error) {
	if p.UUID == uuid.Nil {
		p.UUID = uuid.New()
	}
	if _, err := t.LockNode(ctx, p.NodeID); err != nil {
		return Port{}, err
	}
	if err := t.checkPhysnet(ctx, p, 0); err != nil {
		return Port{}, err
	}
	llc, extra, err := marshal2(p.LocalLinkConnection, p.Extra)
	if err != nil {
		return Port{}, err
	}
	if _, err := t.q.InsertPort(ctx, InsertPortParams{
		Uuid: p.UUID, Address: p.Address, NodeID: p.NodeID, PortgroupID: p.PortgroupID,
		PxeEnabled: p.PXEEnabled, LocalLinkConnection: llc, PhysicalNetwork: p.PhysicalNetwork,
		IsSmartnic: p.IsSmartNIC, Extra: extra,
	}); err != nil {
		return Port{}, portWriteError(err, p)
	}
	return t.Port(ctx, p.UUID)
}

// UpdatePort changes port u under its node's lock: change gets the current
// port and its (locked) node and returns the port to store; moving the
// port to another node locks that node too. It returns the port as stored.
func (t Tx) UpdatePort(ctx context.Context, u uuid.UUID, change func(cur Port, node NodeRef) (Port, error)) (Port, error) {
	cur, node, err := t.lockPort(ctx, u)
	if err != nil {
		return Port{}, err
	}
	next, err := change(cur, node)
	if err != nil {
		return Port{}, err
	}
	if next.NodeID != cur.NodeID {
		if _, err := t.LockSecond(ctx, cur.NodeID, next.NodeID); err != nil {
			return Port{}, err
		}
	}
	if !equalPtr(next.PortgroupID, cur.PortgroupID) || !equalPtr(next.PhysicalNetwork, cur.PhysicalNetwork) {
		if err := t.checkPhysnet(ctx, next, cur.ID); err != nil {
			return Port{}, err
		}
	}
	llc, extra, err := marshal2(next.LocalLinkConnection, next.Extra)
	if err != nil {
		return Port{}, err
	}
	if _, err := t.q.UpdatePort(ctx, UpdatePortParams{
		ID: cur.ID, Address: next.Address, NodeID: next.NodeID, PortgroupID: next.PortgroupID,
		PxeEnabled: next.PXEEnabled, LocalLinkConnection: llc, PhysicalNetwork: next.PhysicalNetwork,
		IsSmartnic: next.IsSmartNIC, Extra: extra,
	}); err != nil {
		return Port{}, portWriteError(err, next)
	}
	return t.Port(ctx, u)
}

// lockPort reads port u and locks its node; a port moved to another node
// meanwhile is read again.
func (t Tx) lockPort(ctx context.Context, u uuid.UUID) (Port, NodeRef, error) {
	for {
		p, err := t.Port(ctx, u)
		if err != nil {
			return Port{}, NodeRef{}, err
		}
		n, err := t.LockNode(ctx, p.NodeID)
		if err != nil {
			return Port{}, NodeRef{}, err
		}
		again, err := t.Port(ctx, u)
		if err != nil {
			return Port{}, NodeRef{}, err
		}
		if again.NodeID == p.NodeID {
			return again, n, nil
		}
	}
}

// checkPhysnet is the conductor's validate_port_physnet: a member of a port
// group must be on the physical network of the group's other ports (409),
// which must agree among themselves. self is the port's own id (0 when
// new).
func (t Tx) checkPhysnet(ctx context.Context, p Port, self int64) error {
	if p.PortgroupID == nil {
		return nil
	}
	nets, err := t.q.PortgroupPhysnets(ctx, PortgroupPhysnetsParams{PortgroupID: p.PortgroupID, ID: self})
	if err != nil {
		return fmt.Errorf("reading port group physical networks: %w", err)
	}
	if len(nets) == 0 {
		return nil
	}
	pyNone := func(s *string) string {
		if s == nil {
			return "None"
		}
		return *s
	}
	uuidOf, err := t.q.PortgroupUUID(ctx, *p.PortgroupID)
	if err != nil {
		return notFound(err, "portgroup", fmt.Sprint(*p.PortgroupID))
	}
	if len(nets) > 1 {
		names := make([]string, len(nets))
		for i, n := range nets {
			names[i] = pyNone(n)
		}
		// Ironic's PortgroupPhysnetInconsistent (a 500 there); the rule
		// below keeps it from happening.
		return web.Errorf(http.StatusConflict, "Port group %s has member ports with inconsistent physical networks (%s). All ports in a port group must have the same physical network.",
			uuidOf, strings.Join(names, ", "))
	}
	if !equalPtr(p.PhysicalNetwork, nets[0]) {
		return web.Conflict("Port with physical network %s cannot become a member of port group %s which has ports in physical network %s.",
			pyNone(p.PhysicalNetwork), uuidOf, pyNone(nets[0]))
	}
	return nil
}

// DeletePort deletes port u under its node's lock.
func (t Tx) DeletePort(ctx context.Context, u uuid.UUID) error {
	p, _, err := t.lockPort(ctx, u)
	if err != nil {
		return err
	}
	if _, err := t.q.DeletePort(ctx, p.ID); err != nil {
		return fmt.Errorf("deleting port %s: %w", u, err)
	}
	return nil
}

// portWriteError turns constraint violations writing p into Ironic's
// client errors; other errors are wrapped.
func portWriteError(err error, p Port) error {
	switch {
	case db.IsUniqueViolation(err, "ports_address_key"):
		return web.Conflict("A port with MAC address %s already exists.", p.Address)
	case db.IsUniqueViolation(err, "ports_uuid_key"):
		return web.Conflict("A port with UUID %s already exists.", p.UUID)
	case db.IsIntegrityError(err):
		// The (portgroup_id, node_id) reference: the port group went away
		// or belongs to another node.
		return web.BadRequest("Port can not be added to a portgroup belonging to a different node.")
	}
	return fmt.Errorf("writing port %s: %w", p.UUID, err)
}

// CreatePortgroup inserts g on node g.NodeID (locking it) and returns it
// as stored. A zero UUID gets a random one, a nil or empty mode
// DefaultPortgroupMode. Duplicate name, MAC address or uuid are 409.
func (t Tx) CreatePortgroup(ctx context.Context, g Portgroup) (Portgroup, error) {
	if g.UUID == uuid.Nil {
		g.UUID = uuid.New()
	}
	if g.Mode == nil || *g.Mode == "" {
		m := DefaultPortgroupMode
		g.Mode = &m
	}
	if _, err := t.LockNode(ctx, g.NodeID); err != nil {
		return Portgroup{}, err
	}
	props, extra, err := marshal2(g.Properties, g.Extra)
	if err != nil {
		return Portgroup{}, err
	}
	if _, err := t.q.InsertPortgroup(ctx, InsertPortgroupParams{
		Uuid: g.UUID, Name: g.Name, NodeID: g.NodeID, Address: g.Address, Mode: g.Mode,
		Properties: props, StandalonePortsSupported: g.StandalonePortsSupported, Extra: extra,
	}); err != nil {
		return Portgroup{}, portgroupWriteError(err, g)
	}
	return t.Portgroup(ctx, g.UUID.String())
}

// UpdatePortgroup changes port group ident under its node's lock, as
// UpdatePort does for ports.
func (t Tx) UpdatePortgroup(ctx context.Context, ident string,
	change func(cur Portgroup, node NodeRef, ports int64) (Portgroup, error)) (Portgroup, error) {
	cur, node, err := t.lockPortgroup(ctx, ident)
	if err != nil {
		return Portgroup{}, err
	}
	ports, err := t.q.CountPortgroupPorts(ctx, &cur.ID)
	if err != nil {
		return Portgroup{}, fmt.Errorf("counting ports of portgroup %s: %w", cur.UUID, err)
	}
	next, err := change(cur, node, ports)
	if err != nil {
		return Portgroup{}, err
	}
	if next.NodeID != cur.NodeID {
		if _, err := t.LockSecond(ctx, cur.NodeID, next.NodeID); err != nil {
			return Portgroup{}, err
		}
	}
	props, extra, err := marshal2(next.Properties, next.Extra)
	if err != nil {
		return Portgroup{}, err
	}
	if _, err := t.q.UpdatePortgroup(ctx, UpdatePortgroupParams{
		ID: cur.ID, Name: next.Name, NodeID: next.NodeID, Address: next.Address, Mode: next.Mode,
		Properties: props, StandalonePortsSupported: next.StandalonePortsSupported, Extra: extra,
	}); err != nil {
		return Portgroup{}, portgroupWriteError(err, next)
	}
	return t.Portgroup(ctx, cur.UUID.String())
}

func (t Tx) lockPortgroup(ctx context.Context, ident string) (Portgroup, NodeRef, error) {
	for {
		g, err := t.Portgroup(ctx, ident)
		if err != nil {
			return Portgroup{}, NodeRef{}, err
		}
		n, err := t.LockNode(ctx, g.NodeID)
		if err != nil {
			return Portgroup{}, NodeRef{}, err
		}
		again, err := t.Portgroup(ctx, g.UUID.String())
		if err != nil {
			return Portgroup{}, NodeRef{}, err
		}
		if again.NodeID == g.NodeID {
			return again, n, nil
		}
	}
}

// DeletePortgroup deletes port group ident under its node's lock; one that
// still has ports is Ironic's PortgroupNotEmpty (400).
func (t Tx) DeletePortgroup(ctx context.Context, ident string) error {
	g, _, err := t.lockPortgroup(ctx, ident)
	if err != nil {
		return err
	}
	n, err := t.q.CountPortgroupPorts(ctx, &g.ID)
	if err != nil {
		return fmt.Errorf("counting ports of portgroup %s: %w", g.UUID, err)
	}
	if n > 0 {
		return web.BadRequest("Cannot complete the requested action because portgroup %s contains ports.", g.UUID)
	}
	if _, err := t.q.DeletePortgroup(ctx, g.ID); err != nil {
		return fmt.Errorf("deleting portgroup %s: %w", g.UUID, err)
	}
	return nil
}

func portgroupWriteError(err error, g Portgroup) error {
	switch {
	case db.IsUniqueViolation(err, "portgroups_name_key"):
		return web.Conflict("A portgroup with name %s already exists.", deref(g.Name))
	case db.IsUniqueViolation(err, "portgroups_address_key"):
		return web.Conflict("A portgroup with MAC address %s already exists.", deref(g.Address))
	case db.IsUniqueViolation(err, "portgroups_uuid_key"):
		return web.Conflict("A portgroup with UUID %s already exists.", g.UUID)
	}
	return fmt.Errorf("writing portgroup %s: %w", g.UUID, err)
}

func marshal2(a, b map[string]any) (json.RawMessage, json.RawMessage, error) {
	ra, err := marshalObject(a)
	if err != nil {
		return nil, nil, err
	}
	rb, err := marshalObject(b)
	return ra, rb, err
}

func marshalObject(m map[string]any) (json.RawMessage, error) {
	if m == nil {
		return json.RawMessage("{}"), nil
	}
	b, err := json.Marshal(m)
	if err != nil {
		return nil, fmt.Errorf("encoding JSON field: %w", err)
	}
	return b, nil
}

func unmarshalObject(raw json.RawMessage) (map[string]any, error) {
	m := map[string]any{}
	if len(raw) == 0 {
		return m, nil
	}
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, fmt.Errorf("decoding JSON field: %w", err)
	}
	if m == nil {
		m = map[string]any{}
	}
	return m, nil
}

func portFromRow(r PortRow, nodeUUID uuid.UUID, pgUUID *uuid.UUID, owner, lessee *string) (Port, error) {
	p := Port{
		ID: r.ID, UUID: r.Uuid, Address: r.Address, NodeID: r.NodeID, NodeUUID: nodeUUID,
		PortgroupID: r.PortgroupID, PortgroupUUID: pgUUID, PXEEnabled: r.PxeEnabled,
		PhysicalNetwork: r.PhysicalNetwork, IsSmartNIC: r.IsSmartnic, CreatedAt: r.CreatedAt,
		UpdatedAt: r.UpdatedAt, NodeOwner: owner, NodeLessee: lessee,
	}
	var err error
	if p.LocalLinkConnection, err = unmarshalObject(r.LocalLinkConnection); err != nil {
		return Port{}, err
	}
	if p.Extra, err = unmarshalObject(r.Extra); err != nil {
		return Port{}, err
	}
	if p.InternalInfo, err = unmarshalObject(r.InternalInfo); err != nil {
		return Port{}, err
	}
	return p, nil
}

func portgroupFromRow(r PortgroupRow, nodeUUID uuid.UUID, owner, lessee *string) (Portgroup, error) {
	g := Portgroup{
		ID: r.ID, UUID: r.Uuid, Name: r.Name, NodeID: r.NodeID, NodeUUID: nodeUUID, Address: r.Address,
		Mode: r.Mode, StandalonePortsSupported: r.StandalonePortsSupported, CreatedAt: r.CreatedAt,
		UpdatedAt: r.UpdatedAt, NodeOwner: owner, NodeLessee: lessee,
	}
	var err error
	if g.Properties, err = unmarshalObject(r.Properties); err != nil {
		return Portgroup{}, err
	}
	if g.Extra, err = unmarshalObject(r.Extra); err != nil {
		return Portgroup{}, err
	}
	if g.InternalInfo, err = unmarshalObject(r.InternalInfo); err != nil {
		return Portgroup{}, err
	}
	return g, nil
}

func deref[T any](p *T) T {
	var zero T
	if p == nil {
		return zero
	}
	return *p
}
