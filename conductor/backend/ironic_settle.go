package backend

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/google/uuid"
	"go.uber.org/zap"

	"github.com/metalloc/metalloc/ironic"
)

// verdictKind is how Ironic took an allocation on the node metalloc chose.
type verdictKind int

const (
	// vActive: Ironic's copy is active on the node.
	vActive verdictKind = iota
	// vRefused: Ironic refused the node (taken there, in maintenance,
	// gone, not available, other traits): another node may do.
	vRefused
	// vFailed: Ironic refused the allocation itself (its name is taken
	// there, a request Ironic finds invalid): no other node helps.
	vFailed
)

// verdict is the outcome of creating an allocation in Ironic on a node.
type verdict struct {
	kind verdictKind
	// reason is Ironic's own words (its last_error, or its answer).
	reason string
	// kept is true when Ironic keeps a copy in error.
	kept bool
}

// journalCreating is the journal state of an allocation sent, or about to
// be sent, to Ironic.
const journalCreating = "creating"

// settle takes owned row r to its end: hold a node (the one it holds, or
// one picked now), create the allocation in Ironic on it (create), and
// activate it (IronicActivate) once Ironic's copy is active there. A node
// Ironic refuses is let go and marked unavailable (IronicUnhold), read
// again from Ironic at once (reread: the mirror then has Ironic's word),
// Ironic's copy in error deleted, and another node tried, for as long as
// nodes fit, up to AllocationTimeout from the first try; then the
// allocation goes to error with Ironic's reason, Ironic keeping its copy
// in error too. When no other node fits it goes to error with the reason
// nothing fits, nothing of it left in Ironic. It returns an error, leaving
// the row allocating and owned (with its node, if it holds one), when the
// database or Ironic cannot be reached or ctx ends.
func (b *Ironic) settle(ctx context.Context, me int64, r IronicRequestsRow) (Outcome, error) {
	c := claimedOf(r.AllocationRequest)
	if c.Traits == nil {
		c.Traits = []string{}
	}
	if len(c.CandidateNodes) == 0 {
		c.CandidateNodes = nil
	}
	log := b.log.With(zap.Stringer("allocation", c.UUID))
	nodeID, node := r.NodeID, r.NodeUuid
	journal := r.JournalState
	var journalNode uuid.UUID
	if r.JournalNode != nil {
		journalNode = *r.JournalNode
	}
	attempts := int(r.Attempts)
	var last *verdict // the last refusal
	first := true
	began := time.Now()
	// locked is when the holds started finding every fitting node locked
	// (zero while they find one): LockedWait counts from there, not from
	// began, as refusals before may have taken a while.
	var locked time.Time
	backoff := 5 * time.Millisecond
	for {
		if nodeID == nil {
			var name *string
			if first {
				name = c.Name
			}
			h, err := b.q.IronicHold(ctx, IronicHoldParams{ID: c.ID, Me: me, Name: name})
			switch {
			case err != nil:
				return transientErr(c, err)
			case h.Lost:
				log.Info("allocation no longer owned by this conductor; dropping it")
				return Lost, nil
			case h.Blocked:
				return transientErr(c, fmt.Errorf("%w: an earlier allocation with uuid %s is still being deleted in Ironic",
					ErrIronicUnavailable, c.UUID))
			case h.NodeID == nil:
				if locked.IsZero() {
					locked = time.Now()
				}
				out, done, err := b.noNode(ctx, me, c, journal, last, attempts, locked)
				if done || err != nil {
					return out, err
				}
				select {
				case <-ctx.Done():
					return transientErr(c, ctx.Err())
				case <-time.After(backoff):
				}
				backoff = min(2*backoff, 80*time.Millisecond)
				continue
			}
			nodeID, node = h.NodeID, h.NodeUuid
			locked, backoff = time.Time{}, 5*time.Millisecond
			attempts++
			s := journalCreating
			journal, journalNode = &s, *node
		} else if journal == nil || *journal != journalCreating || journalNode != *node {
			// Held but not journaled on this node: a group member, or a
			// conductor that stopped between its hold and its intent.
			n, err := b.q.IronicIntent(ctx, IronicIntentParams{ID: c.ID, Me: me, NodeID: *nodeID})
			switch {
			case err != nil:
				return transientErr(c, err)
			case n == 0:
				return Lost, nil
			case n < 0:
				return transientErr(c, fmt.Errorf("%w: an earlier allocation with uuid %s is still being deleted in Ironic",
					ErrIronicUnavailable, c.UUID))
			}
			attempts = int(n)
			s := journalCreating
			journal, journalNode = &s, *node
		}
		first = false
		v, err := b.create(ctx, c, r.Extra, *node)
		if err != nil {
			return transientErr(c, err)
		}
		switch v.kind {
		case vActive:
			n, err := b.q.IronicActivate(ctx, IronicActivateParams{ID: c.ID, Me: me, NodeID: *nodeID})
			if err != nil {
				return transientErr(c, err)
			}
			if n == 0 {
				// Deleted meanwhile (the journal's trigger has Ironic's copy
				// deleted too) or taken over (its new owner finds the copy).
				log.Info("allocation active in Ironic but no longer this conductor's; dropping it")
				return Lost, nil
			}
			log.Debug("allocation active in Ironic and in metalloc", zap.Stringer("node", *node), zap.Int("attempt", attempts))
			return Reserved, nil
		case vFailed:
			return b.fail(ctx, me, c, nodeID, nil, failMessage(c, v.reason, "Ironic refused the allocation"), v.kept)
		}
		last = &v
		b.Metrics.nodeRefused()
		mark := fmt.Sprintf("metalloc: Ironic refused allocation %s on this node (%s); not allocatable until Ironic is read again",
			c.UUID, strings.TrimSuffix(v.reason, "."))
		log.Info("Ironic refused the node; reading it again from Ironic and trying another", zap.Stringer("node", *node),
			zap.String("reason", v.reason), zap.Int("attempt", attempts))
		if spent := time.Since(began); spent >= b.cfg.AllocationTimeout {
			out, err := b.fail(ctx, me, c, nodeID, &mark, failMessage(c, v.reason,
				fmt.Sprintf("Ironic refused the %d nodes metalloc tried, the last %s; other nodes may fit, but %s passed "+
					"(ironic.allocation_timeout %s)", attempts, node, spent.Round(time.Millisecond), b.cfg.AllocationTimeout)), v.kept)
			if err == nil {
				b.reread(ctx, *node)
			}
			return out, err
		}
		out, err := b.q.IronicUnhold(ctx, IronicUnholdParams{ID: c.ID, Me: me, NodeID: nodeID, Mark: &mark})
		switch {
		case err != nil:
			return transientErr(c, err)
		case out == "lost":
			return Lost, nil
		}
		b.reread(ctx, *node)
		nodeID, node = nil, nil
		if v.kept {
			// The next node is asked with the same uuid: Ironic's copy in
			// error goes first.
			if err := b.deleteCopy(ctx, c.UUID); err != nil {
				return transientErr(c, err)
			}
		}
	}
}

