package allocation

import (
	"context"
	"errors"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/metalloc/metalloc/allocation/state"
	"github.com/metalloc/metalloc/web"
)

// State is an allocation's state: state.State, the one definition shared
// with allocation groups, with its moves (state.Transitions).
type State = state.State

// States of an allocation (Ironic common/states.py): allocating is the initial
// state; it moves once, to active on success or error on failure.
const (
	StateAllocating = state.Allocating
	StateActive     = state.Active
	StateError      = state.Error
)

// ErrNotFound is returned when no allocation matches an identifier.
var ErrNotFound = errors.New("allocation not found")

// View is an allocation as the API shows it: the row plus the uuid of the node
// it holds and its requested traits.
type View struct {
	Allocation
	NodeUUID *uuid.UUID
	Traits   []string
	// GroupUUID is the allocation group the allocation is a member of
	// (package allocgroup), nil for a single allocation.
	GroupUUID *uuid.UUID
}

// Fields lists every field an allocation document has at the newest
// microversion (owner needs 1.60), for `fields` validation, and
// allocation_group_uuid (a metalloc extension, shown only on members of an
// allocation group).
var Fields = []string{
	"uuid", "name", "node_uuid", "state", "last_error", "resource_class", "traits",
	"candidate_nodes", "extra", "owner", "created_at", "updated_at", "links",
	"allocation_group_uuid",
}

// Doc renders v as Ironic's allocation JSON object at microversion ver, with
// links under base (the public URL), plus allocation_group_uuid when v is a
// member of an allocation group (a metalloc extension; absent otherwise, so
// single allocations look exactly like Ironic's).
func (v View) Doc(base string, ver web.Version) map[string]any {
	cands := make([]string, 0, len(v.CandidateNodes))
	for _, u := range v.CandidateNodes {
		cands = append(cands, u.String())
	}
	traits := v.Traits
	if traits == nil {
		traits = []string{}
	}
	var extra any = map[string]any{}
	if len(v.Extra) > 0 {
		extra = v.Extra
	}
	var nodeUUID any
	if v.NodeUUID != nil {
		nodeUUID = v.NodeUUID.String()
	}
	created := v.CreatedAt
	doc := map[string]any{
		"uuid":            v.Uuid.String(),
		"name":            v.Name,
		"node_uuid":       nodeUUID,
		"state":           v.State,
		"last_error":      v.LastError,
		"resource_class":  v.ResourceClass,
		"traits":          traits,
		"candidate_nodes": cands,
		"extra":           extra,
		"created_at":      web.Timestamp(&created),
		"updated_at":      web.Timestamp(v.UpdatedAt),
		"links":           web.ResourceLinks(base, "allocations", v.Uuid.String()),
	}
	if ver.AtLeast(1, 60) {
		doc["owner"] = v.Owner
	}
	if v.GroupUUID != nil {
		doc["allocation_group_uuid"] = v.GroupUUID.String()
	}
	return doc
}

// Store reads and writes allocations.
type Store struct {
	pool     *pgxpool.Pool
	q        *Queries
	inserts  batcher[insertReq]  // Insert's batches
	destroys batcher[destroyReq] // Destroy's batches
}

// NewStore returns a Store on pool.
func NewStore(pool *pgxpool.Pool) *Store {
	s := &Store{pool: pool, q: New(pool)}
	s.inserts = batcher[insertReq]{maxRunning: maxInsertStatements, maxBatch: maxInsertBatch, run: s.insertBatch}
	s.destroys = batcher[destroyReq]{maxRunning: maxDestroyStatements, maxBatch: maxDestroyBatch, run: s.destroyBatch}
	return s
}

func notFound(err error) error {
	if errors.Is(err, pgx.ErrNoRows) {
		return ErrNotFound
	}
	return err
}

// Get returns the allocation named by ident: a uuid, else a name. It returns
// ErrNotFound when there is none.
func (s *Store) Get(ctx context.Context, ident string) (View, error) {
	return get(ctx, s.q, ident)
}

func get(ctx context.Context, q *Queries, ident string) (View, error) {
	if u, ok := web.UUIDLike(ident); ok {
		r, err := q.GetAllocationByUUID(ctx, u)
		if err != nil {
			return View{}, notFound(err)
		}
		return View{r.Allocation, r.NodeUuid, r.Traits, r.AllocationGroupUuid}, nil
	}
	r, err := q.GetAllocationByName(ctx, &ident)
	if err != nil {
		return View{}, notFound(err)
	}
	return View{r.Allocation, r.NodeUuid, r.Traits, r.AllocationGroupUuid}, nil
}

// ref reads what DELETE needs of allocation ident (a uuid, else a name):
// a View with only ID, Uuid, NodeID and Owner set. ErrNotFound when there
// is none.
func ref(ctx context.Context, q *Queries, ident string) (View, error) {
	var v View
	if u, ok := web.UUIDLike(ident); ok {
		r, err := q.AllocationRefByUUID(ctx, u)
		v.ID, v.Uuid, v.NodeID, v.Owner = r.ID, r.Uuid, r.NodeID, r.Owner
		return v, notFound(err)
	}
	r, err := q.AllocationRefByName(ctx, &ident)
	v.ID, v.Uuid, v.NodeID, v.Owner = r.ID, r.Uuid, r.NodeID, r.Owner
	return v, notFound(err)
}

// allocationOf is the Allocation CreateAllocation inserted (sqlc types its
// CTE's state column as text).
func allocationOf(r CreateAllocationRow) Allocation {
	return Allocation{ID: r.ID, Uuid: r.Uuid, Name: r.Name, NodeID: r.NodeID, State: State(r.State),
		LastError: r.LastError, ResourceClass: r.ResourceClass, CandidateNodes: r.CandidateNodes, Extra: r.Extra,
		Owner: r.Owner, ConductorAffinity: r.ConductorAffinity, CreatedAt: r.CreatedAt, UpdatedAt: r.UpdatedAt,
		GroupID: r.GroupID}
}

// createdRowOf is allocationOf's inverse: a row read back by uuid as the
// CreateAllocation row it was inserted as.
func createdRowOf(a Allocation) CreateAllocationRow {
	return CreateAllocationRow{ID: a.ID, Uuid: a.Uuid, Name: a.Name, NodeID: a.NodeID, State: string(a.State),
		LastError: a.LastError, ResourceClass: a.ResourceClass, CandidateNodes: a.CandidateNodes, Extra: a.Extra,
		Owner: a.Owner, ConductorAffinity: a.ConductorAffinity, CreatedAt: a.CreatedAt, UpdatedAt: a.UpdatedAt,
		GroupID: a.GroupID}
}
