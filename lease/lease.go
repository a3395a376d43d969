package lease

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/metalloc/metalloc/web"
)

// States of a lease (leases.state): pending until its start, active
// until its end (both moved by the conductors, a later part of issue 43),
// then ended; error when it cannot be honoured; cancelled by its owner
// before it ends. Ended and cancelled leases keep their rows, released.
const (
	StatePending   = "pending"
	StateActive    = "active"
	StateEnded     = "ended"
	StateError     = "error"
	StateCancelled = "cancelled"
)

// What a conductor does at a lease's start (leases.on_start).
const (
	OnStartAllocate = "allocate" // an active allocation group owned by the project on the nodes
	OnStartLessee   = "lessee"   // the nodes' lessee set to the project
)

// ErrNotFound is returned when no lease matches an identifier.
var ErrNotFound = errors.New("lease not found")

// BookedNode is a node booked by a reservation: its uuid and name.
type BookedNode struct {
	UUID uuid.UUID
	Name *string
}

// ReservationView is a reservation with its booked nodes.
type ReservationView struct {
	LeaseReservation
	Nodes []BookedNode
}

// View is a lease as the API shows it: the row and its reservations.
type View struct {
	Lease
	Reservations []ReservationView
}

// Doc renders v as the JSON object of the lease API, with links under
// base: uuid, name, project_id, start_time, end_time (RFC 3339, UTC,
// whole seconds), state, on_start, status_reason, degraded (whether a
// booked node failed and could not be replaced: Repair) with
// degraded_reason (why, or null), reservations (each:
// resource_class, count, traits, forbidden_traits, required or preferred
// (the level name, only the one set), domain (the chosen domain's path
// joined with "/", or null), nodes (uuids, node id order)), created_at,
// updated_at, links.
func (v View) Doc(base string) map[string]any {
	rs := make([]map[string]any, 0, len(v.Reservations))
	for _, r := range v.Reservations {
		nodes := make([]string, 0, len(r.Nodes))
		for _, n := range r.Nodes {
			nodes = append(nodes, n.UUID.String())
		}
		var domain any
		if len(r.Domain) > 0 {
			domain = strings.Join(r.Domain, "/")
		}
		doc := map[string]any{
			"resource_class":   r.ResourceClass,
			"count":            r.Count,
			"traits":           nonNil(r.Traits),
			"forbidden_traits": nonNil(r.ForbiddenTraits),
			"domain":           domain,
			"nodes":            nodes,
		}
		if r.Rule != RuleNone && r.RuleLevel != nil {
			doc[r.Rule] = *r.RuleLevel
		}
		rs = append(rs, doc)
	}
	created, start, end := v.CreatedAt, v.StartTime.UTC(), v.EndTime.UTC()
	return map[string]any{
		"uuid":            v.Uuid.String(),
		"name":            v.Name,
		"project_id":      v.ProjectID,
		"start_time":      start.Format(timeFormat),
		"end_time":        end.Format(timeFormat),
		"state":           v.State,
		"on_start":        v.OnStart,
		"status_reason":   v.StatusReason,
		"degraded":        v.DegradedReason != nil,
		"degraded_reason": v.DegradedReason,
		"reservations":    rs,
		"created_at":      web.Timestamp(&created),
		"updated_at":      web.Timestamp(v.UpdatedAt),
		"links":           web.ResourceLinks(base, "leases", v.Uuid.String()),
	}
}

// timeFormat is how the lease API writes its windows: RFC 3339 in UTC,
// whole seconds ("2025-01-06T09:00:00Z").
const timeFormat = "2006-01-02T15:04:05Z07:00"

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

// Store reads and writes leases.
type Store struct {
	pool  *pgxpool.Pool
	q     *Queries
	cache poolCache // admission's copy of the pool (pool.go)
}

// NewStore returns a Store on pool.
func NewStore(pool *pgxpool.Pool) *Store {
	return &Store{pool: pool, q: New(pool), cache: poolCache{pool: pool}}
}

// Get returns the lease named by ident (a uuid, else a name) with its
// reservations and nodes; ErrNotFound when there is none.
func (s *Store) Get(ctx context.Context, ident string) (View, error) { return get(ctx, s.q, ident) }

func get(ctx context.Context, q *Queries, ident string) (View, error) {
	var l Lease
	var err error
	if u, ok := web.UUIDLike(ident); ok {
		l, err = q.GetLeaseByUUID(ctx, u)
	} else {
		l, err = q.GetLeaseByName(ctx, &ident)
	}
	if errors.Is(err, pgx.ErrNoRows) {
		return View{}, ErrNotFound
	} else if err != nil {
		return View{}, err
	}
	vs, err := withReservations(ctx, q, []Lease{l})
	if err != nil {
		return View{}, err
	}
	return vs[0], nil
}

// withReservations reads the reservations and nodes of ls (two queries).
func withReservations(ctx context.Context, q *Queries, ls []Lease) ([]View, error) {
	ids := make([]int64, len(ls))
	for i, l := range ls {
		ids[i] = l.ID
	}
	rs, err := q.ReservationsOf(ctx, ids)
	if err != nil {
		return nil, err
	}
	ns, err := q.NodesOf(ctx, ids)
	if err != nil {
		return nil, err
	}
	nodes := map[int64][]BookedNode{}
	for _, n := range ns {
		nodes[n.ReservationID] = append(nodes[n.ReservationID], BookedNode{n.Uuid, n.Name})
	}
	by := map[int64][]ReservationView{}
	for _, r := range rs {
		by[r.LeaseID] = append(by[r.LeaseID], ReservationView{r, nodes[r.ID]})
	}
	out := make([]View, len(ls))
	for i, l := range ls {
		out[i] = View{l, by[l.ID]}
	}
	return out, nil
}

// ListFilter narrows a list; nil fields do not filter.
type ListFilter struct {
	State, ProjectID *string
}

// List returns up to limit leases after id after, in id order.
func (s *Store) List(ctx context.Context, f ListFilter, after int64, limit int) ([]View, error) {
	ls, err := s.q.ListLeases(ctx, ListLeasesParams{After: after, State: f.State, ProjectID: f.ProjectID,
		MaxRows: int32(limit)})
	if err != nil {
		return nil, err
	}
	return withReservations(ctx, s.q, ls)
}

// Booked reports whether node id, of resource class rc, has a lease row
// that still blocks (not released) ending after from: a pending or active
// lease holds it, so it cannot leave the reservable pool (Blazar's host
// delete, lease/blazar). One MatchingNodes read of the class.
func (s *Store) Booked(ctx context.Context, rc string, id int64, from time.Time) (bool, error) {
	rows, err := s.q.MatchingNodes(ctx, MatchingNodesParams{ResourceClass: &rc, Traits: []string{}, Forbidden: []string{},
		Sources: []string{}, FromTime: from, UntilTime: from.Add(100 * 365 * 24 * time.Hour)})
	if err != nil {
		return false, err
	}
	for _, r := range rows {
		if r.ID == id {
			return len(r.BusyFrom) > 0, nil
		}
	}
	return false, nil
}
