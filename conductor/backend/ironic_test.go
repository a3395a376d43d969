package backend

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/metalloc/metalloc/db/dbtest"
	"github.com/metalloc/metalloc/devstack"
	"github.com/metalloc/metalloc/ironic"
)

// The Ironic backend's tests share one real Ironic (noauth, two
// conductors), each on nodes of a resource class of its own.
var (
	sharedOnce   sync.Once
	sharedIronic *devstack.Ironic
	sharedErr    error
	sharedDir    string
)

// sharedIronicFor returns the shared Ironic, started on first use.
func sharedIronicFor(t testing.TB) *devstack.Ironic {
	t.Helper()
	sharedOnce.Do(func() {
		sharedDir, sharedErr = os.MkdirTemp("", "metalloc-backend-ironic-")
		if sharedErr != nil {
			return
		}
		sharedIronic, sharedErr = devstack.StartIronic(context.Background(), devstack.IronicOptions{
			DatabaseURL: os.Getenv("DATABASE_URL"), Dir: sharedDir, Log: zap.NewNop(),
		})
	})
	require.NoError(t, sharedErr, "this test needs Ironic 21.4: apt-get install -y %s", devstack.IronicPackages)
	return sharedIronic
}

// stopSharedIronic stops the shared Ironic (TestMain).
func stopSharedIronic(failed bool) {
	if sharedIronic != nil {
		if failed {
			os.Stderr.WriteString("shared Ironic logs:\n" + sharedIronic.LogTail(40) + "\n")
		}
		sharedIronic.Stop()
	}
	if sharedDir != "" {
		_ = os.RemoveAll(sharedDir)
	}
}

// ironicFixture is a database mirroring nodes of the shared Ironic, a
// conductor and its Ironic backend.
type ironicFixture struct {
	*fixture
	ir     *devstack.Ironic
	client *ironic.Client
	mirror *ironic.Mirror
	b      *Ironic
	me     int64
	rc     string
}

func newIronicFixture(t *testing.T, cfg IronicConfig) *ironicFixture {
	t.Helper()
	ir := sharedIronicFor(t)
	f := setup(t)
	c, err := ironic.NewClient(ironic.Options{Endpoint: ir.URL, Timeout: time.Minute})
	require.NoError(t, err)
	log := zaptest.NewLogger(t)
	return &ironicFixture{fixture: f, ir: ir, client: c, mirror: ironic.NewMirror(c, f.pool, 0, log),
		b: NewIronic(f.pool, c, cfg, log), me: f.conductor("c-" + uuid.NewString()[:8]),
		rc: "rc-" + uuid.NewString()[:8]}
}

// nodes enrols n available nodes of the fixture's class in Ironic (named
// <prefix><k>) and mirrors them; their uuids.
func (x *ironicFixture) nodes(prefix string, n int) []string {
	x.t.Helper()
	ctx := context.Background()
	specs := make([]devstack.IronicNode, n)
	for k := range specs {
		specs[k] = devstack.IronicNode{Name: prefix + x.rc + "-" + string(rune('a'+k)), ResourceClass: x.rc}
	}
	uuids, err := x.ir.EnrollAvailable(ctx, specs, n)
	require.NoError(x.t, err)
	for _, u := range uuids {
		_, err := x.mirror.Refresh(ctx, u)
		require.NoError(x.t, err)
	}
	return uuids
}

// takeInIronic allocates node directly in Ironic (as another client of
// Ironic would), without telling the mirror; the allocation's uuid.
func (x *ironicFixture) takeInIronic(node string) string {
	x.t.Helper()
	ctx := context.Background()
	var a ironic.Allocation
	_, err := x.ir.Do(ctx, http.MethodPost, "/v1/allocations",
		map[string]any{"resource_class": x.rc, "candidate_nodes": []string{node}}, &a)
	require.NoError(x.t, err)
	dbtest.WaitFor(x.t, time.Minute, "Ironic's own allocation active", func() bool {
		got, err := x.client.GetAllocation(ctx, a.UUID)
		require.NoError(x.t, err)
		require.NotEqual(x.t, ironic.AllocationError, got.State, got.Reason())
		return got.State == ironic.AllocationActive
	})
	return a.UUID
}

