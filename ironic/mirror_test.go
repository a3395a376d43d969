package ironic

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"

	"github.com/metalloc/metalloc/db/dbtest"
	"github.com/metalloc/metalloc/devstack"
)

// mirrored is a node as the mirror left it in metalloc's tables.
type mirrored struct {
	Name, ResourceClass, Owner, Lessee, MaintenanceReason *string
	ProvisionState                                        string
	PowerState                                            *string
	Maintenance, Free                                     bool
	InstanceUUID, IronicInstance, IronicAllocation        *uuid.UUID
	ConductorGroup                                        string
	Properties, Extra                                     map[string]any
	Traits                                                []string
}

// node reads node u from the mirror; ok is false when it is not there.
func node(t *testing.T, pool *pgxpool.Pool, u string) (n mirrored, ok bool) {
	t.Helper()
	err := pool.QueryRow(context.Background(), `
		SELECT n.name, n.resource_class, n.owner, n.lessee, n.maintenance_reason, n.provision_state,
		       n.power_state, n.maintenance,
		       metalloc_node_free(n.provision_state, n.maintenance, n.power_state, n.instance_uuid, n.allocation_id),
		       n.instance_uuid, m.instance_uuid, m.allocation_uuid, n.conductor_group, n.properties, n.extra,
		       coalesce((SELECT array_agg(t.trait ORDER BY t.trait) FROM node_traits t WHERE t.node_id = n.id), '{}')
		  FROM nodes n LEFT JOIN ironic_nodes m ON m.node_id = n.id WHERE n.uuid = $1`, u).Scan(
		&n.Name, &n.ResourceClass, &n.Owner, &n.Lessee, &n.MaintenanceReason, &n.ProvisionState,
		&n.PowerState, &n.Maintenance, &n.Free, &n.InstanceUUID, &n.IronicInstance, &n.IronicAllocation,
		&n.ConductorGroup, &n.Properties, &n.Extra, &n.Traits)
	if errors.Is(err, pgx.ErrNoRows) {
		return n, false
	}
	require.NoError(t, err)
	return n, true
}

// newMirror returns a mirror of ir into a fresh database, and the
// conductor id holding the sync lease there.
func newMirror(t *testing.T, ir *devstack.Ironic, pageSize int) (*Mirror, *pgxpool.Pool, int64) {
	t.Helper()
	pool := dbtest.New(t)
	c, err := NewClient(Options{Endpoint: ir.URL, Timeout: time.Minute})
	require.NoError(t, err)
	m := NewMirror(c, pool, pageSize, zaptest.NewLogger(t))
	me := dbtest.Conductor(t, pool, "conductor-"+uuid.NewString()[:8], 0, true)
	_, err = m.q.AcquireLease(context.Background(), AcquireLeaseParams{Me: me, TtlSeconds: 3600})
	require.NoError(t, err)
	return m, pool, me
}

