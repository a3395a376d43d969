// Package topology is a THROW-AWAY STUB of the interface in GANG.md, kept
// in branch groups only until the topo helper's package is merged.
package topology

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sort"
	"strings"
	"sync"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// DBTX is what the queries run on.
type DBTX interface {
	Exec(context.Context, string, ...interface{}) (pgconn.CommandTag, error)
	Query(context.Context, string, ...interface{}) (pgx.Rows, error)
	QueryRow(context.Context, string, ...interface{}) pgx.Row
}

// Level is one topology level.
type Level struct{ Name, Source string }

var (
	mu     sync.Mutex
	levels = []Level{{"row", "extra.row"}, {"rack", "extra.rack"}}
)

// Levels returns the topology (stub: in memory).
func Levels(ctx context.Context, db DBTX) ([]Level, error) {
	mu.Lock()
	defer mu.Unlock()
	return append([]Level(nil), levels...), nil
}

// Filter selects free candidates.
type Filter struct {
	ResourceClass  string
	Traits         []string
	CandidateNodes []uuid.UUID
	Owner          *string
}

// Candidate is a free node with its path.
type Candidate struct {
	ID   int64
	UUID uuid.UUID
	Path []string
}

// FreeCandidates (stub: extra.KEY sources only).
func FreeCandidates(ctx context.Context, db DBTX, f Filter) ([]Candidate, error) {
	lv, _ := Levels(ctx, db)
	keys := make([]string, len(lv))
	for i, l := range lv {
		keys[i] = strings.TrimPrefix(l.Source, "extra.")
	}
	if f.Traits == nil {
		f.Traits = []string{}
	}
	rows, err := db.Query(ctx, `
		SELECT n.id, n.uuid, ARRAY(SELECT coalesce(n.extra->>k, '') FROM unnest($5::text[]) WITH ORDINALITY x(k, o) ORDER BY o)
		  FROM free_nodes n
		 WHERE n.resource_class = $1
		   AND metalloc_node_in_scope(n.uuid, n.owner, n.lessee, $3::uuid[], $4::text)
		   AND metalloc_node_has_traits(n.traits, $2::text[])
		 ORDER BY n.id`, f.ResourceClass, f.Traits, f.CandidateNodes, f.Owner, keys)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (Candidate, error) {
		var c Candidate
		return c, r.Scan(&c.ID, &c.UUID, &c.Path)
	})
}

// Rule is a placement rule.
type Rule int

// Rules.
const (
	None Rule = iota
	Required
	Preferred
)

// Request is what Choose places.
type Request struct {
	Count    int
	Rule     Rule
	Level    int
	Within   []string
	Prefer   []string
	Describe string
}

// Plan is one way to place a request.
type Plan struct {
	Domain []string
	Nodes  []Candidate
	Spare  int
}

// NoFit explains why nothing fits.
type NoFit struct{ Msg string }

func (n *NoFit) Error() string { return n.Msg }

func hasPrefix(p, pre []string) bool {
	if len(p) < len(pre) {
		return false
	}
	for i := range pre {
		if p[i] != pre[i] {
			return false
		}
	}
	return true
}

// Choose (stub: required/preferred best fit in one domain, else none).
func Choose(lv []Level, cands []Candidate, req Request, rng *rand.Rand) ([]Plan, *NoFit) {
	var in []Candidate
	for _, c := range cands {
		if hasPrefix(c.Path, req.Within) {
			in = append(in, c)
		}
	}
	if req.Rule == None {
		if len(in) < req.Count {
			return nil, &NoFit{fmt.Sprintf("only %d free nodes of %s, %d needed", len(in), req.Describe, req.Count)}
		}
		return []Plan{{Nodes: in, Spare: len(in) - req.Count}}, nil
	}
	dom := map[string][]Candidate{}
	for _, c := range in {
		d := c.Path[:req.Level+1]
		if slices_contains(d, "") {
			continue
		}
		k := strings.Join(d, "/")
		dom[k] = append(dom[k], c)
	}
	var plans []Plan
	best := 0
	bestName := ""
	for k, cs := range dom {
		if len(cs) > best {
			best, bestName = len(cs), k
		}
		if len(cs) >= req.Count {
			plans = append(plans, Plan{Domain: strings.Split(k, "/"), Nodes: cs, Spare: len(cs) - req.Count})
		}
	}
	rng.Shuffle(len(plans), func(i, j int) { plans[i], plans[j] = plans[j], plans[i] })
	sort.SliceStable(plans, func(i, j int) bool { return plans[i].Spare < plans[j].Spare })
	if len(plans) == 0 {
		if req.Rule == Preferred && len(in) >= req.Count {
			return []Plan{{Nodes: in, Spare: len(in) - req.Count}}, nil
		}
		return nil, &NoFit{fmt.Sprintf("no %s has %d free nodes of %s: best is %s with %d", lv[req.Level].Name, req.Count, req.Describe, bestName, best)}
	}
	return plans, nil
}

func slices_contains(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}