// inIronic is allocation u as Ironic has it; found false on a 404.
func (x *ironicFixture) inIronic(u uuid.UUID) (a ironic.Allocation, found bool) {
	x.t.Helper()
	a, err := x.client.GetAllocation(context.Background(), u.String())
	if ironic.IsNotFound(err) {
		return a, false
	}
	require.NoError(x.t, err)
	return a, true
}

// journal is allocation u's journal row; found false when there is none.
func (x *ironicFixture) journal(u uuid.UUID) (j IronicJournalRow, found bool) {
	j, err := x.q.IronicJournal(context.Background(), u)
	if err != nil {
		return j, false
	}
	return j, true
}

// nodeOf is the uuid of the node allocation id holds in metalloc ("" none).
func (x *ironicFixture) nodeOf(id int64) string {
	var n *uuid.UUID
	require.NoError(x.t, x.pool.QueryRow(context.Background(),
		`SELECT n.uuid FROM allocations a LEFT JOIN nodes n ON n.id = a.node_id WHERE a.id = $1`, id).Scan(&n))
	if n == nil {
		return ""
	}
	return n.String()
}

// claimAndProcess claims up to 8 rows (Claim, which leaves every row for
// Process) and processes each with ctx, as the conductor's workers do; the
// outcomes, and the rows whose processing returned an error.
func (x *ironicFixture) claimAndProcess(ctx context.Context) (outs map[Outcome]int, failed []Claimed) {
	x.t.Helper()
	reserved, rest, err := x.b.Claim(ctx, x.me, 8)
	require.NoError(x.t, err)
	require.Empty(x.t, reserved, "the Ironic backend's claim reserves nothing itself")
	outs = map[Outcome]int{}
	for _, c := range rest {
		out, err := x.b.Process(ctx, x.me, &c)
		if err != nil {
			failed = append(failed, c)
			continue
		}
		outs[out]++
	}
	return outs, failed
}

// TestIronicClaimActivates: allocations claimed by the Ironic backend are
// created in Ironic with the same uuid on the node metalloc held, and are
// active in metalloc only once active in Ironic: both systems agree on
// every node, and the journal says active. Each creation held a slot of
// the adaptive limit from its POST to its settling (the confirm latency,
// one sample each), and gave it back.
func TestIronicClaimActivates(t *testing.T) {
	t.Parallel()
	x := newIronicFixture(t, IronicConfig{})
	reg := prometheus.NewRegistry()
	var err error
	x.b.Metrics, err = NewIronicMetrics(reg)
	require.NoError(t, err)
	x.nodes("ca-", 3)
	a1, a2 := x.allocation(nil, x.rc), x.allocation(nil, x.rc)
	outs, failed := x.claimAndProcess(context.Background())
	require.Empty(t, failed)
	require.Equal(t, map[Outcome]int{Reserved: 2}, outs)
	for _, a := range []int64{a1.ID, a2.ID} {
		v := x.get(a)
		require.Equal(t, "active", string(v.State))
		require.NotNil(t, v.NodeUUID)
		got, found := x.inIronic(v.Uuid)
		require.True(t, found)
		require.Equal(t, ironic.AllocationActive, got.State)
		require.Equal(t, v.NodeUUID.String(), got.Node())
		j, found := x.journal(v.Uuid)
		require.True(t, found)
		require.Equal(t, "active", j.State)
		require.Equal(t, int32(1), j.Attempts)
	}
	var m dto.Metric
	require.NoError(t, x.b.Metrics.confirm.Write(&m))
	require.Equal(t, uint64(2), m.GetHistogram().GetSampleCount(), "one confirm sample per allocation")
	// Ironic on PostgreSQL keeps microseconds: the limit's sample is
	// Ironic's own settle time, shorter than the confirm latency.
	require.True(t, x.b.fineClock.Load(), "Ironic's timestamps seen with fractions of a second")
	var in dto.Metric
	require.NoError(t, x.b.Metrics.inIronic.Write(&in))
	require.Equal(t, uint64(2), in.GetHistogram().GetSampleCount(), "one sample of Ironic's own time per allocation")
	require.Less(t, in.GetHistogram().GetSampleSum(), m.GetHistogram().GetSampleSum())
	got, _ := x.inIronic(a1.Uuid)
	took, fine, ok := got.InIronic()
	require.True(t, ok && fine, "%+v", got)
	require.Positive(t, took)
	require.Equal(t, 0.0, testutil.ToFloat64(x.b.Metrics.inFlight))
	require.Equal(t, 4.0, testutil.ToFloat64(x.b.Metrics.limit), "a quarter of max_in_flight (16) to start")
	require.Empty(t, dbtest.Broken(t, x.pool))
}