// noNode handles a hold that found no unlocked node: the allocation fails
// when no node fits at all (with Ironic's last reason when it refused
// nodes before, else with the sentence of the filter that left nothing),
// or when the fitting nodes stayed locked for LockedWait since locked;
// otherwise the caller waits and tries again (done false).
func (b *Ironic) noNode(ctx context.Context, me int64, c Claimed, journal *string, last *verdict, attempts int,
	locked time.Time) (out Outcome, done bool, err error) {
	stats, err := b.q.FitStats(ctx, FitStatsParams{
		ResourceClass: c.ResourceClass, Candidates: c.CandidateNodes, Owner: c.Owner, Traits: c.Traits,
	})
	if err != nil {
		out, err = transientErr(c, err)
		return out, true, err
	}
	var msg string
	switch {
	case stats.Fitting == 0 && last != nil:
		reason, detail := noFit(c, stats)
		msg = failMessage(c, last.reason, fmt.Sprintf("Ironic refused the %d nodes metalloc tried, and %s (%s)",
			attempts, reason, detail))
	case stats.Fitting == 0:
		reason, detail := noFit(c, stats)
		msg = fmt.Sprintf("Failed to process allocation %s: %s. (%s)", c.UUID, reason, detail)
	case time.Since(locked) >= b.cfg.LockedWait:
		msg = fmt.Sprintf("Failed to process allocation %s: could not reserve any of %d suitable nodes: they stayed locked by concurrent reservations or updates.",
			c.UUID, stats.Fitting)
	default:
		return Lost, false, nil
	}
	if journal != nil && *journal == journalCreating {
		// A copy of an earlier attempt may be in Ironic: it goes first,
		// so that nothing is left there of an allocation failed here.
		if err := b.deleteCopy(ctx, c.UUID); err != nil {
			out, err = transientErr(c, err)
			return out, true, err
		}
	}
	out, err = b.fail(ctx, me, c, nil, nil, msg, false)
	return out, true, err
}

