// Package deploytemplate is Ironic's deploy templates resource
// (/v1/deploy_templates, microversion 1.55): a trait name and the deploy
// steps it stands for. Ironic matches templates to an instance's traits
// when deploying; metalloc stores and serves them (its deployments have no
// steps to run). It owns the deploy_templates table, its SQL (query.sql,
// compiled by sqlc) and the HTTP handlers, which follow Ironic 21.4's
// DeployTemplatesController (api/controllers/v1/deploy_template.py) for
// documents, microversion gates, messages and access rules
// (baremetal:deploy_template:*).
package deploytemplate

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
	"github.com/metalloc/metalloc/web"
)

// Template is one deploy template.
type Template struct {
	ID   int64
	UUID uuid.UUID
	// Name is a trait (standard or CUSTOM_), unique among templates.
	Name string
	// Steps are {interface, step, args, priority} objects (priority an
	// integer).
	Steps []map[string]any
	// Extra is free-form (never nil after a read).
	Extra     map[string]any
	CreatedAt time.Time
	UpdatedAt *time.Time
}

// Errors of the store (the handler words them as Ironic does).
var (
	// ErrNotFound: no template has the uuid or name.
	ErrNotFound = errors.New("deploy template not found")
	// ErrNameTaken: another template has the name.
	ErrNameTaken = errors.New("deploy template name taken")
	// ErrUUIDTaken: another template has the uuid.
	ErrUUIDTaken = errors.New("deploy template uuid taken")
)

// Store reads and writes deploy templates.
type Store struct {
	pool *pgxpool.Pool
	q    *Queries
}

// NewStore returns a Store on pool.
func NewStore(pool *pgxpool.Pool) *Store { return &Store{pool: pool, q: New(pool)} }

func fromRow(r TemplateRow) Template {
	t := Template{ID: r.ID, UUID: r.Uuid, Name: r.Name, CreatedAt: r.CreatedAt, UpdatedAt: r.UpdatedAt,
		Extra: map[string]any{}, Steps: []map[string]any{}}
	_ = json.Unmarshal(r.Extra, &t.Extra)
	_ = json.Unmarshal(r.Steps, &t.Steps)
	if t.Extra == nil {
		t.Extra = map[string]any{}
	}
	return t
}

// columns marshals t's JSON columns.
func columns(t Template) (steps, extra json.RawMessage, err error) {
	if t.Steps == nil {
		t.Steps = []map[string]any{}
	}
	if t.Extra == nil {
		t.Extra = map[string]any{}
	}
	if steps, err = json.Marshal(t.Steps); err != nil {
		return nil, nil, err
	}
	extra, err = json.Marshal(t.Extra)
	return steps, extra, err
}

// writeError maps a unique violation to ErrNameTaken or ErrUUIDTaken.
func writeError(err error, what string) error {
	switch {
	case err == nil:
		return nil
	case db.IsUniqueViolation(err, "deploy_templates_name_key"):
		return ErrNameTaken
	case db.IsUniqueViolation(err, "deploy_templates_uuid_key"):
		return ErrUUIDTaken
	}
	return fmt.Errorf("%s: %w", what, err)
}

// Create inserts t (a zero UUID is replaced by a random one).
func (s *Store) Create(ctx context.Context, t Template) (Template, error) {
	if t.UUID == uuid.Nil {
		t.UUID = uuid.New()
	}
	steps, extra, err := columns(t)
	if err != nil {
		return Template{}, err
	}
	r, err := s.q.InsertTemplate(ctx, InsertTemplateParams{Uuid: t.UUID, Name: t.Name, Steps: steps, Extra: extra})
	if err != nil {
		return Template{}, writeError(err, "creating deploy template")
	}
	return fromRow(r), nil
}

// Get returns the template ident: by uuid when it is one, else by name.
func (s *Store) Get(ctx context.Context, ident string) (Template, error) {
	return s.get(ctx, s.q, ident)
}

func (s *Store) get(ctx context.Context, q *Queries, ident string) (Template, error) {
	var r TemplateRow
	var err error
	if u, ok := web.UUIDLike(ident); ok {
		r, err = q.GetTemplateByUUID(ctx, u)
	} else {
		r, err = q.GetTemplateByName(ctx, ident)
	}
	if errors.Is(err, pgx.ErrNoRows) {
		return Template{}, ErrNotFound
	}
	if err != nil {
		return Template{}, fmt.Errorf("reading deploy template: %w", err)
	}
	return fromRow(r), nil
}

// Update changes the template ident under its row lock: mutate edits a
// copy (name, steps, extra), which is written back.
func (s *Store) Update(ctx context.Context, ident string, mutate func(*Template) error) (Template, error) {
	var out Template
	err := db.InTx(ctx, s.pool, func(tx pgx.Tx) error {
		q := s.q.WithTx(tx)
		t, err := s.get(ctx, q, ident)
		if err != nil {
			return err
		}
		r, err := q.LockTemplate(ctx, t.ID)
		if errors.Is(err, pgx.ErrNoRows) {
			return ErrNotFound
		}
		if err != nil {
			return fmt.Errorf("locking deploy template: %w", err)
		}
		t = fromRow(r)
		if err := mutate(&t); err != nil {
			return err
		}
		steps, extra, err := columns(t)
		if err != nil {
			return err
		}
		r, err = q.UpdateTemplate(ctx, UpdateTemplateParams{ID: t.ID, Name: t.Name, Steps: steps, Extra: extra})
		if err != nil {
			return writeError(err, "updating deploy template")
		}
		out = fromRow(r)
		return nil
	})
	return out, err
}

// Delete removes the template ident.
func (s *Store) Delete(ctx context.Context, ident string) error {
	t, err := s.Get(ctx, ident)
	if err != nil {
		return err
	}
	n, err := s.q.DeleteTemplate(ctx, t.ID)
	if err != nil {
		return fmt.Errorf("deleting deploy template: %w", err)
	}
	if n == 0 {
		return ErrNotFound
	}
	return nil
}

// SortKeys are the sort_key values of a template list (its columns).
var SortKeys = []string{"id", "uuid", "name", "created_at", "updated_at"}

// List returns one page of templates in (sort key, id) order (keyset);
// an unknown marker is ErrNotFound.
func (s *Store) List(ctx context.Context, p db.Page) ([]Template, error) {
	rows, err := db.ListPage(ctx, s.pool, "deploy_templates", "id, uuid, name, steps, extra, created_at, updated_at", SortKeys, p)
	if errors.Is(err, db.ErrNoMarker) {
		return nil, ErrNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("listing deploy templates: %w", err)
	}
	defer rows.Close()
	var out []Template
	for rows.Next() {
		var r TemplateRow
		if err := rows.Scan(&r.ID, &r.Uuid, &r.Name, &r.Steps, &r.Extra, &r.CreatedAt, &r.UpdatedAt); err != nil {
			return nil, fmt.Errorf("listing deploy templates: %w", err)
		}
		out = append(out, fromRow(r))
	}
	return out, rows.Err()
}