// TestIronicRefusedNodeTriesAnother: a node taken directly in Ironic (the
// mirror does not know yet) is refused by Ironic; metalloc reads it again
// from Ironic at once (the mirror then has Ironic's instance on it, no
// mark) and gets the other node, Ironic's refused copy gone. The
// name-first rule makes metalloc try the taken node first.
func TestIronicRefusedNodeTriesAnother(t *testing.T) {
	t.Parallel()
	x := newIronicFixture(t, IronicConfig{})
	nodes := x.nodes("rf-", 2)
	taker := x.takeInIronic(nodes[0])
	name := "rf-" + x.rc + "-a"
	a := x.allocation(&name, x.rc)
	outs, failed := x.claimAndProcess(context.Background())
	require.Empty(t, failed)
	require.Equal(t, map[Outcome]int{Reserved: 1}, outs)
	v := x.get(a.ID)
	require.Equal(t, "active", string(v.State))
	require.Equal(t, nodes[1], v.NodeUUID.String())
	got, found := x.inIronic(v.Uuid)
	require.True(t, found)
	require.Equal(t, nodes[1], got.Node())
	j, _ := x.journal(v.Uuid)
	require.Equal(t, int32(2), j.Attempts)
	var maint bool
	var instance *uuid.UUID
	require.NoError(t, x.pool.QueryRow(context.Background(),
		`SELECT maintenance, instance_uuid FROM nodes WHERE uuid = $1`, nodes[0]).Scan(&maint, &instance))
	require.False(t, maint, "read again from Ironic: Ironic's word, not metalloc's mark")
	require.NotNil(t, instance)
	require.Equal(t, taker, instance.String())
}

// TestIronicRefusedEverywhere: when Ironic refuses every node metalloc
// can offer, each refused node is read again from Ironic at once (the
// mirror then shows it taken there, not in maintenance), and once no node
// fits the allocation ends in error with why (each node counted), nothing
// of it left in Ironic. Past AllocationTimeout, with nodes left untried,
// it ends in error with Ironic's reason and Ironic keeps its copy in
// error too (journal error).
func TestIronicRefusedEverywhere(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	x := newIronicFixture(t, IronicConfig{})
	nodes := x.nodes("re-", 3)
	for _, n := range nodes {
		x.takeInIronic(n)
	}
	a := x.allocation(nil, x.rc)
	outs, failed := x.claimAndProcess(ctx)
	require.Empty(t, failed)
	require.Equal(t, map[Outcome]int{Failed: 1}, outs)
	v := x.get(a.ID)
	require.Equal(t, "error", string(v.State))
	require.Contains(t, *v.LastError, "Failed to process allocation "+v.Uuid.String())
	require.Contains(t, *v.LastError, "Ironic refused the 3 nodes metalloc tried, and no available nodes match the resource class "+
		x.rc+" (no node fits: 3 of resource class "+x.rc+", 0 available; not available: 3 hold an allocation or instance)")
	_, found := x.inIronic(v.Uuid)
	require.False(t, found)
	_, found = x.journal(v.Uuid)
	require.False(t, found)
	require.Equal(t, 3, dbtest.Count(t, x.pool, `SELECT count(*) FROM nodes
		WHERE resource_class = $1 AND instance_uuid IS NOT NULL AND NOT maintenance AND allocation_id IS NULL`, x.rc),
		"the refused nodes read again: taken in Ironic, no mark")

	// The time bound passed at the first refusal, other nodes fitting.
	y := newIronicFixture(t, IronicConfig{AllocationTimeout: time.Nanosecond})
	for _, n := range y.nodes("re1-", 2) {
		y.takeInIronic(n)
	}
	b := y.allocation(nil, y.rc)
	outs, failed = y.claimAndProcess(ctx)
	require.Empty(t, failed)
	require.Equal(t, map[Outcome]int{Failed: 1}, outs)
	w := y.get(b.ID)
	require.Equal(t, "error", string(w.State))
	require.Contains(t, *w.LastError, "Ironic refused the 1 nodes metalloc tried, the last ")
	require.Contains(t, *w.LastError, "other nodes may fit, but ")
	require.Contains(t, *w.LastError, "(ironic.allocation_timeout 1ns)")
	got, found := y.inIronic(w.Uuid)
	require.True(t, found)
	require.Equal(t, ironic.AllocationError, got.State)
	j, _ := y.journal(w.Uuid)
	require.Equal(t, "error", j.State)
	require.Equal(t, 1, dbtest.Count(t, y.pool, `SELECT count(*) FROM nodes
		WHERE resource_class = $1 AND instance_uuid IS NOT NULL AND NOT maintenance`, y.rc),
		"the refused node read again")
	require.Empty(t, dbtest.Broken(t, y.pool))
}