// reread reads node again from Ironic after Ironic refused it
// (Mirror.Refresh, within the in-flight cap): the mirror gets Ironic's
// word at once (taken there: its instance; in maintenance; gone) in place
// of metalloc's mark, so that no pick sees the node free while Ironic has
// it taken, and the no-fit counts say what it is. A node Ironic shows
// allocatable again (its taker let go) may be picked again. A failed read
// leaves the mark: the node stays unavailable until a later read.
func (b *Ironic) reread(ctx context.Context, node uuid.UUID) {
	err := b.request(ctx, "refresh", func() error {
		_, err := b.mirror.Refresh(ctx, node.String())
		return err
	})
	if err != nil && ctx.Err() == nil {
		b.log.Warn("could not read a refused node again from Ironic; it stays unavailable until a later read",
			zap.Stringer("node", node), zap.Error(err))
	}
}

// failMessage is last_error for an allocation Ironic refused: Ironic's own
// reason (its last_error already reads "Failed to process allocation
// <uuid>: ...", the same uuid), followed by detail in parentheses.
func failMessage(c Claimed, reason, detail string) string {
	reason = strings.TrimSpace(reason)
	if !strings.HasPrefix(reason, "Failed to process allocation") {
		reason = fmt.Sprintf("Failed to process allocation %s: %s", c.UUID, strings.TrimSuffix(reason, "."))
	}
	if !strings.HasSuffix(reason, ".") {
		reason += "."
	}
	return reason + " (" + detail + ")"
}

// fail moves c to error with msg, letting go of nodeID (marked with mark
// when set); kept says Ironic keeps its copy in error (journal error),
// else the journal row goes.
func (b *Ironic) fail(ctx context.Context, me int64, c Claimed, nodeID *int64, mark *string, msg string, kept bool) (Outcome, error) {
	out, err := b.q.IronicUnhold(ctx, IronicUnholdParams{ID: c.ID, Me: me, NodeID: nodeID, Mark: mark, Error: &msg, Keep: kept})
	switch {
	case err != nil:
		return transientErr(c, err)
	case out == "lost":
		return Lost, nil
	}
	b.log.Info("allocation failed", zap.Stringer("allocation", c.UUID), zap.String("last_error", msg))
	return Failed, nil
}

