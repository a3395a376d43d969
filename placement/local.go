package placement

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"net/http"
	"net/url"
	"sort"
	"strings"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/metalloc/metalloc/placement/candidate"
	"github.com/metalloc/metalloc/placement/client"
	"github.com/metalloc/metalloc/web"
)

// The in-process face of metalloc-placement, for a conductor on the same
// database (placement_backend.mode local): the candidate search and the
// allocation writes of the HTTP handlers, called without HTTP, the writes
// inside the caller's transaction so that a Placement claim and the node
// reservation commit together. Semantics are the HTTP API's at
// client.Microversion: provider generations are bumped by every
// allocation write, a new consumer is created at generation 1, capacity
// is (total - reserved) * allocation_ratio with min_unit, max_unit and
// step_size checked.

// IdentityHeader is the response header of metalloc-placement's version
// document ("/") naming its database (DatabaseIdentity). A conductor in
// placement_backend.mode auto compares it with its own database's to
// decide whether it may claim in-process. OpenStack Placement does not
// send it.
const IdentityHeader = "X-Metalloc-Database-Identity"

// identitySQL is what DatabaseIdentity hashes: the cluster's system
// identifier (distinct for every initdb, kept by physical standbys) and
// the database's oid (distinct per database of a cluster).
const identitySQL = `SELECT (SELECT system_identifier FROM pg_control_system())::text || ':' ||
       (SELECT oid FROM pg_database WHERE datname = current_database())::text`

// DatabaseIdentity is the identity of the database q is connected to: the
// hex SHA-256 of its cluster's system identifier and its oid, the same for
// every connection to that database and different for any other database
// (a restored copy included). It says nothing an attacker can use.
func DatabaseIdentity(ctx context.Context, q DBTX) (string, error) {
	var s string
	if err := q.QueryRow(ctx, identitySQL).Scan(&s); err != nil {
		return "", err
	}
	sum := sha256.Sum256([]byte("metalloc-placement:" + s))
	return hex.EncodeToString(sum[:16]), nil
}

// Local runs Placement's allocation-candidate search in-process on pool
// (the placement schema of the conductor's own database). Safe for
// concurrent use.
type Local struct {
	finder *candidate.Finder
}

// NewLocal returns a Local on pool. Its candidates are always a random
// sample, as metalloc-placement's with randomize_allocation_candidates
// (racing conductors spread over the nodes instead of all trying the
// first ones), and not bounded by max_allocation_candidates: the
// conductor's own requests are limited, but for a group's, which reads
// every free node of the class.
func NewLocal(pool *pgxpool.Pool) *Local {
	f := candidate.NewFinder(pool, func() bool { return true })
	f.SetMax(0)
	return &Local{finder: f}
}

// localVersion is the microversion Local answers at (the conductor's).
var localVersion = web.Version{Major: 1, Minor: 39}

// AllocationCandidates answers as GET /allocation_candidates?q at
// client.Microversion would, allocation requests only (no provider
// summaries). A refused request (an unknown class or trait, a malformed
// query) is a *client.Error with the HTTP status, code and detail the API
// would answer, so that callers treat both the same.
func (l *Local) AllocationCandidates(ctx context.Context, q url.Values) (*client.Candidates, error) {
	req, err := parseCandRequest(q.Encode(), localVersion)
	if err != nil {
		return nil, localErr(http.MethodGet, "/allocation_candidates", err)
	}
	res, err := l.finder.Find(ctx, req, localVersion)
	if err != nil {
		return nil, localErr(http.MethodGet, "/allocation_candidates", err)
	}
	out := &client.Candidates{}
	for _, ar := range res.Requests() {
		cr := client.AllocationRequest{Allocations: make(map[uuid.UUID]client.ProviderResources, len(ar.Allocations)),
			Mappings: ar.Mappings}
		for p, res := range ar.Allocations {
			cr.Allocations[p] = client.ProviderResources{Resources: res}
		}
		out.AllocationRequests = append(out.AllocationRequests, cr)
	}
	return out, nil
}

// localErr turns a Placement error answer into the *client.Error the HTTP
// client would return; other errors (the database's) stay as they are.
func localErr(method, path string, err error) error {
	var pe *web.PlacementError
	if errors.As(err, &pe) {
		code := pe.Code
		if code == "" {
			code = web.PlacementCodeDefault
		}
		return &client.Error{Method: method, Path: path, Status: pe.Status, Code: code, Detail: pe.Detail}
	}
	return err
}