// TestIronicRefusalsKeepTrying (issue 40): other clients of Ironic took
// five of six nodes directly there, the mirror not knowing; the one free
// node is locked (its pick skipped) until metalloc has tried the five.
// Five refusals for one allocation, more than the three nodes the old
// ironic.max_attempts allowed: the allocation ends active on the free
// node, and each refused node was read again from Ironic (taken there,
// not marked).
func TestIronicRefusalsKeepTrying(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	x := newIronicFixture(t, IronicConfig{LockedWait: 2 * time.Minute})
	nodes := x.nodes("kt-", 6)
	free := nodes[5]
	for _, n := range nodes[:5] {
		x.takeInIronic(n)
	}
	tx, err := x.pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	_, err = tx.Exec(ctx, `SELECT 1 FROM nodes WHERE uuid = $1 FOR UPDATE`, free)
	require.NoError(t, err)
	released := make(chan error, 1)
	go func() {
		// Released once the five taken nodes were refused and read again.
		deadline := time.Now().Add(2 * time.Minute)
		for time.Now().Before(deadline) {
			var n int
			if err := x.pool.QueryRow(ctx, `SELECT count(*) FROM nodes WHERE resource_class = $1
				AND instance_uuid IS NOT NULL AND NOT maintenance AND allocation_id IS NULL`, x.rc).Scan(&n); err != nil {
				released <- err
				return
			}
			if n == 5 {
				released <- tx.Commit(ctx)
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
		released <- errors.New("the five taken nodes were not all refused and read again")
	}()
	a := x.allocation(nil, x.rc)
	outs, failed := x.claimAndProcess(ctx)
	require.NoError(t, <-released)
	require.Empty(t, failed)
	require.Equal(t, map[Outcome]int{Reserved: 1}, outs, "last_error: %v", x.get(a.ID).LastError)
	v := x.get(a.ID)
	require.Equal(t, "active", string(v.State))
	require.Equal(t, free, v.NodeUUID.String())
	got, found := x.inIronic(v.Uuid)
	require.True(t, found)
	require.Equal(t, free, got.Node())
	j, _ := x.journal(v.Uuid)
	require.Equal(t, int32(6), j.Attempts)
	require.Empty(t, dbtest.Broken(t, x.pool))
}

// TestIronicDeletionReachesIronic: an allocation deleted in metalloc (any
// path: here the one deallocation, metalloc_deallocate) is deleted in
// Ironic by the conductors' deleter (Run), and its journal row stays as a
// tombstone; a copy Ironic gets again afterwards (a late request) is
// deleted again after a full listing (Reconcile).
func TestIronicDeletionReachesIronic(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	x := newIronicFixture(t, IronicConfig{})
	x.nodes("dl-", 1)
	a := x.allocation(nil, x.rc)
	outs, _ := x.claimAndProcess(ctx)
	require.Equal(t, map[Outcome]int{Reserved: 1}, outs)
	v := x.get(a.ID)

	runCtx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); x.b.Run(runCtx) }()
	defer func() { stop(); <-done }()

	_, err := x.pool.Exec(ctx, `SELECT metalloc_deallocate($1)`, a.ID)
	require.NoError(t, err)
	dbtest.WaitFor(t, time.Minute, "the copy deleted in Ironic", func() bool {
		_, found := x.inIronic(v.Uuid)
		j, _ := x.journal(v.Uuid)
		return !found && j.State == "deleted"
	})

	// A late POST recreates the copy: the next listing finds it against
	// the tombstone, and the deleter deletes it again.
	_, err = x.client.CreateAllocation(ctx, ironic.AllocationRequest{UUID: v.Uuid.String(), ResourceClass: x.rc,
		CandidateNodes: []string{v.NodeUUID.String()}})
	require.NoError(t, err)
	var at time.Time
	require.NoError(t, x.pool.QueryRow(ctx, `SELECT clock_timestamp()`).Scan(&at))
	all, err := x.client.ListAllocations(ctx, 1000)
	require.NoError(t, err)
	require.NoError(t, x.b.Reconcile(ctx, all, at))
	dbtest.WaitFor(t, time.Minute, "the late copy deleted again", func() bool {
		_, found := x.inIronic(v.Uuid)
		j, _ := x.journal(v.Uuid)
		return !found && j.State == "deleted"
	})
}