// TestFullSync mirrors nodes made in Ironic, then changes made directly in
// Ironic (maintenance, an instance, a deletion, a rename that swaps two
// names, traits, owner and lessee, an allocation): after the next full sync the mirror
// says what Ironic says, and the nodes in maintenance, with an instance or
// deleted are not allocatable. Pages of 2 nodes make it page.
func TestFullSync(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ir := shared(t)
	p := "fs-" + uuid.NewString()[:8] + "-"
	uuids, err := ir.EnrollAvailable(ctx, []devstack.IronicNode{
		{Name: p + "a", ResourceClass: "gold", Traits: []string{"CUSTOM_A", "CUSTOM_B"}, Owner: "proj-a",
			Properties: map[string]any{"cpus": 8, "memory_mb": 1024}, Extra: map[string]any{"rack": "r1"}},
		{Name: p + "b", ResourceClass: "gold"},
		{Name: p + "c", ResourceClass: "silver"},
		{Name: p + "d", ResourceClass: "silver"},
		{Name: p + "e", ResourceClass: "gold"},
		{Name: p + "f", ResourceClass: "bronze"},
	}, 6)
	require.NoError(t, err)
	m, pool, me := newMirror(t, ir, 2)

	res, err := m.FullSync(ctx, me)
	require.NoError(t, err)
	require.True(t, res.Pruned)
	require.GreaterOrEqual(t, res.Created, 6)
	require.GreaterOrEqual(t, res.Pages, 3)
	a, ok := node(t, pool, uuids[0])
	require.True(t, ok)
	require.Equal(t, p+"a", *a.Name)
	require.Equal(t, "gold", *a.ResourceClass)
	require.Equal(t, "proj-a", *a.Owner)
	require.Equal(t, "available", a.ProvisionState)
	require.NotNil(t, a.PowerState)
	require.True(t, a.Free)
	require.Equal(t, []string{"CUSTOM_A", "CUSTOM_B"}, a.Traits)
	require.Equal(t, map[string]any{"cpus": 8.0, "memory_mb": 1024.0}, a.Properties)
	require.Equal(t, map[string]any{"rack": "r1"}, a.Extra)

	// A second sync with nothing changed writes no node.
	res, err = m.FullSync(ctx, me)
	require.NoError(t, err)
	mine := 0
	for _, u := range uuids {
		if _, ok := node(t, pool, u); ok {
			mine++
		}
	}
	require.Equal(t, 6, mine)

	// Changes made directly in Ironic.
	inst := uuid.New()
	_, err = ir.Do(ctx, http.MethodPut, "/v1/nodes/"+uuids[0]+"/maintenance", map[string]any{"reason": "fan"}, nil)
	require.NoError(t, err)
	_, err = ir.Do(ctx, http.MethodPatch, "/v1/nodes/"+uuids[1], []map[string]any{
		{"op": "add", "path": "/instance_uuid", "value": inst.String()}}, nil)
	require.NoError(t, err)
	_, err = ir.Do(ctx, http.MethodDelete, "/v1/nodes/"+uuids[2], nil, nil)
	require.NoError(t, err)
	// Swap the names of d and e (through a third name).
	for _, ch := range []struct{ u, name string }{{uuids[3], p + "x"}, {uuids[4], p + "d"}, {uuids[3], p + "e"}} {
		_, err = ir.Do(ctx, http.MethodPatch, "/v1/nodes/"+ch.u, []map[string]any{
			{"op": "replace", "path": "/name", "value": ch.name}}, nil)
		require.NoError(t, err)
	}
	_, err = ir.Do(ctx, http.MethodPut, "/v1/nodes/"+uuids[4]+"/traits", map[string]any{"traits": []string{"CUSTOM_Z"}}, nil)
	require.NoError(t, err)
	_, err = ir.Do(ctx, http.MethodPatch, "/v1/nodes/"+uuids[4], []map[string]any{
		{"op": "add", "path": "/owner", "value": "proj-e"}, {"op": "add", "path": "/lessee", "value": "proj-l"}}, nil)
	require.NoError(t, err)

	var alloc struct {
		UUID string `json:"uuid"`
	}
	_, err = ir.Do(ctx, http.MethodPost, "/v1/allocations", map[string]any{
		"resource_class": "bronze", "candidate_nodes": []string{uuids[5]}}, &alloc)
	require.NoError(t, err)
	dbtest.WaitFor(t, 2*time.Minute, "Ironic's allocation active", func() bool {
		var a struct {
			State string `json:"state"`
		}
		_, err := ir.Do(ctx, http.MethodGet, "/v1/allocations/"+alloc.UUID, nil, &a)
		require.NoError(t, err)
		require.NotEqual(t, "error", a.State)
		return a.State == "active"
	})

	res, err = m.FullSync(ctx, me)
	require.NoError(t, err)
	require.GreaterOrEqual(t, res.Deleted, 1)
	f, _ := node(t, pool, uuids[5])
	au := uuid.MustParse(alloc.UUID)
	require.Equal(t, &au, f.IronicAllocation)
	require.Equal(t, &au, f.InstanceUUID)
	require.False(t, f.Free)
	a, _ = node(t, pool, uuids[0])
	require.True(t, a.Maintenance)
	require.Equal(t, "fan", *a.MaintenanceReason)
	require.False(t, a.Free)
	b, _ := node(t, pool, uuids[1])
	require.Equal(t, &inst, b.InstanceUUID)
	require.Equal(t, &inst, b.IronicInstance)
	require.False(t, b.Free)
	_, ok = node(t, pool, uuids[2])
	require.False(t, ok, "a node deleted in Ironic is still mirrored")
	d, _ := node(t, pool, uuids[3])
	e, _ := node(t, pool, uuids[4])
	require.Equal(t, p+"e", *d.Name)
	require.Equal(t, p+"d", *e.Name)
	require.Equal(t, []string{"CUSTOM_Z"}, e.Traits)
	require.Equal(t, "proj-e", *e.Owner)
	require.Equal(t, "proj-l", *e.Lessee)
	require.True(t, e.Free)

	// Back out of maintenance and without the instance: allocatable again.
	_, err = ir.Do(ctx, http.MethodDelete, "/v1/nodes/"+uuids[0]+"/maintenance", nil, nil)
	require.NoError(t, err)
	_, err = ir.Do(ctx, http.MethodPatch, "/v1/nodes/"+uuids[1], []map[string]any{
		{"op": "remove", "path": "/instance_uuid"}}, nil)
	require.NoError(t, err)
	_, err = m.FullSync(ctx, me)
	require.NoError(t, err)
	a, _ = node(t, pool, uuids[0])
	b, _ = node(t, pool, uuids[1])
	require.True(t, a.Free)
	require.True(t, b.Free)
	require.Nil(t, b.InstanceUUID)
}

