package candidate

import (
	"io"
)

// A request's memory does not grow with its answer. An answer in order
// (not randomized) from one world, the common case and the one that can be
// huge (an unlimited request over many providers, or granular groups
// multiplied over wide trees: one root with 8 children and 6 groups is
// 262,144 candidates, 160 MB of JSON), is searched once by Find, keeping
// only the trees it uses (the provider summaries are written after the
// allocation requests, and their traits are read before the answer starts),
// and searched again by Write, each candidate written as it is found and
// forgotten. An answer of at most collectMax candidates is kept by the
// first search instead and written from memory. A randomized answer (a
// shuffle or a random sample) and the batched search of a limited request
// on a large world are held whole: their size is bounded by limit and by
// the request's max (Finder.SetMax).

// collectMax is the most candidates the first search keeps to write them
// from memory; a larger answer is searched again as it is written.
const collectMax = 1024

// answer is the allocation requests of a Result: collected (areqs), or
// (stream not nil) searched again as they are written.
type answer struct {
	areqs  []*cAreq
	stream *streamed
	// roots are those of the trees the requests use, for the provider
	// summaries; keepProvs (before 1.29 on nested trees) the providers
	// summarized.
	roots     []*cProv
	keepProvs map[int64]bool
}

// streamed is how to search an answer in order again: its world and rules.
type streamed struct {
	w *cWorld
	// filter drops the candidates using two providers of one tree (before
	// 1.29 on nested trees); limit (when filtering: the search cannot stop
	// at it) is the most candidates of the answer.
	filter bool
	limit  int
}

// run searches st.w, passing sink the candidates of the answer in order
// (each valid only during the call; sink returns false to stop). When
// filtering, the candidates after the limit go to extra, or end the search
// when extra is nil: Placement's summaries then keep the providers of
// every candidate, not only of those answered.
func (st *streamed) run(s *cSearch, sink, extra func(*cAreq) bool) {
	s.generated = 0
	n := 0
	s.search(st.w, map[string]bool{}, func(a *cAreq) bool {
		if st.filter && !onePerTree(a) {
			return true
		}
		n++
		if st.limit > 0 && n > st.limit {
			return extra != nil && extra(a)
		}
		return sink(a)
	})
}

// inOrder is the answer in order from w: it searches w once for the
// trees the candidates use, keeping the candidates only while they are at
// most keepMax (else the answer is streamed).
func (s *cSearch) inOrder(w *cWorld, noCap bool, keepMax int) answer {
	st := &streamed{w: w, filter: noCap, limit: s.req.Limit}
	var ans answer
	var extra func(*cAreq) bool
	if noCap {
		ans.keepProvs = map[int64]bool{}
		extra = func(a *cAreq) bool {
			markProviders(ans.keepProvs, a)
			return true
		}
	}
	marked := map[*cProv]bool{}
	collecting := true
	st.run(s, func(a *cAreq) bool {
		if noCap {
			markProviders(ans.keepProvs, a)
		}
		ans.roots = markRoots(ans.roots, marked, a)
		if collecting {
			if len(ans.areqs) < keepMax {
				ans.areqs = append(ans.areqs, a.clone())
			} else {
				ans.areqs, collecting = nil, false
			}
		}
		return true
	}, extra)
	if !collecting {
		ans.stream = st
	}
	return ans
}

// each passes the answer's allocation requests, in order, to fn (until it
// returns false).
func (r *Result) each(fn func(*cAreq) bool) {
	if st := r.ans.stream; st != nil {
		st.run(r.s, fn, nil)
		return
	}
	for _, a := range r.ans.areqs {
		if !fn(a) {
			return
		}
	}
}

// Write writes the response body to w, in chunks: neither the JSON nor
// (for an answer in order) the candidates are ever held whole.
func (r *Result) Write(w io.Writer) error {
	out := r.s.newRenderer(w, r.v)
	r.each(out.areq)
	return out.finish(r.sums)
}
