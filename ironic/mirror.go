package ironic

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/zap"

	"github.com/metalloc/metalloc/db"
)

// DefaultPageSize is how many nodes one request of the full sync reads
// (Ironic's own [api]max_limit).
const DefaultPageSize = 1000

// Mirror writes Ironic's nodes into metalloc's node table (nodes,
// node_traits, and ironic_nodes for what only the mirror needs): the full
// sync (FullSync, by the conductor holding the sync lease) and the prompt
// refresh of one node (Refresh, by metalloc-api after a change it proxied).
// The write rules are metalloc_ironic_mirror's and metalloc_ironic_prune's
// (migrations/00025_ironic_mirror.sql; doc.go).
type Mirror struct {
	client   *Client
	pool     *pgxpool.Pool
	q        *Queries
	pageSize int
	log      *zap.Logger
}

// NewMirror returns the mirror of client's Ironic into pool's database,
// reading pageSize nodes per request (<= 0: DefaultPageSize).
func NewMirror(client *Client, pool *pgxpool.Pool, pageSize int, log *zap.Logger) *Mirror {
	if pageSize <= 0 {
		pageSize = DefaultPageSize
	}
	if log == nil {
		log = zap.NewNop()
	}
	return &Mirror{client: client, pool: pool, q: New(pool), pageSize: pageSize, log: log}
}

// Client is the mirror's Ironic client.
func (m *Mirror) Client() *Client { return m.client }

// SyncResult counts what a full sync did.
type SyncResult struct {
	// Nodes is how many nodes Ironic listed, in Pages requests.
	Nodes, Pages int
	// Created, Updated: nodes new to the mirror, nodes whose columns
	// changed; Stale: nodes skipped because a newer read was stored.
	Created, Updated, Stale int
	// Deleted: nodes gone from Ironic, removed; Kept: gone from Ironic
	// but held by an allocation still allocating, left for later.
	Deleted, Kept int
	// Pruned is false when the removal step was skipped (an empty listing
	// while the mirror has nodes: see FullSync).
	Pruned bool
	// Allocations is Ironic's complete list of allocations, read first,
	// from AllocationsAt on (the database clock before the first request).
	Allocations   []Allocation
	AllocationsAt time.Time
	// Reconciled counts allocations metalloc deleted because Ironic shows
	// their node without them (metalloc_ironic_reconcile_nodes).
	Reconciled int
}

