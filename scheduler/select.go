package scheduler

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"github.com/google/uuid"

	"github.com/metalloc/metalloc/placement/client"
)

// RequestSpec is what one allocation asks for, as the scheduler needs it.
type RequestSpec struct {
	// InstanceUUID is the allocation's uuid (the Placement consumer).
	InstanceUUID uuid.UUID
	// ResourceClass is the Ironic resource class; Placement is asked for
	// one unit of client.NormalizeClass(ResourceClass).
	ResourceClass string
	// Traits must all be on the node (Placement's required=).
	Traits []string
	// CandidateNodes, when not empty, restricts the choice to these node
	// uuids.
	CandidateNodes []uuid.UUID
	// Owner, when set, restricts the choice to nodes whose owner or lessee
	// it is (checked by the Filter: Placement knows nothing of owners).
	Owner *string
}

// NodeFilter checks Placement's candidates against the database: Placement
// has no notion of Ironic's node owner and lessee, and its view may lag
// behind node changes the resource tracker has not mirrored yet.
type NodeFilter interface {
	// FitNodes returns those of nodes that can take spec right now (free,
	// of its class, with its traits, owned by or leased to its owner), in
	// any order.
	FitNodes(ctx context.Context, spec RequestSpec, nodes []uuid.UUID) ([]uuid.UUID, error)
}

// CandidateSource answers GET /allocation_candidates?q at
// client.Microversion. Its refusals are *client.Error values (a 400 for an
// unknown class or trait), whether it talks HTTP or runs in-process.
type CandidateSource interface {
	AllocationCandidates(ctx context.Context, q url.Values) (*client.Candidates, error)
}

// Scheduler selects destinations through Placement. Its fields are set once
// before use; it is safe for concurrent use.
type Scheduler struct {
	// Client answers allocation-candidate queries: the Placement
	// service's *client.Client, or placement.Local in-process.
	Client CandidateSource
	// Hostname is the conductor's hostname, recorded as each Selection's
	// ServiceHost.
	Hostname string
	// MaxAlternates is how many alternates each instance gets besides its
	// chosen node (negative counts as 0).
	MaxAlternates int
	// Filter, when not nil, drops candidates the database rules out.
	Filter NodeFilter
}

// ErrNoValidHost is wrapped by SelectDestinations' error when fewer nodes
// fit than instances were requested (a *NoValidHostError).
var ErrNoValidHost = errors.New("no valid host")

// NoValidHostError says how far the candidates got.
type NoValidHostError struct {
	// Wanted is how many instances were requested.
	Wanted int
	// Returned is how many distinct nodes Placement offered.
	Returned int
	// Fitting is how many of those survived candidate_nodes and the
	// database filter.
	Fitting int
	// ResourceClass and Traits are what Placement was asked for.
	ResourceClass string
	Traits        []string
}

func (e *NoValidHostError) Error() string {
	what := "resources=" + e.ResourceClass + ":1"
	if len(e.Traits) > 0 {
		what += " required=" + strings.Join(e.Traits, ",")
	}
	if e.Returned == 0 {
		return fmt.Sprintf("no valid host: Placement has no allocation candidates for %s", what)
	}
	return fmt.Sprintf("no valid host: %d of the %d nodes Placement offered for %s fit (wanted %d)",
		e.Fitting, e.Returned, what, e.Wanted)
}

// Unwrap makes errors.Is(err, ErrNoValidHost) hold.
func (e *NoValidHostError) Unwrap() error { return ErrNoValidHost }

// ErrInvalidRequest is wrapped by SelectDestinations' error when Placement
// refuses the request itself (400): an unknown resource class or trait, a
// malformed name. Retrying does not help; the allocation should fail with
// the error as its reason.
var ErrInvalidRequest = errors.New("placement refused the request")

// invalidRequest wraps a 400 from Placement.
type invalidRequest struct{ err error }

func (e *invalidRequest) Error() string {
	var ce *client.Error
	if errors.As(e.err, &ce) && ce.Detail != "" {
		return "placement refused the request: " + ce.Detail
	}
	return "placement refused the request: " + e.err.Error()
}

func (e *invalidRequest) Is(target error) bool { return target == ErrInvalidRequest }
func (e *invalidRequest) Unwrap() error        { return e.err }

// Limit is the limit= SelectDestinations asks Placement for: enough
// candidates for the chosen nodes and their alternates, with room for
// racing conductors to spread out after the shuffle.
func (s *Scheduler) Limit(numInstances int) int {
	return max(50, 10*(1+s.maxAlternates())*numInstances)
}

func (s *Scheduler) maxAlternates() int { return max(s.MaxAlternates, 0) }

// option is one node Placement offered, with the request that claims it.
type option struct {
	node uuid.UUID
	req  client.AllocationRequest
}

