package candidate

import (
	"bytes"
	"encoding/binary"
	"io"
	"slices"
	"strconv"

	"github.com/google/uuid"

	"github.com/metalloc/metalloc/web"
)

// appendQuotedUUID appends u in its canonical text form, quoted.
func appendQuotedUUID(b []byte, u *uuid.UUID) []byte {
	const hexd = "0123456789abcdef"
	b = append(b, '"')
	for i, c := range u {
		if i == 4 || i == 6 || i == 8 || i == 10 {
			b = append(b, '-')
		}
		b = append(b, hexd[c>>4], hexd[c&15])
	}
	return append(b, '"')
}

// renderer writes a response body at a microversion: the allocation
// requests one by one (areq), then the provider summaries (finish), in
// chunks of about 64 KB (an answer for 100,000 providers is 80 MB of JSON;
// it is never held whole).
type renderer struct {
	s          *cSearch
	out        io.Writer
	v          web.Version
	b          []byte
	werr       error
	classNames []string // by class id, for the ids below 65,536
	n          int      // allocation requests written
	ps, us     []*cProv // scratch
}

// renderChunk is the size of the writes.
const renderChunk = 64 << 10

// newRenderer starts writing the body at v to out.
func (s *cSearch) newRenderer(out io.Writer, v web.Version) *renderer {
	r := &renderer{s: s, out: out, v: v, b: make([]byte, 0, renderChunk+4096)}
	for id, n := range s.classNames {
		if id >= 0 && id < 1<<16 {
			if int(id) >= len(r.classNames) {
				r.classNames = append(r.classNames, make([]string, int(id)+1-len(r.classNames))...)
			}
			r.classNames[id] = n
		}
	}
	r.str(`{"allocation_requests": [`)
	return r
}

func (r *renderer) flush(force bool) {
	if (force || len(r.b) >= renderChunk) && r.werr == nil {
		_, r.werr = r.out.Write(r.b)
		r.b = r.b[:0]
	}
}

func (r *renderer) str(x string) { r.b = append(r.b, x...) }

func (r *renderer) quoted(x string) {
	r.b = append(r.b, '"')
	r.b = append(r.b, x...)
	r.b = append(r.b, '"')
}

func (r *renderer) quotedUUID(p *cProv) { r.b = append(r.b, p.quotedUUID()...) }

func (r *renderer) num(n int64) { r.b = strconv.AppendInt(r.b, n, 10) }

func (r *renderer) className(rc int32) string {
	if rc >= 0 && int(rc) < len(r.classNames) {
		return r.classNames[rc]
	}
	return r.s.classNames[rc]
}

// areq writes one allocation request; it reports whether writing goes
// on (no write failed). It appends to a local buffer (no calls through
// closures, no write barrier per append): it runs once per candidate.
func (r *renderer) areq(a *cAreq) bool {
	b := r.b
	if r.n > 0 {
		b = append(b, ", "...)
	}
	r.n++
	dict := r.v.AtLeast(1, 12)
	// providers in order of first appearance
	ps := r.ps[:0]
	for _, rr := range a.rrs {
		if !containsProv(ps, rr.p) {
			ps = append(ps, rr.p)
		}
	}
	r.ps = ps
	if dict {
		b = append(b, `{"allocations": {`...)
	} else {
		b = append(b, `{"allocations": [`...)
	}
	for j, p := range ps {
		if j > 0 {
			b = append(b, ", "...)
		}
		if dict {
			b = append(b, p.quotedUUID()...)
			b = append(b, `: {"resources": {`...)
		} else {
			b = append(b, `{"resource_provider": {"uuid": `...)
			b = append(b, p.quotedUUID()...)
			b = append(b, `}, "resources": {`...)
		}
		k := 0
		for _, rr := range a.rrs {
			if rr.p != p {
				continue
			}
			if k > 0 {
				b = append(b, ", "...)
			}
			k++
			b = append(b, '"')
			b = append(b, r.className(rr.rc)...)
			b = append(b, `": `...)
			b = strconv.AppendInt(b, rr.amount, 10)
		}
		b = append(b, "}}"...)
	}
	if dict {
		b = append(b, '}')
	} else {
		b = append(b, ']')
	}
	if r.v.AtLeast(1, 34) {
		b = append(b, `, "mappings": {`...)
		for gi, mp := range a.mappings {
			if gi > 0 {
				b = append(b, ", "...)
			}
			b = append(b, '"')
			b = append(b, r.s.groups[gi].Suffix...)
			b = append(b, `": [`...)
			if len(mp) == 1 {
				b = append(b, mp[0].quotedUUID()...)
				b = append(b, ']')
				continue
			}
			us := append(r.us[:0], mp...)
			r.us = us
			slices.SortFunc(us, func(x, y *cProv) int { return bytes.Compare(x.quotedUUID(), y.quotedUUID()) })
			for k, u := range us {
				if k > 0 {
					b = append(b, ", "...)
				}
				b = append(b, u.quotedUUID()...)
			}
			b = append(b, ']')
		}
		b = append(b, '}')
	}
	r.b = append(b, '}')
	r.flush(false)
	return r.werr == nil
}

