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

// write writes the response body to w, in chunks (an answer for 100,000
// providers is 80 MB of JSON; it is never held whole).
func (r *Result) Write(w io.Writer) error {
	return r.s.render(w, r.areqs, r.sums, r.v)
}

// render writes the response body at microversion v to out.
func (s *cSearch) render(out io.Writer, areqs []*cAreq, sums []*cProv, v web.Version) error {
	const chunk = 64 << 10
	b := make([]byte, 0, chunk+4096)
	var werr error
	flush := func(force bool) {
		if (force || len(b) >= chunk) && werr == nil {
			_, werr = out.Write(b)
			b = b[:0]
		}
	}
	str := func(x string) { b = append(b, x...) }
	quoted := func(x string) { b = append(b, '"'); b = append(b, x...); b = append(b, '"') }
	quotedUUID := func(p *cProv) { b = append(b, p.quotedUUID()...) }
	var classNames []string
	for id, n := range s.classNames {
		if id >= 0 && id < 1<<16 {
			if int(id) >= len(classNames) {
				classNames = append(classNames, make([]string, int(id)+1-len(classNames))...)
			}
			classNames[id] = n
		}
	}
	className := func(rc int32) string {
		if rc >= 0 && int(rc) < len(classNames) {
			return classNames[rc]
		}
		return s.classNames[rc]
	}
	num := func(n int64) { b = strconv.AppendInt(b, n, 10) }
	str(`{"allocation_requests": [`)
	dict := v.AtLeast(1, 12)
	var ps, us []*cProv
	for i, a := range areqs {
		if i > 0 {
			str(", ")
		}
		// providers in order of first appearance
		ps = ps[:0]
		for _, rr := range a.rrs {
			if !containsProv(ps, rr.p) {
				ps = append(ps, rr.p)
			}
		}
		if dict {
			str(`{"allocations": {`)
		} else {
			str(`{"allocations": [`)
		}
		for j, p := range ps {
			if j > 0 {
				str(", ")
			}
			if dict {
				quotedUUID(p)
				str(`: {"resources": {`)
			} else {
				str(`{"resource_provider": {"uuid": `)
				quotedUUID(p)
				str(`}, "resources": {`)
			}
			k := 0
			for _, rr := range a.rrs {
				if rr.p != p {
					continue
				}
				if k > 0 {
					str(", ")
				}
				k++
				quoted(className(rr.rc))
				str(": ")
				num(rr.amount)
			}
			str("}}")
		}
		if dict {
			str("}")
		} else {
			str("]")
		}
		if v.AtLeast(1, 34) {
			str(`, "mappings": {`)
			for gi, mp := range a.mappings {
				if gi > 0 {
					str(", ")
				}
				quoted(s.groups[gi].Suffix)
				str(": [")
				if len(mp) == 1 {
					quotedUUID(mp[0])
					str("]")
					continue
				}
				us = append(us[:0], mp...)
				slices.SortFunc(us, func(x, y *cProv) int { return bytes.Compare(x.quotedUUID(), y.quotedUUID()) })
				for k, u := range us {
					if k > 0 {
						str(", ")
					}
					quotedUUID(u)
				}
				str("]")
			}
			str("}")
		}
		str("}")
		flush(false)
	}
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
			b = append(b, frag...)
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
	return werr
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
	out := make([]AllocationRequest, 0, len(r.areqs))
	for _, a := range r.areqs {
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
	}
	return out
}