// SelectDestinations asks Placement for allocation candidates fitting spec
// and returns, for each of numInstances instances, a list of Selections:
// the chosen node first, then up to MaxAlternates alternates, each with its
// own allocation request. Chosen nodes are distinct; alternates are never
// another instance's chosen node, and are distinct across instances while
// there are enough candidates. Candidates are shuffled, so that conductors
// racing for the same class spread over the nodes.
//
// Errors: *NoValidHostError (ErrNoValidHost) when fewer nodes fit than
// instances are wanted; ErrInvalidRequest when Placement answers 400 (an
// unknown trait or class); a *client.Error for which client.IsUnreachable
// holds when Placement cannot be reached (retry later); the Filter's error
// (a database error) as it is.
func (s *Scheduler) SelectDestinations(ctx context.Context, spec RequestSpec, numInstances int) ([][]Selection, error) {
	if numInstances < 1 {
		return nil, fmt.Errorf("select destinations: %d instances requested", numInstances)
	}
	rc := client.NormalizeClass(spec.ResourceClass)
	traits := slices.Clone(spec.Traits)
	slices.Sort(traits)
	traits = slices.Compact(traits)
	q := url.Values{"resources": {rc + ":1"}}
	if len(traits) > 0 {
		q.Set("required", strings.Join(traits, ","))
	}
	var within map[uuid.UUID]bool
	limit := s.Limit(numInstances)
	switch len(spec.CandidateNodes) {
	case 0:
	case 1:
		q.Set("in_tree", spec.CandidateNodes[0].String())
	default:
		// Placement filters by one tree only: ask for every candidate of
		// the class (no limit, or the candidate nodes could be cut off)
		// and keep those in the set.
		within = make(map[uuid.UUID]bool, len(spec.CandidateNodes))
		for _, n := range spec.CandidateNodes {
			within[n] = true
		}
		limit = 0
	}
	want := numInstances * (1 + s.maxAlternates())
	opts, returned, err := s.candidates(ctx, spec, q, rc, within, limit)
	if err == nil && len(opts) < want && limit > 0 && returned >= limit {
		// The limit may have cut off the nodes the filters keep (an owner
		// with few nodes among many): ask again for all of them.
		opts, returned, err = s.candidates(ctx, spec, q, rc, within, 0)
	}
	if err != nil {
		return nil, err
	}
	if len(opts) < numInstances {
		return nil, &NoValidHostError{Wanted: numInstances, Returned: returned, Fitting: len(opts),
			ResourceClass: rc, Traits: traits}
	}
	rand.Shuffle(len(opts), func(i, j int) { opts[i], opts[j] = opts[j], opts[i] })

	chosen, rest := opts[:numInstances], opts[numInstances:]
	k := min(s.maxAlternates(), len(rest))
	out := make([][]Selection, numInstances)
	for i, o := range chosen {
		list := make([]Selection, 0, 1+k)
		sel, err := NewSelection(o.node, s.Hostname, o.req, client.Microversion)
		if err != nil {
			return nil, err
		}
		list = append(list, sel)
		for j := range k {
			a := rest[(i*k+j)%len(rest)]
			sel, err := NewSelection(a.node, s.Hostname, a.req, client.Microversion)
			if err != nil {
				return nil, err
			}
			list = append(list, sel)
		}
		out[i] = list
	}
	return out, nil
}

// candidates asks Placement with q (and limit, when > 0) and returns the
// offered nodes that pass within and the Filter, one option per node, and
// how many distinct nodes Placement offered.
func (s *Scheduler) candidates(ctx context.Context, spec RequestSpec, q url.Values, rc string,
	within map[uuid.UUID]bool, limit int) ([]option, int, error) {
	q = maps(q)
	if limit > 0 {
		q.Set("limit", strconv.Itoa(limit))
	}
	cands, err := s.Client.AllocationCandidates(ctx, q)
	if err != nil {
		if client.StatusOf(err) == http.StatusBadRequest {
			return nil, 0, &invalidRequest{err: err}
		}
		return nil, 0, err
	}
	seen := make(map[uuid.UUID]bool, len(cands.AllocationRequests))
	var opts []option
	for _, ar := range cands.AllocationRequests {
		node, ok := nodeOf(ar, rc)
		if !ok || seen[node] {
			continue
		}
		seen[node] = true
		if within != nil && !within[node] {
			continue
		}
		opts = append(opts, option{node: node, req: ar})
	}
	returned := len(seen)
	if s.Filter != nil && len(opts) > 0 {
		ids := make([]uuid.UUID, len(opts))
		for i, o := range opts {
			ids[i] = o.node
		}
		fit, err := s.Filter.FitNodes(ctx, spec, ids)
		if err != nil {
			return nil, 0, err
		}
		ok := make(map[uuid.UUID]bool, len(fit))
		for _, n := range fit {
			ok[n] = true
		}
		opts = slices.DeleteFunc(opts, func(o option) bool { return !ok[o.node] })
	}
	return opts, returned, nil
}

// maps copies url.Values.
func maps(q url.Values) url.Values {
	out := make(url.Values, len(q)+1)
	for k, v := range q {
		out[k] = slices.Clone(v)
	}
	return out
}

// nodeOf is the node an allocation request claims: the provider it takes
// the node's custom resource class from (a node's provider uuid is the node
// uuid).
func nodeOf(ar client.AllocationRequest, rc string) (uuid.UUID, bool) {
	for rp, res := range ar.Allocations {
		if res.Resources[rc] > 0 {
			return rp, true
		}
	}
	return uuid.Nil, false
}
