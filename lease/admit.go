package lease

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"go.uber.org/zap"

	"github.com/metalloc/metalloc/db"
	"github.com/metalloc/metalloc/topology"
)

// Horizon is how far past a refused lease's start_time admission looks
// for the earliest window that would fit it, and the availability search's
// default.
const Horizon = 90 * 24 * time.Hour

// MaxAdmitAttempts bounds the picks of one admission: a pick that a
// concurrent admission booked first (the exclusion constraint's 23P01) is
// made again on what is left, up to this many times in all.
const MaxAdmitAttempts = 8

// Request is a lease to admit: its window [Start, End) in whole seconds,
// its owner and what it asks for.
type Request struct {
	UUID         uuid.UUID
	Name         *string
	ProjectID    string
	Start, End   time.Time
	OnStart      string
	Reservations []Reservation
}

// RefusedError is a lease that does not fit: Reasons says why per
// reservation that does not (refusal), Earliest is the earliest start
// within Horizon at which the whole lease would fit (nil: none).
type RefusedError struct {
	Start, End time.Time
	Reasons    []string
	Earliest   *time.Time
}

func (e *RefusedError) Error() string {
	msg := "Lease does not fit: " + strings.Join(e.Reasons, "; ")
	if e.Earliest != nil {
		msg += fmt.Sprintf("; the earliest window for the whole lease starts at %s (until %s)",
			e.Earliest.Format(timeFormat), e.Earliest.Add(e.End.Sub(e.Start)).Format(timeFormat))
	} else {
		msg += fmt.Sprintf("; the whole lease fits in no window of that length starting before %s",
			e.Start.Add(Horizon).Format(timeFormat))
	}
	return msg + "."
}

// ErrContended is returned when every attempt's pick was booked first by
// concurrent admissions (MaxAdmitAttempts).
var ErrContended = errors.New("the nodes picked were booked concurrently by other leases")

// matching reads the reservable nodes of each reservation's class with
// its traits and their busy intervals over [from, until), other than
// lease exclude's (0: none), one MatchingNodes per reservation
// (readMatching); their topology paths down to the reservation's level
// when it has one.
func matching(ctx context.Context, q *Queries, rs []Reservation, exclude int64, from, until time.Time) ([][]node, error) {
	out := make([][]node, len(rs))
	for i, r := range rs {
		var err error
		if out[i], err = readMatching(ctx, q, &r.ResourceClass, r.Traits, r.Forbidden, r.Sources, exclude, from, until); err != nil {
			return nil, err
		}
		if r.Nodes != nil {
			only(out[i], r.Nodes)
		}
	}
	return out, nil
}

// readMatching is MatchingNodes as nodes: the reservable nodes of class
// rc (nil: every class), whether each fits traits and forbidden, its
// path over sources and its busy intervals over [from, until) other than
// lease exclude's (0: none).
func readMatching(ctx context.Context, q *Queries, rc *string, traits, forbidden, sources []string, exclude int64,
	from, until time.Time) ([]node, error) {
	rows, err := q.MatchingNodes(ctx, MatchingNodesParams{ResourceClass: rc, Traits: nonNil(traits),
		Forbidden: nonNil(forbidden), ExcludeLease: exclude, FromTime: from, UntilTime: until, Sources: nonNil(sources)})
	if err != nil {
		return nil, fmt.Errorf("reading reservable nodes: %w", err)
	}
	return toNodes(rows), nil
}

// free reads, per reservation of rs, the nodes it may take over [from,
// until) (FreeNodes: reservable, of its class, not in maintenance, with
// its traits, no other lease's blocking row overlapping the window, among
// its Nodes when it names them), with their topology paths down to its
// level: admission's read, a fraction of matching's (no busy intervals,
// no node it could not take). The first reservation of a class reads only
// the nodes its pick needs (FreeNodes' want: its count; the domain chosen
// in the statement), the others every free node of the class (the
// earlier reservations may take any of them).
func free(ctx context.Context, q *Queries, rs []Reservation, from, until time.Time) ([][]node, error) {
	out := make([][]node, len(rs))
	seen := map[string]bool{}
	for i, r := range rs {
		p := FreeNodesParams{ResourceClass: r.ResourceClass, Traits: nonNil(r.Traits), Forbidden: nonNil(r.Forbidden),
			Sources: nonNil(r.Sources), Rule: r.Rule, Among: r.Nodes, FromTime: from, UntilTime: until}
		if !seen[r.ResourceClass] {
			want := int32(r.Count)
			p.Want = &want
		}
		seen[r.ResourceClass] = true
		rows, err := q.FreeNodes(ctx, p)
		if err != nil {
			return nil, fmt.Errorf("reading free reservable nodes: %w", err)
		}
		ns := make([]node, len(rows))
		for j, row := range rows {
			ns[j] = node{ID: row.ID, Class: r.ResourceClass, Path: row.Path, Eligible: true, Fits: true}
		}
		out[i] = ns
	}
	return out, nil
}

