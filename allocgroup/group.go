package allocgroup

import (
	"context"
	"errors"
	"strings"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/metalloc/metalloc/allocation/state"
	"github.com/metalloc/metalloc/web"
)

// State is a group's state: state.State, the one definition shared with
// allocations, with the group's moves (state.GroupTransitions).
type State = state.State

// States of a group: those of an allocation, allocating moving to active
// or error (and active back to allocating while growing).
const (
	StateAllocating = state.Allocating
	StateActive     = state.Active
	StateError      = state.Error
)

// Placement rules (allocation_groups.rule).
const (
	RuleNone      = "none"
	RuleRequired  = "required"
	RulePreferred = "preferred"
)

// ErrNotFound is returned when no group matches an identifier.
var ErrNotFound = errors.New("allocation group not found")

// Member is one member of a group: its allocation and node.
type Member struct {
	UUID     uuid.UUID
	NodeUUID *uuid.UUID
}

// View is a group as the API shows it: the row and its members.
type View struct {
	AllocationGroup
	Members []Member
}

// Doc renders v as the JSON object of the allocation group API, with links
// under base: uuid, name, state, last_error, count, resource_class, traits,
// candidate_nodes, owner, extra, required or preferred (the level name,
// only the one set), domain (the members' domain, its path joined with
// "/", null when spanning or not placed), members (allocation uuids) and
// nodes (their node uuids, same order), created_at, updated_at, links.
func (v View) Doc(base string) map[string]any {
	traits := v.Traits
	if traits == nil {
		traits = []string{}
	}
	cands := make([]string, 0, len(v.CandidateNodes))
	for _, u := range v.CandidateNodes {
		cands = append(cands, u.String())
	}
	members := make([]string, 0, len(v.Members))
	nodes := make([]any, 0, len(v.Members))
	for _, m := range v.Members {
		members = append(members, m.UUID.String())
		if m.NodeUUID != nil {
			nodes = append(nodes, m.NodeUUID.String())
		} else {
			nodes = append(nodes, nil)
		}
	}
	var extra any = map[string]any{}
	if len(v.Extra) > 0 {
		extra = v.Extra
	}
	var domain any
	if len(v.Domain) > 0 {
		domain = strings.Join(v.Domain, "/")
	}
	created := v.CreatedAt
	doc := map[string]any{
		"uuid":            v.Uuid.String(),
		"name":            v.Name,
		"state":           v.State,
		"last_error":      v.LastError,
		"count":           v.Count,
		"resource_class":  v.ResourceClass,
		"traits":          traits,
		"candidate_nodes": cands,
		"owner":           v.Owner,
		"extra":           extra,
		"domain":          domain,
		"members":         members,
		"nodes":           nodes,
		"created_at":      web.Timestamp(&created),
		"updated_at":      web.Timestamp(v.UpdatedAt),
		"links":           web.ResourceLinks(base, "allocation_groups", v.Uuid.String()),
	}
	if v.Rule != RuleNone && v.RuleLevel != nil {
		doc[v.Rule] = *v.RuleLevel
	}
	return doc
}

// Store reads and writes allocation groups.
type Store struct {
	pool *pgxpool.Pool
	q    *Queries
}

// NewStore returns a Store on pool.
func NewStore(pool *pgxpool.Pool) *Store { return &Store{pool: pool, q: New(pool)} }

// Get returns the group named by ident (a uuid, else a name) with its
// members; ErrNotFound when there is none.
func (s *Store) Get(ctx context.Context, ident string) (View, error) {
	return get(ctx, s.q, ident)
}

func get(ctx context.Context, q *Queries, ident string) (View, error) {
	var g AllocationGroup
	var err error
	if u, ok := web.UUIDLike(ident); ok {
		g, err = q.GetGroupByUUID(ctx, u)
	} else {
		g, err = q.GetGroupByName(ctx, &ident)
	}
	if errors.Is(err, pgx.ErrNoRows) {
		return View{}, ErrNotFound
	} else if err != nil {
		return View{}, err
	}
	vs, err := withMembers(ctx, q, []AllocationGroup{g})
	if err != nil {
		return View{}, err
	}
	return vs[0], nil
}

// withMembers reads the members of gs in one query.
func withMembers(ctx context.Context, q *Queries, gs []AllocationGroup) ([]View, error) {
	ids := make([]int64, len(gs))
	for i, g := range gs {
		ids[i] = g.ID
	}
	rows, err := q.MembersOf(ctx, ids)
	if err != nil {
		return nil, err
	}
	by := map[int64][]Member{}
	for _, r := range rows {
		by[r.GroupID] = append(by[r.GroupID], Member{r.Uuid, r.NodeUuid})
	}
	out := make([]View, len(gs))
	for i, g := range gs {
		out[i] = View{g, by[g.ID]}
	}
	return out, nil
}

// ListFilter narrows a list; nil fields do not filter.
type ListFilter struct {
	State, ResourceClass, Owner *string
}

// List returns up to limit groups after id after, in id order.
func (s *Store) List(ctx context.Context, f ListFilter, after int64, limit int) ([]View, error) {
	gs, err := s.q.ListGroups(ctx, ListGroupsParams{After: after, State: f.State, ResourceClass: f.ResourceClass,
		Owner: f.Owner, MaxRows: int32(limit)})
	if err != nil {
		return nil, err
	}
	return withMembers(ctx, s.q, gs)
}