// finish writes the provider summaries of sums and the end of the body,
// and returns the first write error.
func (r *renderer) finish(sums []*cProv) error {
	s, v, str, quoted, quotedUUID, num := r.s, r.v, r.str, r.quoted, r.quotedUUID, r.num
	className, flush := r.className, r.flush
	str(`], "provider_summaries": {`)
	allRes := v.AtLeast(1, 27)
	requested := map[int32]bool{}
	for _, g := range s.groups {
		for _, c := range g.classes {
			requested[c.rc] = true
		}
	}
	var names []string
	var key []byte
	traitJSON := map[string][]byte{}
	for i, p := range sums {
		if i > 0 {
			str(", ")
		}
		quotedUUID(p)
		str(`: {"resources": {`)
		k := 0
		for _, inv := range p.inv {
			if !allRes && !requested[inv.rc] {
				continue
			}
			if k > 0 {
				str(", ")
			}
			k++
			quoted(className(inv.rc))
			str(`: {"capacity": `)
			num(inv.capacity())
			str(`, "used": `)
			num(s.usage[inv.ix])
			str("}")
		}
		str("}")
		if v.AtLeast(1, 17) {
			// Providers often have the same traits: their JSON list is
			// made once per set.
			key = key[:0]
			for _, t := range p.traits {
				key = binary.AppendUvarint(key, uint64(t))
			}
			frag, ok := traitJSON[string(key)]
			if !ok {
				// In trait id order (standard traits first, custom ones
				// in order of creation), as Placement lists them.
				ids := slices.Sorted(slices.Values(p.traits))
				names = names[:0]
				for _, t := range ids {
					if n := s.traitNames[t]; n != "" {
						names = append(names, n)
					}
				}
				frag = append([]byte(nil), `, "traits": [`...)
				for k, t := range names {
					if k > 0 {
						frag = append(frag, ", "...)
					}
					frag = append(frag, '"')
					frag = append(frag, t...)
					frag = append(frag, '"')
				}
				frag = append(frag, ']')
				traitJSON[string(key)] = frag
			}
			r.b = append(r.b, frag...)
		}
		if v.AtLeast(1, 29) {
			str(`, "parent_provider_uuid": `)
			// At 1.29 and later the summaries hold whole trees, so a
			// loaded parent or root is summarized.
			if pp := p.parentP; p.parent == 0 || pp == nil {
				str("null")
			} else {
				quotedUUID(pp)
			}
			str(`, "root_provider_uuid": `)
			if rp := p.rootP; rp != nil {
				quotedUUID(rp)
			} else {
				str("null")
			}
		}
		str("}")
		flush(false)
	}
	str("}}")
	flush(true)
	return r.werr
}

// AllocationRequest is one allocation request of a Result as data: the
// amount of each class to take from each provider, and the providers of
// each request group by suffix (the JSON answer's "allocations" and
// "mappings").
type AllocationRequest struct {
	Allocations map[uuid.UUID]map[string]int64
	Mappings    map[string][]uuid.UUID
}

// Requests returns r's allocation requests in the order Write writes them,
// for in-process callers (no JSON).
func (r *Result) Requests() []AllocationRequest {
	s := r.s
	out := make([]AllocationRequest, 0, len(r.ans.areqs))
	r.each(func(a *cAreq) bool {
		ar := AllocationRequest{Allocations: make(map[uuid.UUID]map[string]int64, len(a.rrs))}
		for _, rr := range a.rrs {
			m := ar.Allocations[rr.p.uuid]
			if m == nil {
				m = map[string]int64{}
				ar.Allocations[rr.p.uuid] = m
			}
			m[s.classNames[rr.rc]] += rr.amount
		}
		if len(a.mappings) > 0 {
			ar.Mappings = make(map[string][]uuid.UUID, len(a.mappings))
			for gi, mp := range a.mappings {
				ids := make([]uuid.UUID, len(mp))
				for k, p := range mp {
					ids[k] = p.uuid
				}
				ar.Mappings[s.groups[gi].Suffix] = ids
			}
		}
		out = append(out, ar)
		return true
	})
	return out
}