// FullSync mirrors every node of Ironic, page by page in Ironic's order,
// then removes the mirrored nodes Ironic no longer lists. Conductor holder
// must hold the sync lease: every write renews it and writes nothing once
// another conductor holds it (ErrLeaseLost). A failed read of Ironic
// (*Error) stops the sync before the removal step, so an outage never
// removes anything; pages written so far stay. An empty listing while the
// mirror has nodes removes nothing either (credentials that see no node,
// e.g. a project-scoped token under Ironic's secure RBAC, must not empty
// the mirror): nodes deleted through metalloc are removed by their
// refresh, and a warning is logged.
func (m *Mirror) FullSync(ctx context.Context, holder int64) (SyncResult, error) {
	var res SyncResult
	started, err := m.q.DBNow(ctx)
	if err != nil {
		return res, fmt.Errorf("ironic sync: reading the database clock: %w", err)
	}
	n, err := m.q.StartSync(ctx, StartSyncParams{Started: started, Me: holder})
	if err != nil {
		return res, fmt.Errorf("ironic sync: %w", err)
	}
	if n == 0 {
		return res, ErrLeaseLost
	}
	// Nodes lists cannot carry allocation_uuid: Ironic's allocations are
	// read first, their nodes' allocation_uuid is filled from them.
	allocsAt, err := m.q.DBNow(ctx)
	if err != nil {
		return res, fmt.Errorf("ironic sync: reading the database clock: %w", err)
	}
	allocs, err := m.client.ListAllocations(ctx, m.pageSize)
	if err != nil {
		return res, err
	}
	res.Allocations, res.AllocationsAt = allocs, allocsAt
	allocDoc, err := json.Marshal(AllocationsByNode(allocs))
	if err != nil {
		return res, err
	}
	marker := ""
	// The uuids last read, up to marker (at most keepBehind of them): when
	// Ironic no longer knows the marker (the node was deleted since its
	// page was read: 404), the list goes on after the one before it, and
	// from the first node again when none is left. Nodes are deleted in
	// Ironic while a sync pages (by operators, by other writers of this
	// Ironic): a deleted marker is a state of the listing, not a failure.
	keepBehind := max(2*m.pageSize, 64)
	var behind []string
	for {
		readAt, err := m.q.DBNow(ctx)
		if err != nil {
			return res, fmt.Errorf("ironic sync: reading the database clock: %w", err)
		}
		page, err := m.client.ListNodes(ctx, marker, m.pageSize)
		if err != nil {
			if marker != "" && IsNotFound(err) {
				// The marker was counted when its page was read; it is gone.
				res.Nodes--
				behind = behind[:len(behind)-1]
				if len(behind) == 0 {
					marker, res.Nodes = "", 0 // everything is read again
				} else {
					marker = behind[len(behind)-1]
				}
				m.log.Debug("ironic sync: the marker node was deleted meanwhile; listing after the one before it",
					zap.String("marker", marker))
				continue
			}
			return res, err
		}
		res.Pages++
		res.Nodes += len(page.Nodes)
		if len(page.Nodes) > 0 {
			w, err := m.write(ctx, page.Nodes, allocDoc, readAt, &holder)
			if err != nil {
				return res, err
			}
			res.Created += int(w.Created)
			res.Updated += int(w.Updated)
			res.Stale += int(w.Stale)
			n, err := m.reconcile(ctx, page.UUIDs)
			if err != nil {
				return res, err
			}
			res.Reconciled += n
		}
		if !page.More {
			break
		}
		behind = append(behind, page.UUIDs...)
		if len(behind) > keepBehind {
			behind = append(behind[:0], behind[len(behind)-keepBehind:]...)
		}
		marker = page.UUIDs[len(page.UUIDs)-1]
	}
	if res.Nodes == 0 {
		have, err := m.q.MirroredNodeCount(ctx)
		if err != nil {
			return res, fmt.Errorf("ironic sync: %w", err)
		}
		if have > 0 {
			m.log.Warn("Ironic lists no nodes; not removing the mirrored ones (can ironic.* credentials list every node?)",
				zap.Int64("mirrored", have))
			return res, m.finish(ctx, holder, res.Nodes)
		}
	}
	p, err := m.prune(ctx, started, nil, &holder)
	if err != nil {
		return res, err
	}
	res.Deleted, res.Kept, res.Pruned = int(p.Deleted), int(p.Kept), true
	return res, m.finish(ctx, holder, res.Nodes)
}

func (m *Mirror) finish(ctx context.Context, holder int64, nodes int) error {
	n, err := m.q.FinishSync(ctx, FinishSyncParams{Nodes: int32(nodes), Me: holder})
	if err != nil {
		return fmt.Errorf("ironic sync: %w", err)
	}
	if n == 0 {
		return ErrLeaseLost
	}
	return nil
}

// write mirrors nodes (Ironic's JSON objects) read at readAt, with their
// allocation uuids from allocs (a JSON object by node uuid; nil: from the
// nodes themselves); with holder, guarded by the lease.
func (m *Mirror) write(ctx context.Context, nodes []json.RawMessage, allocs json.RawMessage, readAt time.Time, holder *int64) (MirrorNodesRow, error) {
	doc, err := json.Marshal(nodes)
	if err != nil {
		return MirrorNodesRow{}, err
	}
	var w MirrorNodesRow
	err = db.Retry(ctx, func() error {
		w, err = m.q.MirrorNodes(ctx, MirrorNodesParams{Nodes: doc, Allocations: allocs, ReadAt: readAt, Holder: holder})
		return err
	})
	if err != nil {
		return w, fmt.Errorf("ironic mirror: writing %d nodes: %w", len(nodes), err)
	}
	if w.Lost {
		return w, ErrLeaseLost
	}
	return w, nil
}

