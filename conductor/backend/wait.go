package backend

import (
	"slices"
	"strings"
	"sync"
	"time"
)

// Wait is what Process keeps, in the row it processes, while every node
// that fits the row is locked by others (concurrent reservations, API
// updates): since when the row waits, and when to call Process again. A
// row does not wait inside Process: Process makes one attempt and returns
// Waiting, and the conductor queues the row again after Retry, so that a
// worker is not held by a row that waits and the rows waiting for locked
// nodes wait together, however many they are. Once a row has waited the
// backend's LockedWait (conductor.locked_node_wait) Process makes a last
// attempt and, if every fitting node is still locked, moves the row to
// error.
type Wait struct {
	// Since is when Process first found every fitting node locked (zero
	// until it has).
	Since time.Time
	// Retry is how long after Process returned Waiting to call it again.
	Retry time.Duration
	// tried reports whether Process has run an attempt in the database
	// for the row (the name-first rule applies to the first one only).
	tried bool
	// fit is how many nodes fitted at the row's last attempt (last_error).
	fit int64
}

// Waiting reports whether the row has started waiting for a locked node:
// Process has returned Waiting for it before.
func (w Wait) Waiting() bool { return !w.Since.IsZero() }

// expired reports whether a row waiting since w.Since has waited limit by
// now.
func (w Wait) expired(now time.Time, limit time.Duration) bool {
	return w.Waiting() && !now.Before(w.Since.Add(limit))
}

// waitFor makes c wait (Waiting) for retry at most, and no longer than its
// limit allows; it returns false when c has waited limit already.
func waitFor(c *Claimed, now time.Time, retry, limit time.Duration) bool {
	if !c.Wait.Waiting() {
		c.Wait.Since = now
	}
	left := c.Wait.Since.Add(limit).Sub(now)
	if left <= 0 {
		return false
	}
	c.Wait.Retry = min(retry, left)
	return true
}

// lockedKinds is what a backend knows of the kinds of request whose every
// fitting node was locked at their last attempt, so that the rows of one
// kind wait for one attempt (the probe) at a time instead of each querying
// the database: a kind is what decides which nodes fit (resource class,
// traits, owner, candidate_nodes: kindOf). A probe that finds every node
// still locked doubles the kind's wait (from first up to most); one that
// gets a node forgets the kind, and the rows of the kind try again at
// their next Retry.
type lockedKinds struct {
	first, most time.Duration

	mu    sync.Mutex
	kinds map[string]*lockedKind
}

// lockedKind is a kind of request whose every fitting node was locked at
// its last probe.
type lockedKind struct {
	next    time.Time     // no row of the kind tries before
	backoff time.Duration // the wait after a probe that finds every node locked
	fit     int64         // how many nodes fitted at the last probe
}

// staleKind is how long after its last probe time a kind is forgotten (its
// rows have all ended).
const staleKind = time.Minute

func newLockedKinds(first, most time.Duration) *lockedKinds {
	return &lockedKinds{first: first, most: most, kinds: map[string]*lockedKind{}}
}

// wait reports whether a row of kind k should not try now: the kind was
// locked at its last probe, and the next is due in left; fit is how many
// nodes fitted then. Otherwise (ok false) the caller is the kind's probe:
// until it reports (locked or free), the other rows of the kind wait for
// it.
func (l *lockedKinds) wait(k string, now time.Time) (left time.Duration, fit int64, ok bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	e := l.kinds[k]
	if e == nil {
		return 0, 0, false
	}
	if now.Before(e.next) {
		return e.next.Sub(now), e.fit, true
	}
	e.next = now.Add(e.backoff)
	return 0, 0, false
}

// locked records that an attempt for kind k found every one of its fit
// fitting nodes locked, and returns how long the kind's rows wait before
// the next probe.
func (l *lockedKinds) locked(k string, fit int64, now time.Time) time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	e := l.kinds[k]
	if e == nil {
		for name, old := range l.kinds {
			if now.Sub(old.next) > staleKind {
				delete(l.kinds, name)
			}
		}
		e = &lockedKind{backoff: l.first}
		l.kinds[k] = e
	} else {
		e.backoff = min(2*e.backoff, l.most)
	}
	e.next, e.fit = now.Add(e.backoff), fit
	return e.backoff
}

// free forgets kind k: an attempt got a node, others may too.
func (l *lockedKinds) free(k string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.kinds, k)
}

// kindOf is the kind of c's request: what decides which nodes fit it.
func kindOf(c *Claimed) string {
	owner := "\x00"
	if c.Owner != nil {
		owner = *c.Owner
	}
	traits := slices.Clone(c.Traits)
	slices.Sort(traits)
	cands := make([]string, len(c.CandidateNodes))
	for i, u := range c.CandidateNodes {
		cands[i] = u.String()
	}
	slices.Sort(cands)
	return strings.Join([]string{c.ResourceClass, owner, strings.Join(traits, ","), strings.Join(cands, ",")}, "\x01")
}
