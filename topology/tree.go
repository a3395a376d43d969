package topology

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/metalloc/metalloc/node"
)

// TreeFilter selects the nodes Tree counts: of ResourceClass ("" any) with
// all of Traits.
type TreeFilter struct {
	ResourceClass string
	Traits        []string
}

// Domain is a node of the topology tree: a domain (the root is the whole
// fleet) with its node counts. Free counts the nodes an allocation could
// take now (metalloc_node_free), Total all of them.
type Domain struct {
	// Level is the level's name, "" for the root.
	Level string
	// Path is the domain's path prefix (nil for the root). Missing marks
	// the parent's nodes without a value at Level (the last value is "").
	Path    []string
	Missing bool
	// Free and Total count the domain's nodes.
	Free, Total int
	// Children are the domains of the next level, in natural order
	// ("2" before "10"), Missing last.
	Children []*Domain
}

// Tree reads the levels and every node f selects, and returns them as a
// tree of domains with free/total counts (`metalloc-manage topology show`).
func Tree(ctx context.Context, db DBTX, f TreeFilter) ([]Level, *Domain, error) {
	levels, err := Load(ctx, db)
	if err != nil {
		return nil, nil, err
	}
	var rc *string
	if f.ResourceClass != "" {
		rc = &f.ResourceClass
	}
	traits := f.Traits
	if traits == nil {
		traits = []string{}
	}
	rows, err := New(db).NodePaths(ctx, NodePathsParams{ResourceClass: rc, Traits: traits})
	if err != nil {
		return nil, nil, fmt.Errorf("reading node paths: %w", err)
	}
	root := &Domain{}
	for _, r := range rows {
		root.add(levels, r.Path, r.Free)
	}
	root.sort()
	return levels, root, nil
}

// add counts a node with path (free or not) in d and its subdomains.
func (d *Domain) add(levels []Level, path []string, free bool) {
	for cur, l := d, 0; ; l++ {
		cur.Total++
		if free {
			cur.Free++
		}
		if cur.Missing || l >= len(levels) {
			return
		}
		v := ""
		if l < len(path) {
			v = path[l]
		}
		var next *Domain
		for _, c := range cur.Children {
			if c.Path[l] == v {
				next = c
				break
			}
		}
		if next == nil {
			next = &Domain{Level: levels[l].Name, Path: append(slices.Clone(cur.Path), v), Missing: v == ""}
			cur.Children = append(cur.Children, next)
		}
		cur = next
	}
}

func (d *Domain) sort() {
	slices.SortFunc(d.Children, func(a, b *Domain) int {
		return node.NaturalCompare(a.Path[len(a.Path)-1], b.Path[len(b.Path)-1])
	})
	for _, c := range d.Children {
		c.sort()
	}
}

// Label is how WriteTree names d: "all", "rack 1/07", "(no rack)".
func (d *Domain) Label() string {
	switch {
	case d.Level == "":
		return "all"
	case d.Missing:
		return "(no " + d.Level + ")"
	}
	return d.Level + " " + DomainName(d.Path)
}

// WriteTree prints the tree as an indented table (DOMAIN, FREE, TOTAL),
// after a line saying which levels and which nodes it counts.
func WriteTree(w io.Writer, levels []Level, root *Domain, f TreeFilter) error {
	var b strings.Builder
	if len(levels) == 0 {
		b.WriteString("no topology is configured (metalloc-manage topology set NAME=SOURCE ...)\n")
	} else {
		fmt.Fprintf(&b, "topology: %s\n", FormatLevels(levels))
	}
	what := Describe(f.ResourceClass, f.Traits)
	if what == "" {
		what = "of any resource class"
	}
	fmt.Fprintf(&b, "nodes %s: free (available to allocate) / total\n", what)
	type line struct {
		label       string
		free, total int
	}
	var lines []line
	var walk func(d *Domain, depth int)
	walk = func(d *Domain, depth int) {
		lines = append(lines, line{strings.Repeat("  ", depth) + d.Label(), d.Free, d.Total})
		for _, c := range d.Children {
			walk(c, depth+1)
		}
	}
	walk(root, 0)
	width := len("DOMAIN")
	for _, l := range lines {
		width = max(width, len(l.label))
	}
	fmt.Fprintf(&b, "%-*s  %5s  %5s\n", width, "DOMAIN", "FREE", "TOTAL")
	for _, l := range lines {
		fmt.Fprintf(&b, "%-*s  %5d  %5d\n", width, l.label, l.free, l.total)
	}
	_, err := io.WriteString(w, b.String())
	return err
}