// TestHeldNodes: a node metalloc holds for an allocation keeps metalloc's
// instance_uuid whatever Ironic says (Ironic's is kept beside it); a node
// deleted in Ironic while an allocation still allocating holds it stays
// until the hold is gone; one holding an active allocation goes, with the
// allocation, as in Ironic. A node whose Ironic instance metalloc holds on
// another node is put into maintenance, with the reason.
func TestHeldNodes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ir := shared(t)
	p := "held-" + uuid.NewString()[:8] + "-"
	uuids, err := ir.EnrollAvailable(ctx, []devstack.IronicNode{{Name: p + "a"}, {Name: p + "b"}, {Name: p + "c"}}, 3)
	require.NoError(t, err)
	m, pool, me := newMirror(t, ir, 0)
	_, err = m.FullSync(ctx, me)
	require.NoError(t, err)
	id := func(u string) int64 {
		return int64(dbtest.Count(t, pool, "SELECT id FROM nodes WHERE uuid = $1", u))
	}

	// a: an active allocation of metalloc's; b: one still allocating
	// (held between metalloc's write and Ironic's).
	_, active := dbtest.Allocation(t, pool, dbtest.AllocationSpec{Node: id(uuids[0])})
	var allocating uuid.UUID
	require.NoError(t, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		var aid int64
		allocating = uuid.New()
		if err := tx.QueryRow(ctx, `INSERT INTO allocations (uuid, resource_class, state, node_id)
			VALUES ($1, 'baremetal', 'allocating', $2) RETURNING id`, allocating, id(uuids[1])).Scan(&aid); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `UPDATE nodes SET allocation_id = $1, instance_uuid = $2 WHERE id = $3`, aid, allocating, id(uuids[1]))
		return err
	}))

	// In Ironic: a gets another instance; c gets b's allocating uuid as
	// its instance (metalloc holds that on b).
	other := uuid.New()
	_, err = ir.Do(ctx, http.MethodPatch, "/v1/nodes/"+uuids[0], []map[string]any{
		{"op": "add", "path": "/instance_uuid", "value": other.String()}}, nil)
	require.NoError(t, err)
	_, err = ir.Do(ctx, http.MethodPatch, "/v1/nodes/"+uuids[2], []map[string]any{
		{"op": "add", "path": "/instance_uuid", "value": allocating.String()}}, nil)
	require.NoError(t, err)
	_, err = m.FullSync(ctx, me)
	require.NoError(t, err)
	a, _ := node(t, pool, uuids[0])
	require.Equal(t, &active, a.InstanceUUID, "metalloc's hold was overwritten")
	require.Equal(t, &other, a.IronicInstance)
	c, _ := node(t, pool, uuids[2])
	require.Nil(t, c.InstanceUUID)
	require.True(t, c.Maintenance)
	require.Contains(t, *c.MaintenanceReason, "metalloc holds on another node")
	require.False(t, c.Free)

	// a and b deleted in Ironic (maintenance first: they have instances
	// there, or not).
	for _, u := range uuids[:2] {
		_, err = ir.Do(ctx, http.MethodPut, "/v1/nodes/"+u+"/maintenance", map[string]any{"reason": "rma"}, nil)
		require.NoError(t, err)
		_, err = ir.Do(ctx, http.MethodDelete, "/v1/nodes/"+u, nil, nil)
		require.NoError(t, err)
	}
	res, err := m.FullSync(ctx, me)
	require.NoError(t, err)
	require.Equal(t, 1, res.Kept)
	_, ok := node(t, pool, uuids[0])
	require.False(t, ok, "a node deleted in Ironic with an active allocation is still mirrored")
	require.Zero(t, dbtest.Count(t, pool, "SELECT count(*) FROM allocations WHERE uuid = $1", active))
	_, ok = node(t, pool, uuids[1])
	require.True(t, ok, "a node held by an allocating allocation was removed")

	// The hold ends (the backend gave up on b): the next sync removes it.
	_, err = pool.Exec(ctx, `SELECT metalloc_deallocate(id) FROM allocations WHERE uuid = $1`, allocating)
	require.NoError(t, err)
	_, err = m.FullSync(ctx, me)
	require.NoError(t, err)
	_, ok = node(t, pool, uuids[1])
	require.False(t, ok)
	require.Empty(t, dbtest.Broken(t, pool))
}

