package node

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// DriverServed is FakeDriver's Registered for this store's database:
// whether a conductor alive now (online, the expiry its last heartbeat
// wrote not passed: metalloc_conductor_alive) of the group registered the
// hardware type, as Ironic's hash ring answers before a node is created or
// changed.
func (s *Store) DriverServed(ctx context.Context, name, group string) (bool, error) {
	return s.q.DriverServed(ctx, DriverServedParams{ConductorGroup: group, Driver: name})
}

// resolveChassis sets n.ChassisID from n.ChassisUUID (nil: no chassis);
// a chassis that does not exist is Ironic's 400 "Chassis ... could not be
// found." (its ChassisNotFound turned into a bad request for nodes).
func resolveChassis(ctx context.Context, q *Queries, n *Node) error {
	if n.ChassisUUID == nil {
		n.ChassisID = nil
		return nil
	}
	id, err := q.ChassisIDByUUID(ctx, *n.ChassisUUID)
	if errors.Is(err, pgx.ErrNoRows) {
		return invalidf("Chassis %s could not be found.", *n.ChassisUUID)
	}
	if err != nil {
		return fmt.Errorf("reading chassis %s: %w", *n.ChassisUUID, err)
	}
	n.ChassisID = &id
	return nil
}
