package topology

import (
	"context"
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// Candidate is a free node a group may take: its id and uuid, and its path,
// one value per level, coarse to fine ("" where the node has none).
type Candidate struct {
	ID   int64
	UUID uuid.UUID
	Path []string
}

// Filter selects candidates the way an allocation does (metalloc_pick's
// predicates): the resource class, all of Traits, CandidateNodes (nil: any
// node), and Owner (nil: any; else nodes owned by or leased to it).
type Filter struct {
	ResourceClass  string
	Traits         []string
	CandidateNodes []uuid.UUID
	Owner          *string
}

// TxBeginner starts a transaction: a *pgxpool.Pool, a *pgx.Conn, or a
// pgx.Tx (then a savepoint).
type TxBeginner interface {
	Begin(ctx context.Context) (pgx.Tx, error)
}

// Load returns the topology's levels, coarse to fine (none when no
// topology is configured).
func Load(ctx context.Context, db DBTX) ([]Level, error) {
	rows, err := New(db).ListLevels(ctx)
	if err != nil {
		return nil, fmt.Errorf("loading topology: %w", err)
	}
	levels := make([]Level, len(rows))
	for i, r := range rows {
		levels[i] = Level{Name: r.Name, Source: r.Source}
	}
	return levels, nil
}

// Save validates levels (ValidateLevels) and replaces the topology with
// them in one transaction; concurrent Saves are serialised and readers
// see the old or the new list, never a mix. An empty list removes the
// topology.
func Save(ctx context.Context, db TxBeginner, levels []Level) error {
	if err := ValidateLevels(levels); err != nil {
		return err
	}
	names := make([]string, len(levels))
	sources := make([]string, len(levels))
	for i, l := range levels {
		names[i], sources[i] = l.Name, l.Source
	}
	err := pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		q := New(tx)
		if err := q.LockLevels(ctx); err != nil {
			return err
		}
		if err := q.DeleteLevels(ctx); err != nil {
			return err
		}
		return q.InsertLevels(ctx, InsertLevelsParams{Names: names, Sources: sources})
	})
	if err != nil {
		return fmt.Errorf("saving topology: %w", err)
	}
	return nil
}

// FreeCandidates returns the free nodes that fit f, in id order, with
// their paths under the topology as stored (one statement, so the paths
// and the topology are of one snapshot; no locks are taken: the caller
// locks the nodes it chooses, skipping those others took meanwhile).
//
// When db can begin a transaction (a pool, a connection or a pgx.Tx), the
// statement runs in one (a savepoint in a pgx.Tx) with jit off:
// its estimated cost passes jit_above_cost at a few thousand nodes and
// compiling takes longer than the query (about 10 ms at 10,000 nodes).
// In a caller's transaction, jit then stays off until it ends.
func FreeCandidates(ctx context.Context, db DBTX, f Filter) ([]Candidate, error) {
	traits := f.Traits
	if traits == nil {
		traits = []string{}
	}
	arg := FreeCandidatesParams{ResourceClass: f.ResourceClass, Candidates: f.CandidateNodes, Owner: f.Owner, Traits: traits}
	var rows []FreeCandidatesRow
	var err error
	if b, ok := db.(TxBeginner); ok {
		err = pgx.BeginFunc(ctx, b, func(tx pgx.Tx) error {
			q := New(tx)
			if err := q.JITOff(ctx); err != nil {
				return err
			}
			rows, err = q.FreeCandidates(ctx, arg)
			return err
		})
	} else {
		rows, err = New(db).FreeCandidates(ctx, arg)
	}
	if err != nil {
		return nil, fmt.Errorf("reading free candidates: %w", err)
	}
	cands := make([]Candidate, len(rows))
	for i, r := range rows {
		cands[i] = Candidate{ID: r.ID, UUID: r.Uuid, Path: r.Path}
	}
	return cands, nil
}
