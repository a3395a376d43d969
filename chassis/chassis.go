// Package chassis is Ironic's chassis resource (/v1/chassis): records with a
// description and extra data that nodes may name (a node's chassis_uuid;
// the nodes of a chassis are node's /v1/chassis/{uuid}/nodes). It owns the
// chassis table, its SQL (query.sql, compiled by sqlc) and the HTTP
// handlers, which follow Ironic 21.4's ChassisController
// (api/controllers/v1/chassis.py) for documents, microversion gates,
// messages and access rules (baremetal:chassis:*).
//
// A chassis that nodes name cannot be deleted: the delete locks the
// chassis row, checks for nodes and deletes in one transaction, and the
// nodes' foreign key makes a node written meanwhile wait for it.
package chassis

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/metalloc/metalloc/db"
)

// Chassis is one chassis.
type Chassis struct {
	ID          int64
	UUID        uuid.UUID
	Description *string
	// Extra is free-form (never nil after a read).
	Extra     map[string]any
	CreatedAt time.Time
	UpdatedAt *time.Time
}

// Errors of the store (the handler words them as Ironic does).
var (
	// ErrNotFound: no chassis has the uuid.
	ErrNotFound = errors.New("chassis not found")
	// ErrExists: another chassis has the uuid.
	ErrExists = errors.New("chassis uuid taken")
	// ErrNotEmpty: nodes name the chassis.
	ErrNotEmpty = errors.New("chassis contains nodes")
)

// Store reads and writes chassis.
type Store struct {
	pool *pgxpool.Pool
	q    *Queries
}

// NewStore returns a Store on pool.
func NewStore(pool *pgxpool.Pool) *Store { return &Store{pool: pool, q: New(pool)} }

func fromRow(r ChassisRow) Chassis {
	c := Chassis{ID: r.ID, UUID: r.Uuid, Description: r.Description, CreatedAt: r.CreatedAt, UpdatedAt: r.UpdatedAt,
		Extra: map[string]any{}}
	if len(r.Extra) > 0 {
		_ = json.Unmarshal(r.Extra, &c.Extra)
		if c.Extra == nil {
			c.Extra = map[string]any{}
		}
	}
	return c
}

func extraJSON(m map[string]any) (json.RawMessage, error) {
	if m == nil {
		m = map[string]any{}
	}
	return json.Marshal(m)
}

// notFound maps pgx.ErrNoRows to ErrNotFound.
func notFound(err error, what string) error {
	if errors.Is(err, pgx.ErrNoRows) {
		return ErrNotFound
	}
	return fmt.Errorf("%s: %w", what, err)
}

// Create inserts c (a zero UUID is replaced by a random one).
func (s *Store) Create(ctx context.Context, c Chassis) (Chassis, error) {
	if c.UUID == uuid.Nil {
		c.UUID = uuid.New()
	}
	extra, err := extraJSON(c.Extra)
	if err != nil {
		return Chassis{}, err
	}
	r, err := s.q.InsertChassis(ctx, InsertChassisParams{Uuid: c.UUID, Description: c.Description, Extra: extra})
	if db.IsUniqueViolation(err, "chassis_uuid_key") {
		return Chassis{}, ErrExists
	}
	if err != nil {
		return Chassis{}, fmt.Errorf("creating chassis: %w", err)
	}
	return fromRow(r), nil
}

// Get returns the chassis id.
func (s *Store) Get(ctx context.Context, id uuid.UUID) (Chassis, error) {
	r, err := s.q.GetChassis(ctx, id)
	if err != nil {
		return Chassis{}, notFound(err, "reading chassis")
	}
	return fromRow(r), nil
}

// Update changes the chassis id under its row lock: mutate edits a copy
// (it may change the uuid, as Ironic lets it), which is written back.
func (s *Store) Update(ctx context.Context, id uuid.UUID, mutate func(*Chassis) error) (Chassis, error) {
	var out Chassis
	err := db.InTx(ctx, s.pool, func(tx pgx.Tx) error {
		q := s.q.WithTx(tx)
		r, err := q.LockChassis(ctx, id)
		if err != nil {
			return notFound(err, "reading chassis")
		}
		c := fromRow(r)
		if err := mutate(&c); err != nil {
			return err
		}
		extra, err := extraJSON(c.Extra)
		if err != nil {
			return err
		}
		r, err = q.UpdateChassis(ctx, UpdateChassisParams{ID: c.ID, Uuid: c.UUID, Description: c.Description, Extra: extra})
		if db.IsUniqueViolation(err, "chassis_uuid_key") {
			return ErrExists
		}
		if err != nil {
			return fmt.Errorf("updating chassis: %w", err)
		}
		out = fromRow(r)
		return nil
	})
	return out, err
}

// Delete removes the chassis id, ErrNotEmpty when nodes name it.
func (s *Store) Delete(ctx context.Context, id uuid.UUID) error {
	return db.InTx(ctx, s.pool, func(tx pgx.Tx) error {
		q := s.q.WithTx(tx)
		r, err := q.LockChassis(ctx, id)
		if err != nil {
			return notFound(err, "reading chassis")
		}
		has, err := q.ChassisHasNodes(ctx, r.ID)
		if err != nil {
			return fmt.Errorf("reading the nodes of chassis %s: %w", id, err)
		}
		if has {
			return ErrNotEmpty
		}
		err = q.DeleteChassis(ctx, r.ID)
		if db.IsForeignKeyViolation(err, "nodes_chassis_id_fkey") {
			return ErrNotEmpty
		}
		return err
	})
}

// SortKeys are the sort_key values of a chassis list (its columns).
var SortKeys = []string{"id", "uuid", "description", "created_at", "updated_at"}

// List returns one page of chassis in (sort key, id) order (keyset).
// An unknown marker is ErrNotFound.
func (s *Store) List(ctx context.Context, p db.Page) ([]Chassis, error) {
	rows, err := db.ListPage(ctx, s.pool, "chassis", "id, uuid, description, extra, created_at, updated_at", SortKeys, p)
	if errors.Is(err, db.ErrNoMarker) {
		return nil, ErrNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("listing chassis: %w", err)
	}
	defer rows.Close()
	var out []Chassis
	for rows.Next() {
		var r ChassisRow
		if err := rows.Scan(&r.ID, &r.Uuid, &r.Description, &r.Extra, &r.CreatedAt, &r.UpdatedAt); err != nil {
			return nil, fmt.Errorf("listing chassis: %w", err)
		}
		out = append(out, fromRow(r))
	}
	return out, rows.Err()
}