// create makes allocation c (with extra) in Ironic with node as the only
// candidate and waits until Ironic has settled it (poll), holding one of
// the limit's slots meanwhile (ironic_limit.go). Ironic answering
// 409 means the uuid is there already (a retry after an outage, a
// takeover: that copy is followed) or the name is taken (vFailed). A copy
// made for another node by an earlier attempt is deleted and the
// allocation created again. Errors are transient (ErrIronicUnavailable, the
// context's end).
func (b *Ironic) create(ctx context.Context, c Claimed, extra json.RawMessage, node uuid.UUID) (v verdict, err error) {
	b.pause(ctx, "before_create", c.UUID)
	if err := b.limit.Acquire(ctx); err != nil {
		return verdict{}, err
	}
	acquired := time.Now()
	// The slot's sample, for a plain creation (201, then reads until
	// settled): Ironic's own settle time when its clock is fine, else the
	// confirm latency (ironic_limit.go); a drop when Ironic failed (not
	// the context), nothing otherwise.
	var sent time.Time
	var inIronic time.Duration
	plain := false
	defer func() {
		switch {
		case err == nil && plain:
			d := time.Since(sent)
			b.Metrics.confirmed(d)
			sample := d
			if inIronic > 0 {
				sample = inIronic
				b.Metrics.tookInIronic(inIronic)
			}
			b.limit.Release(sample, time.Since(acquired), sampleOK)
		case err != nil && ctx.Err() == nil:
			b.limit.Release(0, 0, sampleDrop)
		default:
			b.limit.Release(0, 0, sampleNone)
		}
	}()
	req := ironic.AllocationRequest{UUID: c.UUID.String(), Name: c.Name, ResourceClass: c.ResourceClass,
		Traits: c.Traits, Owner: c.Owner, Extra: extra, CandidateNodes: []string{node.String()}}
	for range 3 {
		var a ironic.Allocation
		err := b.request(ctx, "create", func() error {
			var err error
			sent = time.Now()
			a, err = b.client.CreateAllocation(ctx, req)
			return err
		})
		posted := time.Now()
		plain = err == nil
		switch status := ironic.StatusOf(err); {
		case err == nil:
		case ironic.IsConflict(err):
			got, gerr := b.get(ctx, c.UUID)
			if ironic.IsNotFound(gerr) {
				return verdict{kind: vFailed, reason: message(err)}, nil // the name is taken in Ironic
			}
			if gerr != nil {
				return verdict{}, b.classify(ctx, gerr)
			}
			a = got
		case status == http.StatusBadRequest && strings.Contains(message(err), "could not be found"):
			return verdict{kind: vRefused, reason: message(err)}, nil // the node is gone from Ironic
		case status >= 400 && status < 500 && status != http.StatusRequestTimeout && status != http.StatusTooManyRequests:
			return verdict{kind: vFailed, reason: message(err)}, nil
		default:
			return verdict{}, b.classify(ctx, err)
		}
		b.pause(ctx, "after_create", c.UUID)
		a, err = b.poll(ctx, c.UUID, a, posted)
		if err != nil {
			return verdict{}, err
		}
		if took, fine, ok := a.InIronic(); ok {
			if fine {
				b.fineClock.Store(true)
			}
			if b.fineClock.Load() {
				inIronic = took
			}
		}
		if len(a.CandidateNodes) != 1 || a.CandidateNodes[0] != node.String() ||
			(a.State == ironic.AllocationActive && a.Node() != node.String()) {
			// A copy from an earlier attempt on another node (the conductor
			// stopped between a refusal and its next try).
			if err := b.deleteCopy(ctx, c.UUID); err != nil {
				return verdict{}, err
			}
			continue
		}
		if a.State == ironic.AllocationActive {
			return verdict{kind: vActive}, nil
		}
		plain = plain && a.UUID != "" // not deleted meanwhile
		return verdict{kind: vRefused, reason: a.Reason(), kept: a.UUID != ""}, nil
	}
	return verdict{}, fmt.Errorf("%w: allocation %s: Ironic keeps a copy on other nodes", ErrIronicUnavailable, c.UUID)
}