// only marks the nodes of ns whose id is not in ids as not fitting (a
// Reservation's Nodes).
func only(ns []node, ids []int64) {
	keep := make(map[int64]bool, len(ids))
	for _, id := range ids {
		keep[id] = true
	}
	for i := range ns {
		if !keep[ns[i].ID] {
			ns[i].Fits, ns[i].Eligible = false, false
		}
	}
}

// inReadTx runs fn in a read-only transaction with the reads' planner
// settings (ReadPlans).
func (s *Store) inReadTx(ctx context.Context, fn func(q *Queries, tx pgx.Tx) error) error {
	return pgx.BeginTxFunc(ctx, s.pool, pgx.TxOptions{AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		q := New(tx)
		if err := q.ReadPlans(ctx); err != nil {
			return err
		}
		return fn(q, tx)
	})
}

// matchingOn is matching's read of one reservation-like filter on tx:
// the reservable nodes of class rc (nil: every class) with whether they
// fit traits and forbidden, their paths over sources and busy intervals
// over [from, until), on the pool copy (cachedMatching) when it serves,
// else from the database (readMatching).
func (s *Store) matchingOn(ctx context.Context, tx pgx.Tx, rc *string, traits, forbidden, sources []string,
	from, until time.Time) ([]node, error) {
	if ns, ok, err := s.cachedMatching(ctx, tx, rc, traits, forbidden, sources, from, until); err != nil || ok {
		return ns, err
	}
	return readMatching(ctx, New(tx), rc, traits, forbidden, sources, 0, from, until)
}

// Admit books req: in one transaction, it reads the nodes each
// reservation may take over the window (pickAll: the Store's copy of the
// pool and the nodes booked over the window, else FreeNodes), picks
// (choose, at random among the equals so that concurrent admissions
// rarely collide) and inserts the lease, its reservations (each with the
// count it booked: Count, or fewer down to Min; with Min set, Min and
// Count too, as min_count and max_count) and its lease_nodes rows. A row
// another admission committed meanwhile fails the
// insert with an exclusion violation: the transaction is rolled back and
// the pick made again on fresh data, up to MaxAdmitAttempts in all
// (ErrContended). A lease that does not fit is a *RefusedError, its
// reasons read from every reservable node of the classes (matching). A name or
// uuid taken is db's unique violation (leases_name_key, leases_uuid_key).
func (s *Store) Admit(ctx context.Context, req Request, log *zap.Logger) (View, error) {
	from, to := unix(req.Start), unix(req.End)
	var err error
	if req.Reservations, err = s.withSources(ctx, req.Reservations); err != nil {
		return View{}, err
	}
	rnd := rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64()))
	for attempt := 1; ; attempt++ {
		var v View
		var refused []string
		err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
			q := New(tx)
			if err := q.ReadPlans(ctx); err != nil {
				return err
			}
			picks, failed, err := s.pickAll(ctx, tx, req.Reservations, req.Start, req.End, rnd)
			if err != nil {
				return err
			}
			if failed >= 0 {
				// Why, filter by filter: every reservable node of the
				// classes, with its busy intervals (rare: a refusal).
				all, err := matching(ctx, q, req.Reservations, 0, req.Start, req.End)
				if err != nil {
					return err
				}
				refused = refusals(all, req.Reservations, from, to)
				return nil
			}
			if err := q.WritePlans(ctx); err != nil {
				return err
			}
			l, err := q.CreateLease(ctx, CreateLeaseParams{Uuid: req.UUID, Name: req.Name, ProjectID: req.ProjectID,
				StartTime: req.Start, EndTime: req.End, OnStart: req.OnStart})
			if err != nil {
				return err
			}
			var resIDs, nodeIDs []int64
			for i, r := range req.Reservations {
				p := CreateReservationParams{LeaseID: l.ID, ResourceClass: r.ResourceClass, Traits: nonNil(r.Traits),
					ForbiddenTraits: nonNil(r.Forbidden), Count: int32(len(picks[i].IDs)), Rule: r.Rule, Domain: picks[i].Domain}
				if r.Rule != RuleNone {
					p.RuleLevel = &r.Level
				}
				if r.Min > 0 && r.Min <= r.Count { // a range (Blazar's min and max), kept as asked
					lo, hi := int32(r.Min), int32(r.Count)
					p.MinCount, p.MaxCount = &lo, &hi
				}
				id, err := q.CreateReservation(ctx, p)
				if err != nil {
					return err
				}
				for _, n := range picks[i].IDs {
					resIDs, nodeIDs = append(resIDs, id), append(nodeIDs, n)
				}
			}
			if err := lockForBooking(ctx, q, nodeIDs); err != nil {
				return err
			}
			if err := q.InsertLeaseNodes(ctx, InsertLeaseNodesParams{LeaseID: l.ID, ReservationIds: resIDs,
				NodeIds: nodeIDs, StartTime: req.Start, EndTime: req.End}); err != nil {
				return err
			}
			v, err = get(ctx, q, l.Uuid.String())
			return err
		})
		switch {
		case err == nil && refused != nil:
			re := &RefusedError{Start: req.Start, End: req.End, Reasons: refused}
			if at, ok, err := s.earliestWindow(ctx, req.Reservations, req.Start, req.End); err != nil {
				return View{}, err
			} else if ok {
				re.Earliest = &at
			}
			log.Info("lease refused", zap.Stringer("lease", req.UUID), zap.String("project", req.ProjectID),
				zap.Int("attempt", attempt), zap.String("reason", re.Error()))
			return View{}, re
		case err == nil:
			log.Info("lease admitted", zap.Stringer("lease", req.UUID), zap.String("project", req.ProjectID),
				zap.Time("start", req.Start), zap.Time("end", req.End), zap.Int("attempt", attempt))
			return v, nil
		case db.IsExclusionViolation(err, "lease_nodes_no_overlap") || db.IsTransient(err):
			if attempt >= MaxAdmitAttempts {
				log.Warn("lease contended", zap.Stringer("lease", req.UUID), zap.Int("attempts", attempt))
				return View{}, ErrContended
			}
			pause := time.Duration(attempt) * (time.Millisecond + rand.N(5*time.Millisecond))
			select {
			case <-ctx.Done():
				return View{}, ctx.Err()
			case <-time.After(pause):
			}
		default:
			return View{}, err
		}
	}
}