// TestRefresh: one node read again at once (by uuid or name) shows what
// Ironic has; a uuid Ironic no longer knows is removed; a write of an
// older read never overwrites a newer one.
func TestRefresh(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ir := shared(t)
	p := "rf-" + uuid.NewString()[:8] + "-"
	uuids, err := ir.EnrollAvailable(ctx, []devstack.IronicNode{{Name: p + "a", ResourceClass: "gold"}}, 1)
	require.NoError(t, err)
	m, pool, _ := newMirror(t, ir, 0)
	_, err = m.Refresh(ctx, p+"a") // by name: a new node
	require.NoError(t, err)
	a, ok := node(t, pool, uuids[0])
	require.True(t, ok)
	require.Equal(t, "gold", *a.ResourceClass)

	// An old read (of before the change below) is kept aside.
	before, err := m.q.DBNow(ctx)
	require.NoError(t, err)
	old, err := m.client.GetNode(ctx, uuids[0])
	require.NoError(t, err)

	_, err = ir.Do(ctx, http.MethodPatch, "/v1/nodes/"+uuids[0], []map[string]any{
		{"op": "replace", "path": "/resource_class", "value": "platinum"}}, nil)
	require.NoError(t, err)
	moving, err := m.Refresh(ctx, uuids[0])
	require.NoError(t, err)
	require.False(t, moving)
	a, _ = node(t, pool, uuids[0])
	require.Equal(t, "platinum", *a.ResourceClass)

	w, err := m.write(ctx, []json.RawMessage{old}, nil, before, nil)
	require.NoError(t, err)
	require.EqualValues(t, 1, w.Stale)
	a, _ = node(t, pool, uuids[0])
	require.Equal(t, "platinum", *a.ResourceClass, "an older read overwrote a newer one")

	// A name Ironic does not know changes nothing; a uuid it does not
	// know is removed.
	_, err = m.Refresh(ctx, p+"nope")
	require.NoError(t, err)
	_, err = ir.Do(ctx, http.MethodDelete, "/v1/nodes/"+uuids[0], nil, nil)
	require.NoError(t, err)
	_, err = m.Refresh(ctx, uuids[0])
	require.NoError(t, err)
	_, ok = node(t, pool, uuids[0])
	require.False(t, ok)
}