// LocalClaim is one consumer's allocations to write in-process: Placement's
// PUT /allocations/{Consumer} body at client.Microversion.
type LocalClaim struct {
	Consumer     uuid.UUID
	ProjectID    string
	UserID       string
	ConsumerType string
	// Request is the allocation request to claim (one of
	// AllocationCandidates' answers).
	Request client.AllocationRequest
	// Options, when set (QueueConsumers only), are alternative requests
	// in place of Request: the caller picks one with PendingClaims.Choose
	// before QueueProviders.
	Options []client.AllocationRequest
}

// toClaim is c as the handlers' claim.
func (c LocalClaim) toClaim() claim {
	return c.claimOf(c.Request)
}

// claimOf is c claiming req, as the handlers' claim.
func (c LocalClaim) claimOf(req client.AllocationRequest) claim {
	cl := claim{consumer: c.Consumer, projectID: c.ProjectID, userID: c.UserID}
	if c.ConsumerType != "" {
		ct := c.ConsumerType
		cl.consumerType = &ct
	}
	for p, pr := range req.Allocations {
		for class, n := range pr.Resources {
			cl.resources = append(cl.resources, claimResource{provider: p, class: class, used: n})
		}
	}
	sort.Slice(cl.resources, func(i, j int) bool {
		a, b := cl.resources[i], cl.resources[j]
		if a.provider != b.provider {
			return strings.Compare(a.provider.String(), b.provider.String()) < 0
		}
		return a.class < b.class
	})
	return cl
}

// ClaimTx writes c in tx as PUT /allocations/{consumer} without a
// consumer generation check would: a new consumer is created, an existing
// one (a run an outage interrupted) has its allocations replaced under its
// row lock, which is what re-reading its generation and retrying amounts
// to. A capacity or constraint violation is a *client.Error 409, an
// unknown provider or class a *client.Error 400, as the API answers them;
// the caller then rolls tx back.
func ClaimTx(ctx context.Context, tx pgx.Tx, c LocalClaim) error {
	path := "/allocations/" + c.Consumer.String()
	err := writeAllocationsTx(ctx, New(tx), web.Version{Major: 1, Minor: 27}, []claim{c.toClaim()},
		func(s string) string { return s }, claimHooks{})
	return localErr(http.MethodPut, path, err)
}

// ClaimManyTx writes every claim of cs in tx at once, as one POST
// /allocations naming them all would (new consumers; an existing one has
// its allocations replaced, as ClaimTx): all of them or none, with the
// errors of ClaimTx (a 409 when any provider lacks the capacity). The
// placement backend claims an allocation group's members with it.
func ClaimManyTx(ctx context.Context, tx pgx.Tx, cs []LocalClaim) error {
	claims := make([]claim, len(cs))
	for i, c := range cs {
		claims[i] = c.toClaim()
	}
	err := writeAllocationsTx(ctx, New(tx), web.Version{Major: 1, Minor: 27}, claims,
		func(s string) string { return s }, claimHooks{})
	return localErr(http.MethodPost, "/allocations", err)
}

// UnclaimTx removes consumer's allocations in tx (the consumer goes with
// them), as DELETE /allocations/{consumer}; none is not an error.
func UnclaimTx(ctx context.Context, tx pgx.Tx, consumer uuid.UUID) error {
	q := New(tx)
	cons, err := q.LockConsumer(ctx, consumer)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil
	}
	if err != nil {
		return err
	}
	return writeAllocationsTx(ctx, q, web.Version{Major: 1, Minor: 27},
		[]claim{{consumer: consumer, projectID: cons.ProjectID, userID: cons.UserID, consumerType: cons.ConsumerType}},
		func(s string) string { return s }, claimHooks{})
}

// ErrClaimRefused is a batch claim Placement would answer with a 409 (the
// provider's capacity is used by a concurrent claim, an inventory
// constraint, an unknown provider or inventory) or that needs the general
// path (the consumer exists).
var ErrClaimRefused = errors.New("placement: claim refused")

// PendingClaims is a batch of claims of new consumers being written
// through pipelines on the caller's transaction (QueueConsumers,
// optionally Choose, QueueProviders, then Check, then QueueWrite), as the
// pipelined claim of PUT and POST /allocations does it.
type PendingClaims struct {
	claims    []claim
	order     []int // claims index -> caller's index
	consumers []PlacementConsumer
	created   []bool
	byUUID    map[uuid.UUID]int64
	invs      []ClaimInventoriesRow
	ok        []bool
	// want lists the named providers, each once.
	want []uuid.UUID
	// opts are each claim's options (LocalClaim.Options), nil when none.
	opts [][]claim
	// none marks the claims Choose gave no option.
	none []bool
}