// TestIronicResumeBetweenWrites: a conductor that stops between its two
// writes (held and journaled, before or after its POST reached Ironic)
// leaves the allocation allocating on its node; the conductor that takes
// it over settles it on the same node (Ironic's 409 tells it the copy is
// there) and both systems agree.
func TestIronicResumeBetweenWrites(t *testing.T) {
	t.Parallel()
	for _, stage := range []string{"before_create", "after_create"} {
		t.Run(stage, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			crashCtx, crash := context.WithCancel(ctx)
			x := newIronicFixture(t, IronicConfig{Pause: func(_ context.Context, s, _ string) {
				if s == stage {
					crash()
				}
			}})
			x.nodes("rs-", 2)
			a := x.allocation(nil, x.rc)
			outs, rest := x.claimAndProcess(crashCtx)
			require.Empty(t, outs)
			require.Len(t, rest, 1)
			v := x.get(a.ID)
			require.Equal(t, "allocating", string(v.State))
			held := x.nodeOf(a.ID)
			require.NotEmpty(t, held)

			other := x.conductor("c2-" + uuid.NewString()[:8])
			_, err := x.pool.Exec(ctx, `UPDATE allocations SET conductor_affinity = $1 WHERE id = $2`, other, a.ID)
			require.NoError(t, err)
			b2 := NewIronic(x.pool, x.client, IronicConfig{}, zaptest.NewLogger(t))
			out, err := b2.Process(ctx, other, &rest[0])
			require.NoError(t, err)
			require.Equal(t, Reserved, out)
			v = x.get(a.ID)
			require.Equal(t, "active", string(v.State))
			require.Equal(t, held, v.NodeUUID.String())
			got, found := x.inIronic(v.Uuid)
			require.True(t, found)
			require.Equal(t, held, got.Node())
			require.Equal(t, ironic.AllocationActive, got.State)
		})
	}
}

// TestIronicReconcileNodeGone: an allocation active in both that is
// deleted directly in Ironic leaves metalloc too once the mirror reads
// its node again (metalloc_ironic_reconcile_nodes).
func TestIronicReconcileNodeGone(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	x := newIronicFixture(t, IronicConfig{})
	x.nodes("rn-", 1)
	a := x.allocation(nil, x.rc)
	outs, _ := x.claimAndProcess(ctx)
	require.Equal(t, map[Outcome]int{Reserved: 1}, outs)
	v := x.get(a.ID)
	require.NoError(t, x.client.DeleteAllocation(ctx, v.Uuid.String()))
	_, err := x.mirror.Refresh(ctx, v.NodeUUID.String())
	require.NoError(t, err)
	require.Equal(t, 0, dbtest.Count(t, x.pool, `SELECT count(*) FROM allocations WHERE id = $1`, a.ID))
	free := dbtest.Count(t, x.pool, `SELECT count(*) FROM free_nodes WHERE uuid = $1`, *v.NodeUUID)
	require.Equal(t, 1, free)
}