// reconcile applies what the mirror just wrote of nodes (uuids) to the
// allocations metalloc holds there (metalloc_ironic_reconcile_nodes: an
// allocation active in both that Ironic now shows gone from its node is
// deleted in metalloc too). It returns how many were deleted.
func (m *Mirror) reconcile(ctx context.Context, nodes []string) (int, error) {
	uuids := make([]uuid.UUID, 0, len(nodes))
	for _, n := range nodes {
		if u, err := uuid.Parse(n); err == nil {
			uuids = append(uuids, u)
		}
	}
	var n int32
	err := db.Retry(ctx, func() error {
		var err error
		n, err = m.q.ReconcileNodes(ctx, uuids)
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("ironic mirror: reconciling allocations: %w", err)
	}
	if n > 0 {
		m.log.Info("allocations gone from Ironic deleted in metalloc too", zap.Int32("allocations", n))
	}
	return int(n), nil
}

func (m *Mirror) prune(ctx context.Context, before time.Time, uuids []uuid.UUID, holder *int64) (PruneNodesRow, error) {
	var p PruneNodesRow
	err := db.Retry(ctx, func() error {
		var err error
		p, err = m.q.PruneNodes(ctx, PruneNodesParams{Before: before, Uuids: uuids, Holder: holder})
		return err
	})
	if err != nil {
		return p, fmt.Errorf("ironic mirror: removing nodes gone from Ironic: %w", err)
	}
	if p.Lost {
		return p, ErrLeaseLost
	}
	return p, nil
}

// Refresh reads node ident (a uuid, or a name) from Ironic now and
// mirrors it, whoever holds the sync lease (a newer read already stored
// wins). When Ironic answers 404 for a uuid the node is removed from the
// mirror, under the full sync's rules (a node held by an allocation still
// allocating stays); a 404 for a name changes nothing (the node may have
// been renamed: the next full sync sees). metalloc-api calls it after
// every change it proxies for a node, before answering the client, so
// that metalloc's next allocation decision sees the change. moving is
// true when Ironic is still moving the node to a target provision or
// power state (the proxy then reads it again until it arrives). Errors
// are *Error (Ironic) or database errors.
func (m *Mirror) Refresh(ctx context.Context, ident string) (moving bool, err error) {
	readAt, err := m.q.DBNow(ctx)
	if err != nil {
		return false, fmt.Errorf("ironic refresh: reading the database clock: %w", err)
	}
	raw, err := m.client.GetNode(ctx, ident)
	if IsNotFound(err) {
		u, perr := uuid.Parse(ident)
		if perr != nil {
			return false, nil
		}
		p, err := m.prune(ctx, readAt, []uuid.UUID{u}, nil)
		if err == nil && p.Deleted+p.Kept > 0 {
			m.log.Info("node gone from Ironic", zap.String("node", ident), zap.Bool("kept", p.Kept > 0))
		}
		return false, err
	}
	if err != nil {
		return false, err
	}
	if _, err = m.write(ctx, []json.RawMessage{raw}, nil, readAt, nil); err != nil {
		return false, err
	}
	var targets struct {
		UUID      string  `json:"uuid"`
		Provision *string `json:"target_provision_state"`
		Power     *string `json:"target_power_state"`
	}
	_ = json.Unmarshal(raw, &targets)
	if _, err := m.reconcile(ctx, []string{targets.UUID}); err != nil {
		return false, err
	}
	return targets.Provision != nil || targets.Power != nil, nil
}

// Resolve returns the uuid of node ident in the mirror: ident itself when
// it is a uuid, the mirrored node's of that name otherwise; ok is false
// when no mirrored node has that name.
func (m *Mirror) Resolve(ctx context.Context, ident string) (u uuid.UUID, ok bool, err error) {
	if u, err := uuid.Parse(ident); err == nil {
		return u, true, nil
	}
	u, err = m.q.NodeUUIDByName(ctx, ident)
	if errors.Is(err, pgx.ErrNoRows) {
		return uuid.UUID{}, false, nil
	}
	return u, err == nil, err
}

// LeaseStatus is the sync lease as the database has it.
func (m *Mirror) LeaseStatus(ctx context.Context) (LeaseStatusRow, error) {
	return m.q.LeaseStatus(ctx)
}