// Choose makes the claim at the caller's index i claim its option opt
// (an index into LocalClaim.Options), or none (opt < 0: Check refuses it,
// QueueWrite deletes its new consumer). Call it before QueueProviders.
func (p *PendingClaims) Choose(i, opt int) {
	for k, o := range p.order {
		if o != i {
			continue
		}
		if p.none == nil {
			p.none = make([]bool, len(p.claims))
		}
		p.none[k] = opt < 0
		if opt >= 0 && p.opts != nil && opt < len(p.opts[k]) {
			p.claims[k] = p.opts[k][opt]
		}
		return
	}
}

// complete reports whether every consumer was created and every named
// provider found.
func (p *PendingClaims) complete() bool {
	if len(p.byUUID) < len(p.want) {
		return false
	}
	for _, c := range p.created {
		if !c {
			return false
		}
	}
	return true
}

// QueueConsumers queues in b the first step of writing claims (each a new
// consumer with allocations): the consumers' inserts. Then Choose among
// the options (if any), QueueProviders, and after running them Check.
func QueueConsumers(b *pgx.Batch, claims []LocalClaim) *PendingClaims {
	// Consumers are inserted in uuid order, as the handlers do.
	order := make([]int, len(claims))
	for i := range order {
		order[i] = i
	}
	sort.Slice(order, func(i, j int) bool {
		return bytes.Compare(claims[order[i]].Consumer[:], claims[order[j]].Consumer[:]) < 0
	})
	cls := make([]claim, len(claims))
	var opts [][]claim
	for i, k := range order {
		cls[i] = claims[k].toClaim()
		if len(claims[k].Options) > 0 {
			if opts == nil {
				opts = make([][]claim, len(claims))
			}
			for _, o := range claims[k].Options {
				opts[i] = append(opts[i], claims[k].claimOf(o))
			}
			cls[i] = opts[i][0]
		}
	}
	return queueConsumers(b, cls, order, opts)
}

// queueClaims queues the consumers, providers and inventories of the
// handlers' claims in one pipeline; order maps them to the caller's
// indexes.
func queueClaims(b *pgx.Batch, claims []claim, order []int, opts [][]claim) *PendingClaims {
	p := queueConsumers(b, claims, order, opts)
	p.QueueProviders(b)
	return p
}

// queueConsumers queues the consumers' inserts of claims.
func queueConsumers(b *pgx.Batch, claims []claim, order []int, opts [][]claim) *PendingClaims {
	p := &PendingClaims{claims: claims, order: order, opts: opts, byUUID: map[uuid.UUID]int64{}}
	p.consumers = make([]PlacementConsumer, len(p.claims))
	p.created = make([]bool, len(p.claims))
	for i, cl := range p.claims {
		b.Queue(insertConsumer, cl.consumer, cl.projectID, cl.userID, cl.consumerType).Query(func(rows pgx.Rows) error {
			for rows.Next() {
				c := &p.consumers[i]
				p.created[i] = true
				if err := rows.Scan(&c.ID, &c.Uuid, &c.ProjectID, &c.UserID, &c.ConsumerType, &c.Generation,
					&c.CreatedAt, &c.UpdatedAt); err != nil {
					return err
				}
			}
			return rows.Err()
		})
	}
	return p
}

// QueueProviders queues in b the lock of the providers the claims name
// (in id order, one statement; after Choose, only the chosen options',
// none for a claim given none) and the read of their inventories with
// current usage. Run b, then call Check.
func (p *PendingClaims) QueueProviders(b *pgx.Batch) {
	seen := map[uuid.UUID]bool{}
	p.want = p.want[:0]
	for i, cl := range p.claims {
		if p.none != nil && p.none[i] {
			continue
		}
		for _, r := range cl.resources {
			if !seen[r.provider] {
				seen[r.provider] = true
				p.want = append(p.want, r.provider)
			}
		}
	}
	// One provider (the usual claim): the scalar statements, which keep
	// a generic plan (query.sql).
	lockSQL, invSQL, provs := lockProvidersByUUID, claimInventories, any(p.want)
	if len(p.want) == 1 {
		lockSQL, invSQL, provs = lockProviderByUUID, claimInventoriesOne, p.want[0]
	}
	b.Queue(lockSQL, provs).Query(func(rows pgx.Rows) error {
		for rows.Next() {
			var r LockClaimProvidersRow
			if err := rows.Scan(&r.ID, &r.Uuid, &r.Generation); err != nil {
				return err
			}
			p.byUUID[r.Uuid] = r.ID
		}
		return rows.Err()
	})
	b.Queue(invSQL, provs, claimClasses(p.claims)).Query(func(rows pgx.Rows) error {
		for rows.Next() {
			var r ClaimInventoriesRow
			if err := rows.Scan(&r.ResourceProviderID, &r.ResourceClassID, &r.ResourceClass, &r.Total, &r.Reserved,
				&r.MinUnit, &r.MaxUnit, &r.StepSize, &r.AllocationRatio, &r.Used); err != nil {
				return err
			}
			p.invs = append(p.invs, r)
		}
		return rows.Err()
	})
}