// TestIronicGroup: an allocation group in front of Ironic is active with
// its members each active in Ironic on its node, all placed or none; a
// node Ironic refuses (taken there directly) is avoided by placing the
// group again.
func TestIronicGroup(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	x := newIronicFixture(t, IronicConfig{})
	nodes := x.nodes("gr-", 3)
	x.takeInIronic(nodes[0])
	var gid int64
	gu := uuid.New()
	require.NoError(t, x.pool.QueryRow(ctx, `INSERT INTO allocation_groups (uuid, count, resource_class, conductor_affinity)
		VALUES ($1, 2, $2, $3) RETURNING id`, gu, x.rc, x.me).Scan(&gid))
	gs, err := ReadGroups(ctx, x.pool, x.me, []int64{gid})
	require.NoError(t, err)
	require.Len(t, gs, 1)
	var out Outcome
	for attempt := 0; attempt < 3; attempt++ { // the first placement may pick the taken node
		out, err = x.b.Groups().Process(ctx, x.me, gs[0])
		if !errors.Is(err, errGroupChanged) {
			break
		}
	}
	require.NoError(t, err)
	require.Equal(t, Reserved, out)
	rows, err := x.pool.Query(ctx, `SELECT a.uuid, a.state, n.uuid FROM allocations a JOIN nodes n ON n.id = a.node_id
		WHERE a.group_id = $1`, gid)
	require.NoError(t, err)
	members := 0
	for rows.Next() {
		var u uuid.UUID
		var state, node string
		require.NoError(t, rows.Scan(&u, &state, &node))
		require.Equal(t, "active", state)
		require.NotEqual(t, nodes[0], node)
		got, found := x.inIronic(u)
		require.True(t, found)
		require.Equal(t, ironic.AllocationActive, got.State)
		require.Equal(t, node, got.Node())
		members++
	}
	require.NoError(t, rows.Err())
	require.Equal(t, 2, members)
	require.Equal(t, 1, dbtest.Count(t, x.pool, `SELECT count(*) FROM allocation_groups WHERE id = $1 AND state = 'active'`, gid))
	require.Empty(t, dbtest.Broken(t, x.pool))
}

// TestIronicClaimCapacity: a conductor claims no more rows than it can
// settle at once (Capacity); the rest wait, unowned, for it or another
// conductor. Claim itself sends nothing to Ironic (here: none runs) and
// holds a node for each row it takes, without activating it.
func TestIronicClaimCapacity(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := setup(t)
	c, err := ironic.NewClient(ironic.Options{Endpoint: "http://127.0.0.1:1", Timeout: time.Second})
	require.NoError(t, err)
	b := NewIronic(f.pool, c, IronicConfig{Capacity: 2}, zaptest.NewLogger(t))
	me := f.conductor("cap")
	for k := range 4 {
		f.node(fmt.Sprintf("cap-%d", k), "cap")
		f.allocation(nil, "cap")
	}
	reserved, rest, err := b.Claim(ctx, me, 8)
	require.NoError(t, err)
	require.Empty(t, reserved)
	require.Len(t, rest, 2)
	require.Equal(t, 2, dbtest.Count(t, f.pool, `SELECT count(*) FROM allocations
		WHERE conductor_affinity = $1 AND state = 'allocating' AND node_id IS NOT NULL`, me))
	require.Equal(t, 2, dbtest.Count(t, f.pool, `SELECT count(*) FROM ironic_allocations WHERE state = 'creating'`))
	_, rest2, err := b.Claim(ctx, me, 8)
	require.NoError(t, err)
	require.Empty(t, rest2, "at capacity")
	b.claimed.Delete(rest[0].ID) // as Process does when it ends
	b.pending.Add(-1)
	_, rest2, err = b.Claim(ctx, me, 8)
	require.NoError(t, err)
	require.Len(t, rest2, 1)
}