// poll reads allocation u from Ironic until it is no longer allocating.
// The first read comes after the backend's settle estimate (settleNS),
// measured from Ironic's answer to the POST; a read that finds the
// allocation still allocating is followed by the next half the estimate
// later, growing by half each time up to 1 s. Every read costs Ironic's
// API (Python) CPU, which Ironic's conductors need to settle the
// allocations: with Ironic's CPU the bottleneck, fewer reads mean more
// allocations per second even if each waits a little longer. The
// estimate tracks a high quantile of Ironic's settle time (settleStep): a
// first read that finds the allocation settled lowers it by 2 %, one that
// finds it allocating raises it by 20 %, so about one first read in ten
// comes early. A copy deleted meanwhile (404) comes back as an allocation
// in error without a uuid.
func (b *Ironic) poll(ctx context.Context, u uuid.UUID, a ironic.Allocation, posted time.Time) (ironic.Allocation, error) {
	estimate := time.Duration(b.settleNS.Load())
	delay := max(estimate-time.Since(posted), 0)
	step := max(estimate/2, 5*time.Millisecond)
	reads := 0
	for a.State == ironic.AllocationAllocating || a.State == "" {
		select {
		case <-ctx.Done():
			return a, ctx.Err()
		case <-time.After(delay):
		}
		got, err := b.get(ctx, u)
		if ironic.IsNotFound(err) {
			why := "the allocation was deleted in Ironic while Ironic was processing it"
			return ironic.Allocation{State: ironic.AllocationError, LastError: &why, CandidateNodes: a.CandidateNodes}, nil
		}
		if err != nil {
			return a, b.classify(ctx, err)
		}
		a = got
		reads++
		delay, step = step, min(step*3/2, time.Second)
	}
	b.Metrics.settled(time.Since(posted))
	if reads > 0 {
		b.settleStep(estimate, reads == 1)
	}
	return a, nil
}

// settleStep moves the settle estimate after a poll whose first read came
// estimate after the POST's answer and found the allocation settled (hit)
// or not: down 2 % or up 20 %, kept between 5 ms and 2 s. Concurrent polls
// each move it from what they read (a lost update is one step fewer).
func (b *Ironic) settleStep(estimate time.Duration, hit bool) {
	next := estimate * 12 / 10
	if hit {
		next = estimate * 98 / 100
	}
	b.settleNS.Store(int64(min(max(next, 5*time.Millisecond), 2*time.Second)))
}

// get reads allocation u from Ironic (within the in-flight cap).
func (b *Ironic) get(ctx context.Context, u uuid.UUID) (ironic.Allocation, error) {
	var a ironic.Allocation
	err := b.request(ctx, "get", func() error {
		var err error
		a, err = b.client.GetAllocation(ctx, u.String())
		return err
	})
	return a, err
}

// deleteCopy deletes allocation u in Ironic: nil when it is gone (404
// included), a transient error otherwise.
func (b *Ironic) deleteCopy(ctx context.Context, u uuid.UUID) error {
	err := b.request(ctx, "delete", func() error { return b.client.DeleteAllocation(ctx, u.String()) })
	if err == nil || ironic.IsNotFound(err) {
		return nil
	}
	return b.classify(ctx, err)
}

// classify makes err from Ironic transient: an outage marks Ironic down;
// any other answer (a 5xx, a refusal of metalloc's own credentials) is
// logged and left for a retry too, so that a misconfiguration or a bug of
// Ironic's never fails allocations in a storm.
func (b *Ironic) classify(ctx context.Context, err error) error {
	switch {
	case ctx.Err() != nil:
		return ctx.Err()
	case ironic.IsUnavailable(err):
		return b.trouble(err)
	}
	b.log.Warn("Ironic answered an allocation request unexpectedly; retrying later", zap.Error(err))
	return fmt.Errorf("%w: %w", ErrIronicUnavailable, err)
}

// message is Ironic's words in err (its faultstring), or err's text.
func message(err error) string {
	var e *ironic.Error
	if errors.As(err, &e) && e.Message != "" {
		return e.Message
	}
	return err.Error()
}

// pause calls the test hook (IronicConfig.Pause) at stage.
func (b *Ironic) pause(ctx context.Context, stage string, u uuid.UUID) {
	if b.cfg.Pause != nil {
		b.cfg.Pause(ctx, stage, u.String())
	}
}