// Check evaluates each claim, in the caller's order, against the locked
// providers' inventories and usage (counting the claims before it that
// passed): nil when it can be written, ErrClaimRefused otherwise (the
// consumer already existed, a provider or inventory is missing, capacity
// or a constraint would be violated). Only the claims whose check the
// caller accepts are written by QueueWrite.
func (p *PendingClaims) Check() []error {
	out := make([]error, len(p.claims))
	p.ok = make([]bool, len(p.claims))
	used := map[invKey]int64{}
	for i, cl := range p.claims {
		if !p.created[i] || (p.none != nil && p.none[i]) {
			out[p.order[i]] = ErrClaimRefused
			continue
		}
		rows := make([]ClaimInventoriesRow, len(p.invs))
		copy(rows, p.invs)
		for j := range rows {
			rows[j].Used += used[invKey{rows[j].ResourceProviderID, rows[j].ResourceClass}]
		}
		known := true
		for _, r := range cl.resources {
			if _, ok := p.byUUID[r.provider]; !ok {
				known = false
			}
		}
		if !known {
			out[p.order[i]] = ErrClaimRefused
			continue
		}
		_, missing, err := evalClaims([]claim{cl}, p.consumers[i:i+1], p.byUUID, rows)
		if missing != nil || err != nil {
			out[p.order[i]] = ErrClaimRefused
			continue
		}
		p.ok[i] = true
		for _, r := range cl.resources {
			used[invKey{p.byUUID[r.provider], r.class}] += r.used
		}
	}
	return out
}

// QueueWrite queues in b the second half: the allocations of the claims
// keep (by the caller's index) says to write, among those Check passed,
// with the generation bump of their providers; the consumers created for
// the others are deleted again.
func (p *PendingClaims) QueueWrite(b *pgx.Batch, keep []bool) {
	var kept []claim
	var cons []PlacementConsumer
	var bump []int64
	for i, cl := range p.claims {
		if p.ok[i] && keep[p.order[i]] {
			kept = append(kept, cl)
			cons = append(cons, p.consumers[i])
			for _, r := range cl.resources {
				if id := p.byUUID[r.provider]; !contains64(bump, id) {
					bump = append(bump, id)
				}
			}
		} else if p.created[i] {
			b.Queue(deleteConsumer, p.consumers[i].ID)
		}
	}
	if len(kept) == 0 {
		return
	}
	classID := make(map[invKey]int32, len(p.invs))
	for _, r := range p.invs {
		classID[invKey{r.ResourceProviderID, r.ResourceClass}] = r.ResourceClassID
	}
	var ins InsertAllocationsBumpParams
	for i, cl := range kept {
		for _, r := range cl.resources {
			key := invKey{p.byUUID[r.provider], r.class}
			ins.ProviderIds = append(ins.ProviderIds, key.provider)
			ins.ConsumerIds = append(ins.ConsumerIds, cons[i].ID)
			ins.ClassIds = append(ins.ClassIds, classID[key])
			ins.Used = append(ins.Used, r.used)
		}
	}
	sort.Slice(bump, func(i, j int) bool { return bump[i] < bump[j] })
	queueInsertAllocations(b, bump, ins)
}

// queueInsertAllocations queues the insert of the allocation rows of ins
// and the generation bump of the providers bump (in id order): with
// InsertAllocationsBumpOne, which keeps a generic plan, when there is one.
func queueInsertAllocations(b *pgx.Batch, bump []int64, ins InsertAllocationsBumpParams) {
	if len(bump) == 1 {
		b.Queue(insertAllocationsBumpOne, bump[0], ins.ProviderIds, ins.ConsumerIds, ins.ClassIds, ins.Used)
		return
	}
	b.Queue(insertAllocationsBump, bump, ins.ProviderIds, ins.ConsumerIds, ins.ClassIds, ins.Used)
}

// contains64 tells whether list holds x.
func contains64(list []int64, x int64) bool {
	for _, v := range list {
		if v == x {
			return true
		}
	}
	return false
}