// TestSyncerTakeover: two conductors' syncers share one lease; the holder
// syncs, the other stands by. When the holder's conductor dies (its
// heartbeat is old) the standby takes the lease over (compare-and-set)
// and syncs, and the old holder's writes change nothing from then on
// (ErrLeaseLost). A holder that stops cleanly hands the lease back at
// once. A lease whose holder stopped renewing can be taken too.
func TestSyncerTakeover(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ir := shared(t)
	pool := dbtest.New(t)
	c, err := NewClient(Options{Endpoint: ir.URL, Timeout: time.Minute})
	require.NoError(t, err)
	m := NewMirror(c, pool, 0, zaptest.NewLogger(t))
	c1 := dbtest.Conductor(t, pool, "c1", 0, true)
	c2 := dbtest.Conductor(t, pool, "c2", 0, true)

	type run struct {
		cancel context.CancelFunc
		done   chan struct{}
		synced chan error
	}
	start := func(me int64) *run {
		s, err := NewSyncer(m, SyncerConfig{ConductorID: me, Schedule: "@every 1s",
			RenewInterval: 20 * time.Millisecond, LeaseTimeout: time.Hour}, zaptest.NewLogger(t))
		require.NoError(t, err)
		r := &run{done: make(chan struct{}), synced: make(chan error, 100)}
		s.OnSync = func(_ SyncResult, err error) {
			select {
			case r.synced <- err:
			default:
			}
		}
		var rctx context.Context
		rctx, r.cancel = context.WithCancel(ctx)
		go func() { defer close(r.done); s.Run(rctx) }()
		t.Cleanup(func() { r.cancel(); <-r.done })
		return r
	}
	holder := func() *int64 {
		st, err := m.LeaseStatus(ctx)
		require.NoError(t, err)
		return st.Holder
	}
	waitSync := func(r *run, what string) {
		select {
		case err := <-r.synced:
			require.NoError(t, err, what)
		case <-time.After(2 * time.Minute):
			t.Fatalf("no sync: %s", what)
		}
	}

	r1 := start(c1)
	waitSync(r1, "c1 syncs first")
	require.Equal(t, &c1, holder())
	r2 := start(c2)
	// c2 stands by: it tries the lease every 20 ms and c1 keeps it; c1
	// syncing again (at least 1 s later) comes after many of c2's tries.
	waitSync(r1, "c1 syncs on its schedule")
	require.Equal(t, &c1, holder())
	select {
	case err := <-r2.synced:
		t.Fatalf("standby c2 synced (%v) while c1 held the lease", err)
	default:
	}

	// c1's conductor is dead: c2 takes over and syncs; c1 writes nothing.
	_, err = pool.Exec(ctx, `UPDATE conductors SET expires_at = now() - interval '1 second' WHERE id = $1`, c1)
	require.NoError(t, err)
	waitSync(r2, "c2 takes over")
	require.Equal(t, &c2, holder())
	_, err = m.FullSync(ctx, c1)
	require.ErrorIs(t, err, ErrLeaseLost)

	// c2 stops cleanly: the lease is free at once, and c1 (alive again)
	// takes it.
	_, err = pool.Exec(ctx, `UPDATE conductors SET expires_at = now() + interval '1 hour' WHERE id = $1`, c1)
	require.NoError(t, err)
	r2.cancel()
	<-r2.done
	waitSync(r1, "c1 takes the released lease")
	require.Equal(t, &c1, holder())

	// A holder that stopped renewing for longer than the lease timeout
	// loses it to the next try (here: c2, straight through AcquireLease).
	r1.cancel()
	<-r1.done
	_, err = m.q.AcquireLease(ctx, AcquireLeaseParams{Me: c1, TtlSeconds: 3600})
	require.NoError(t, err)
	_, err = m.q.AcquireLease(ctx, AcquireLeaseParams{Me: c2, TtlSeconds: 3600})
	require.ErrorIs(t, err, pgx.ErrNoRows)
	_, err = pool.Exec(ctx, `UPDATE ironic_sync_lease SET renewed_at = now() - interval '2 hours'`)
	require.NoError(t, err)
	_, err = m.q.AcquireLease(ctx, AcquireLeaseParams{Me: c2, TtlSeconds: 3600})
	require.NoError(t, err)
	require.Equal(t, &c2, holder())
}

// TestSyncKeepsMirrorWhenIronicIsDown: an unreachable Ironic fails the
// sync without removing anything; an empty listing while the mirror has
// nodes removes nothing either.
func TestSyncKeepsMirrorWhenIronicIsDown(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ir := startIronic(t, devstack.IronicOptions{Conductors: 1})
	uuids, err := ir.EnrollAvailable(ctx, []devstack.IronicNode{{Name: "down-a"}}, 1)
	require.NoError(t, err)
	m, pool, me := newMirror(t, ir, 0)
	_, err = m.FullSync(ctx, me)
	require.NoError(t, err)

	ir.StopAPI()
	_, err = m.FullSync(ctx, me)
	require.True(t, IsUnavailable(err), "%v", err)
	_, ok := node(t, pool, uuids[0])
	require.True(t, ok)
	require.NoError(t, ir.StartAPI(ctx))

	// An empty Ironic, a mirror with a node: nothing is removed.
	_, err = ir.Do(ctx, http.MethodDelete, "/v1/nodes/"+uuids[0], nil, nil)
	require.NoError(t, err)
	res, err := m.FullSync(ctx, me)
	require.NoError(t, err)
	require.False(t, res.Pruned)
	_, ok = node(t, pool, uuids[0])
	require.True(t, ok)
	st, err := m.LeaseStatus(ctx)
	require.NoError(t, err)
	require.NotNil(t, st.LastSyncAt)
	require.True(t, slices.Contains([]int32{0}, *st.LastSyncNodes))
}