// withSources is rs with the Sources of each reservation that has a
// level but not its sources (a caller that names the level by index
// only) read from the topology (a level index past the topology's
// levels: the sources there are, so that no node is in a domain of it).
func (s *Store) withSources(ctx context.Context, rs []Reservation) ([]Reservation, error) {
	var levels []topology.Level
	out := slices.Clone(rs)
	for i, r := range out {
		if r.LevelIndex < 0 || len(r.Sources) == r.LevelIndex+1 {
			continue
		}
		if levels == nil {
			var err error
			if levels, err = topology.Load(ctx, s.pool); err != nil {
				return nil, err
			}
		}
		out[i].Sources = levelSources(levels, min(r.LevelIndex, len(levels)-1))
	}
	return out, nil
}

// refusals words each reservation that does not fit (chooseAll's order:
// the nodes of the earlier ones taken first).
func refusals(nodes [][]node, rs []Reservation, from, to int64) []string {
	taken := map[int64]bool{}
	var out []string
	for i, r := range rs {
		p, ok := choose(nodes[i], r, from, to, taken, nil)
		if !ok {
			out = append(out, refusal(i, r, nodes[i], taken, from, to))
			continue
		}
		for _, id := range p.IDs {
			taken[id] = true
		}
	}
	if len(out) == 0 {
		// A random pick that failed where the ordered one succeeds:
		// rare (rule preferred or several reservations of one class).
		out = append(out, "the reservations fit one by one but not together; try again")
	}
	return out
}

// earliestWindow is the earliest start in [start, start+Horizon] at which
// the whole lease of rs fits for end-start (earliestAll), on one read of
// the busy intervals over that period.
func (s *Store) earliestWindow(ctx context.Context, rs []Reservation, start, end time.Time) (time.Time, bool, error) {
	var at int64
	var ok bool
	err := s.inReadTx(ctx, func(_ *Queries, tx pgx.Tx) error {
		nodes := make([][]node, len(rs))
		for i, r := range rs {
			var err error
			if nodes[i], err = s.matchingOn(ctx, tx, &r.ResourceClass, r.Traits, r.Forbidden, r.Sources,
				start, end.Add(Horizon)); err != nil {
				return err
			}
			if r.Nodes != nil {
				only(nodes[i], r.Nodes)
			}
		}
		at, ok = earliestAll(nodes, rs, unix(start), unix(end)-unix(start), unix(start.Add(Horizon)))
		return nil
	})
	return fromUnix(at), ok, err
}