// TestMirrorRaces: changes made in Ironic, each followed by a refresh (as
// the proxy does), race other refreshes of the same nodes and full syncs
// of the lease holder, while a conductor without the lease keeps trying to
// sync. The non-holder never writes (ErrLeaseLost every time); nothing
// fails; and once the changes stop, without any further sync, the mirror
// says what Ironic says for every node: no older read ever overwrote a
// newer one.
func TestMirrorRaces(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ir := shared(t)
	p := "race-" + uuid.NewString()[:8] + "-"
	var spec []devstack.IronicNode
	for i := range 6 {
		spec = append(spec, devstack.IronicNode{Name: p + string(rune('a'+i)), ResourceClass: "race"})
	}
	uuids, err := ir.EnrollAvailable(ctx, spec, 6)
	require.NoError(t, err)
	m, pool, me := newMirror(t, ir, 2)
	other := dbtest.Conductor(t, pool, "other", 0, true)

	done := make(chan struct{})
	errs := make(chan error, 100)
	var running sync.WaitGroup
	loop := func(fn func(i int) error) {
		running.Add(1)
		go func() {
			defer running.Done()
			for i := 0; ; i++ {
				select {
				case <-done:
					return
				default:
				}
				if err := fn(i); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	loop(func(int) error { _, err := m.FullSync(ctx, me); return err })
	loop(func(int) error {
		if _, err := m.FullSync(ctx, other); !errors.Is(err, ErrLeaseLost) {
			return fmt.Errorf("a conductor without the lease synced: %v", err)
		}
		return nil
	})
	for range 2 {
		loop(func(i int) error { _, err := m.Refresh(ctx, uuids[i%len(uuids)]); return err })
	}

	// The changes: maintenance on and off, extra and description, each
	// refreshed at once.
	for round := range 12 {
		u := uuids[round%len(uuids)]
		ops := []map[string]any{{"op": "add", "path": "/extra/round", "value": round},
			{"op": "add", "path": "/description", "value": fmt.Sprintf("round %d", round)}}
		_, err := ir.Do(ctx, http.MethodPatch, "/v1/nodes/"+u, ops, nil)
		require.NoError(t, err)
		if round%2 == 0 {
			_, err = ir.Do(ctx, http.MethodPut, "/v1/nodes/"+u+"/maintenance", map[string]any{"reason": "r"}, nil)
		} else {
			_, err = ir.Do(ctx, http.MethodDelete, "/v1/nodes/"+u+"/maintenance", nil, nil)
		}
		require.NoError(t, err)
		_, err = m.Refresh(ctx, u)
		require.NoError(t, err)
	}
	close(done)
	running.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}

	for _, u := range uuids {
		var want struct {
			Maintenance bool           `json:"maintenance"`
			Extra       map[string]any `json:"extra"`
			Description *string        `json:"description"`
		}
		_, err := ir.Do(ctx, http.MethodGet, "/v1/nodes/"+u, nil, &want)
		require.NoError(t, err)
		got, ok := node(t, pool, u)
		require.True(t, ok)
		require.Equal(t, want.Maintenance, got.Maintenance, "node %s", u)
		require.Equal(t, want.Extra, got.Extra, "node %s", u)
		var desc *string
		require.NoError(t, pool.QueryRow(ctx, "SELECT description FROM nodes WHERE uuid = $1", u).Scan(&desc))
		require.Equal(t, want.Description, desc, "node %s", u)
	}
}

// BenchmarkFullSync measures full syncs of 2,000 nodes (clones written
// into the shared Ironic's database): the first (every node new) and the
// steady one (nothing changed). Run alone: go test -run '^$' -bench
// FullSync ./ironic/.
func BenchmarkFullSync(b *testing.B) {
	ctx := context.Background()
	ir := shared(b)
	tmpl, err := ir.EnrollAvailable(ctx, []devstack.IronicNode{{Name: "bench-tmpl-" + uuid.NewString()[:8], ResourceClass: "bench"}}, 1)
	require.NoError(b, err)
	_, err = ir.CloneNodes(ctx, tmpl[0], 1999, "bench-"+uuid.NewString()[:8])
	require.NoError(b, err)
	c, err := NewClient(Options{Endpoint: ir.URL, Timeout: 5 * time.Minute})
	require.NoError(b, err)
	for _, steady := range []bool{false, true} {
		name := map[bool]string{false: "initial", true: "unchanged"}[steady]
		b.Run(name, func(b *testing.B) {
			for b.Loop() {
				b.StopTimer()
				pool := dbtest.New(b)
				m := NewMirror(c, pool, 0, nil)
				me := dbtest.Conductor(b, pool, "bench", 0, true)
				_, err := m.q.AcquireLease(ctx, AcquireLeaseParams{Me: me, TtlSeconds: 3600})
				require.NoError(b, err)
				if steady {
					_, err = m.FullSync(ctx, me)
					require.NoError(b, err)
				}
				b.StartTimer()
				res, err := m.FullSync(ctx, me)
				require.NoError(b, err)
				require.GreaterOrEqual(b, res.Nodes, 2000)
			}
		})
	}
}

// TestMirrorCreatorsTakeTurns: two writers that mirror the same new node at
// once (a refresh and a full sync) take turns: the second waits for the
// first's advisory lock before it reads or writes anything, then finds
// its row (migration 00035). Without the lock the two could interleave
// so that the second failed on the node's name, a unique key the
// insert's ON CONFLICT (uuid) does not cover (TestMirrorRaces, once in
// CI); that interleaving is too narrow to produce on purpose, so this
// checks where the second waits.
func TestMirrorCreatorsTakeTurns(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := dbtest.New(t)
	u := uuid.New()
	nodes, err := json.Marshal([]map[string]any{{"uuid": u, "name": "turns-" + u.String()[:8],
		"resource_class": "gold", "provision_state": "available", "power_state": "power off"}})
	require.NoError(t, err)
	first, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer first.Rollback(ctx) //nolint:errcheck // committed below
	r, err := New(first).MirrorNodes(ctx, MirrorNodesParams{Nodes: nodes, ReadAt: time.Now()})
	require.NoError(t, err)
	require.EqualValues(t, 1, r.Created)

	second := make(chan error, 1)
	go func() {
		r, err := New(pool).MirrorNodes(ctx, MirrorNodesParams{Nodes: nodes, ReadAt: time.Now()})
		if err == nil && r.Created != 0 {
			err = fmt.Errorf("created it again: %+v", r)
		}
		second <- err
	}()
	dbtest.WaitFor(t, 30*time.Second, "the second writer waiting for the first's advisory lock", func() bool {
		var n int
		require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock' AND wait_event = 'advisory'
			  AND query LIKE '%metalloc_ironic_mirror%'`).Scan(&n))
		return n == 1
	})
	require.NoError(t, first.Commit(ctx))
	require.NoError(t, <-second)
	var n int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM nodes WHERE uuid = $1`, u).Scan(&n))
	require.Equal(t, 1, n)
}

// TestFullSyncMarkerDeleted: a node deleted in Ironic while a full sync
// pages through the nodes, the very node the next page starts after (the
// marker, which Ironic then answers 404 for), does not fail the sync: the
// list goes on after the node before it on the page.
func TestFullSyncMarkerDeleted(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ir := shared(t)
	uuids := markerNodes(t, ir)
	var deleted atomic.Value
	front := markerProxy(t, ir, "/v1/nodes", func(marker string) bool {
		if slices.Contains(uuids, marker) && deleted.CompareAndSwap(nil, marker) {
			if _, err := ir.Do(ctx, http.MethodDelete, "/v1/nodes/"+marker, nil, nil); err != nil {
				t.Errorf("deleting the marker %s: %v", marker, err)
			}
		}
		return false
	})
	_, pool := fullSyncPageOne(t, front)
	gone, _ := deleted.Load().(string)
	require.NotEmpty(t, gone, "a page was asked after one of the nodes")
	requireMirrored(t, pool, uuids, gone)
}

// TestFullSyncMarkersGone: the marker is gone (404), then the node before
// it too, the first one listed: the sync steps back, then lists from the
// start again, and mirrors every node. Other tests delete their nodes in
// the shared Ironic while this one pages (CI failed once this way with a
// single step back kept). The 404s are Ironic's answer to an unknown
// marker, given here by a proxy for the second and third markers asked.
func TestFullSyncMarkersGone(t *testing.T) {
	t.Parallel()
	ir := shared(t)
	uuids := markerNodes(t, ir)
	var asked, fromStart atomic.Int32
	front := markerProxy(t, ir, "/v1/nodes", func(marker string) bool {
		if marker == "" {
			fromStart.Add(1)
			return false
		}
		n := asked.Add(1)
		return n == 2 || n == 3
	})
	res, pool := fullSyncPageOne(t, front)
	require.Equal(t, int32(2), fromStart.Load(), "listed from the start twice")
	require.GreaterOrEqual(t, res.Nodes, len(uuids))
	requireMirrored(t, pool, uuids, "")
}

// TestListAllocationsMarkerDeleted: an allocation deleted in Ironic while
// ListAllocations pages (one per page) is left out and the list goes on
// after the one before it; when the first one listed is gone (404, given
// by the proxy for the first marker asked), from the start again. Every
// allocation is listed once.
func TestListAllocationsMarkerDeleted(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ir := shared(t)
	var ours []string
	class := "nothing-" + uuid.NewString()[:8] // no node: they end in error, and stay listed
	for range 3 {
		var a struct {
			UUID string `json:"uuid"`
		}
		_, err := ir.Do(ctx, http.MethodPost, "/v1/allocations", map[string]any{"resource_class": class}, &a)
		require.NoError(t, err)
		ours = append(ours, a.UUID)
	}
	var asked atomic.Int32
	var deleted atomic.Value
	front := markerProxy(t, ir, "/v1/allocations", func(marker string) bool {
		if marker == "" {
			return false
		}
		if asked.Add(1) == 1 {
			return true
		}
		if slices.Contains(ours, marker) && deleted.CompareAndSwap(nil, marker) {
			if _, err := ir.Do(ctx, http.MethodDelete, "/v1/allocations/"+marker, nil, nil); err != nil {
				t.Errorf("deleting the marker %s: %v", marker, err)
			}
		}
		return false
	})
	c, err := NewClient(Options{Endpoint: front.URL, Timeout: time.Minute})
	require.NoError(t, err)
	list, err := c.ListAllocations(ctx, 1)
	require.NoError(t, err)
	gone, _ := deleted.Load().(string)
	require.NotEmpty(t, gone, "a page was asked after one of the allocations")
	seen := map[string]int{}
	for _, a := range list {
		seen[a.UUID]++
	}
	for u, n := range seen {
		require.Equal(t, 1, n, "allocation %s listed %d times", u, n)
	}
	for _, u := range ours {
		require.Equal(t, u != gone, seen[u] == 1, "allocation %s (deleted: %s)", u, gone)
	}
}

// markerNodes enrolls 4 available nodes of their own class in ir and
// returns their uuids.
func markerNodes(t *testing.T, ir *devstack.Ironic) []string {
	t.Helper()
	p := "marker-" + uuid.NewString()[:8] + "-"
	var spec []devstack.IronicNode
	for i := range 4 {
		spec = append(spec, devstack.IronicNode{Name: p + string(rune('a'+i)), ResourceClass: "marker"})
	}
	uuids, err := ir.EnrollAvailable(context.Background(), spec, 4)
	require.NoError(t, err)
	return uuids
}

// markerProxy is a server in front of ir that calls before for each list
// request on path (its marker, "" for none) and answers 404 as Ironic does
// for an unknown marker when before says so.
func markerProxy(t *testing.T, ir *devstack.Ironic, path string, before func(marker string) bool) *httptest.Server {
	t.Helper()
	target, err := url.Parse(ir.URL)
	require.NoError(t, err)
	proxy := httputil.NewSingleHostReverseProxy(target)
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == path && before(r.URL.Query().Get("marker")) {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusNotFound)
			_, _ = w.Write([]byte(`{"error_message": "{\"faultstring\": \"not found\", \"faultcode\": \"Client\"}"}`))
			return
		}
		proxy.ServeHTTP(w, r)
	}))
	t.Cleanup(front.Close)
	return front
}

// fullSyncPageOne runs a full sync of the Ironic behind front into a new
// new database (returned), one node per page (every node is a marker
// once).
func fullSyncPageOne(t *testing.T, front *httptest.Server) (SyncResult, *pgxpool.Pool) {
	t.Helper()
	ctx := context.Background()
	pool := dbtest.New(t)
	c, err := NewClient(Options{Endpoint: front.URL, Timeout: time.Minute})
	require.NoError(t, err)
	m := NewMirror(c, pool, 1, zaptest.NewLogger(t))
	me := dbtest.Conductor(t, pool, "conductor-"+uuid.NewString()[:8], 0, true)
	_, err = m.q.AcquireLease(ctx, AcquireLeaseParams{Me: me, TtlSeconds: 3600})
	require.NoError(t, err)
	res, err := m.FullSync(ctx, me)
	require.NoError(t, err)
	return res, pool
}

// requireMirrored checks that the nodes of uuids but gone are in pool's
// mirror.
func requireMirrored(t *testing.T, pool *pgxpool.Pool, uuids []string, gone string) {
	t.Helper()
	for _, u := range uuids {
		if u != gone {
			_, ok := node(t, pool, u)
			require.True(t, ok, "node %s mirrored", u)
		}
	}
}
