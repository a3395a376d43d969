package conductor

import (
	"context"
	"encoding/json"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"

	"github.com/metalloc/metalloc/config"
	"github.com/metalloc/metalloc/db/dbtest"
	"github.com/metalloc/metalloc/placement"
	"github.com/metalloc/metalloc/placement/client"
	"github.com/metalloc/metalloc/placement/placementtest"
)

// trackerEnv is a fresh database with metalloc-placement serving it
// in-process (its own schema in the same database, as in production).
// Its trackers write in mode (TrackerConfig.Mode): in-process or through
// the API.
type trackerEnv struct {
	pool *pgxpool.Pool
	pc   *client.Client
	mode string
}

func newTrackerEnv(t *testing.T, mode string) *trackerEnv {
	t.Helper()
	pool := dbtest.New(t)
	srv := placementtest.NewServerOn(t, pool, placement.Options{})
	return &trackerEnv{pool: pool, pc: client.New(srv.URL, "admin", 10*time.Second), mode: mode}
}

func (e *trackerEnv) tracker(t *testing.T, cfg TrackerConfig) *Tracker {
	cfg.Mode = e.mode
	return NewTracker(e.pool, e.pc, cfg, zaptest.NewLogger(t))
}

// bothModes runs test with the tracker writing in-process and through the
// Placement API: the outcome must be the same.
func bothModes(t *testing.T, test func(t *testing.T, mode string)) {
	for _, mode := range []string{"local", "http"} {
		t.Run(mode, func(t *testing.T) { test(t, mode) })
	}
}

// addNode inserts an available node and returns its uuid.
func (e *trackerEnv) addNode(t *testing.T, name, rc string, props string, traits ...string) uuid.UUID {
	t.Helper()
	var properties map[string]any
	require.NoError(t, json.Unmarshal([]byte(props), &properties))
	_, id := dbtest.Node(t, e.pool, dbtest.NodeSpec{Name: name, ResourceClass: rc, Properties: properties, Traits: traits})
	if rc == "" { // dbtest's default would be "gold"
		e.exec(t, `UPDATE nodes SET resource_class = '' WHERE uuid = $1`, id)
	}
	return id
}

func (e *trackerEnv) exec(t *testing.T, sql string, args ...any) {
	t.Helper()
	_, err := e.pool.Exec(context.Background(), sql, args...)
	require.NoError(t, err)
}

func (e *trackerEnv) inv(t *testing.T, rp uuid.UUID) map[string]client.Inventory {
	t.Helper()
	inv, err := e.pc.GetInventories(context.Background(), rp)
	require.NoError(t, err)
	return inv.Inventories
}

// setRatio is an operator's PUT of one class's allocation ratio through the
// Placement API.
func (e *trackerEnv) setRatio(t *testing.T, rp uuid.UUID, rc string, ratio float64) {
	t.Helper()
	ctx := context.Background()
	inv, err := e.pc.GetInventories(ctx, rp)
	require.NoError(t, err)
	i := inv.Inventories[rc]
	i.AllocationRatio = ratio
	inv.Inventories[rc] = i
	_, err = e.pc.PutInventories(ctx, rp, *inv)
	require.NoError(t, err)
}

// claim allocates one unit of rc on rp for a new consumer in Placement.
func (e *trackerEnv) claim(t *testing.T, rp uuid.UUID, rc string) uuid.UUID {
	t.Helper()
	consumer := uuid.New()
	require.NoError(t, e.pc.PutAllocations(context.Background(), consumer, client.Claim{
		Request: client.AllocationRequest{Allocations: map[uuid.UUID]client.ProviderResources{
			rp: {Resources: client.Resources{rc: 1}}}},
		ProjectID: "p", UserID: "u",
	}))
	return consumer
}

func sync1(t *testing.T, tr *Tracker) SyncStats {
	t.Helper()
	st, err := tr.Sync(context.Background())
	require.NoError(t, err)
	require.False(t, st.Skipped)
	return st
}

func counts(st SyncStats) [6]int {
	return [6]int{st.Created, st.Updated, st.Unchanged, st.Deleted, st.ClaimsReleased, st.Failed}
}

func TestTrackerFirstSyncMirrorsNodes(t *testing.T) { bothModes(t, testTrackerFirstSyncMirrorsNodes) }

func testTrackerFirstSyncMirrorsNodes(t *testing.T, mode string) {
	e := newTrackerEnv(t, mode)
	ctx := context.Background()
	n1 := e.addNode(t, "n1", "baremetal.gold", `{"cpus": "8", "memory_mb": 1024, "local_gb": "100"}`,
		"CUSTOM_NVME", "HW_CPU_X86_AVX2", "NOT_A_TRAIT")
	n2 := e.addNode(t, "", "", `{}`) // no class, NULL name below
	e.exec(t, `UPDATE nodes SET name = NULL WHERE uuid = $1`, n2)
	tr := e.tracker(t, TrackerConfig{ReportGenericResources: true})

	st := sync1(t, tr)
	require.Equal(t, [6]int{2, 0, 0, 0, 0, 0}, counts(st))

	p, err := e.pc.GetProvider(ctx, n1)
	require.NoError(t, err)
	require.Equal(t, "n1", p.Name)
	require.Equal(t, map[string]client.Inventory{
		"CUSTOM_BAREMETAL_GOLD": {Total: 1, MinUnit: 1, MaxUnit: 1, StepSize: 1, AllocationRatio: 1},
		"VCPU":                  {Total: 8, MinUnit: 1, MaxUnit: 8, StepSize: 1, AllocationRatio: 16},
		"MEMORY_MB":             {Total: 1024, MinUnit: 1, MaxUnit: 1024, StepSize: 1, AllocationRatio: 1.5},
		"DISK_GB":               {Total: 100, MinUnit: 1, MaxUnit: 100, StepSize: 1, AllocationRatio: 1},
	}, e.inv(t, n1))
	traits, err := e.pc.GetTraits(ctx, n1)
	require.NoError(t, err)
	require.ElementsMatch(t, []string{"CUSTOM_NVME", "HW_CPU_X86_AVX2"}, traits.Traits)

	p2, err := e.pc.GetProvider(ctx, n2)
	require.NoError(t, err)
	require.Equal(t, n2.String(), p2.Name)
	require.Empty(t, e.inv(t, n2))

	// Nothing changed: nothing is written.
	before := p.Generation
	st = sync1(t, tr)
	require.Equal(t, [6]int{0, 0, 2, 0, 0, 0}, counts(st))
	p, err = e.pc.GetProvider(ctx, n1)
	require.NoError(t, err)
	require.Equal(t, before, p.Generation)

	// A rename and a trait change are mirrored.
	e.exec(t, `UPDATE nodes SET name = 'n1-renamed' WHERE uuid = $1`, n1)
	e.exec(t, `DELETE FROM node_traits WHERE trait = 'CUSTOM_NVME'`)
	st = sync1(t, tr)
	require.Equal(t, [6]int{0, 1, 1, 0, 0, 0}, counts(st))
	p, err = e.pc.GetProvider(ctx, n1)
	require.NoError(t, err)
	require.Equal(t, "n1-renamed", p.Name)
	traits, err = e.pc.GetTraits(ctx, n1)
	require.NoError(t, err)
	require.Equal(t, []string{"HW_CPU_X86_AVX2"}, traits.Traits)
}

func TestTrackerOperatorRatioSurvives(t *testing.T) { bothModes(t, testTrackerOperatorRatioSurvives) }

func testTrackerOperatorRatioSurvives(t *testing.T, mode string) {
	e := newTrackerEnv(t, mode)
	n := e.addNode(t, "n", "gold", `{"cpus": 8, "memory_mb": 1024, "local_gb": 10}`)
	tr := e.tracker(t, TrackerConfig{ReportGenericResources: true})
	sync1(t, tr)
	e.setRatio(t, n, "VCPU", 4)
	e.setRatio(t, n, "CUSTOM_GOLD", 2)

	// A node change makes the tracker write the provider again; the
	// operator's ratios stay.
	e.exec(t, `UPDATE nodes SET properties = '{"cpus": 16, "memory_mb": 1024, "local_gb": 10}' WHERE uuid = $1`, n)
	st := sync1(t, tr)
	require.Equal(t, 1, st.Updated)
	inv := e.inv(t, n)
	require.Equal(t, int64(16), inv["VCPU"].Total)
	require.Equal(t, 4.0, inv["VCPU"].AllocationRatio)
	require.Equal(t, 2.0, inv["CUSTOM_GOLD"].AllocationRatio)
	require.Equal(t, 1.5, inv["MEMORY_MB"].AllocationRatio)

	// Even a forced rewrite keeps them.
	e.exec(t, `UPDATE placement_synced SET fingerprint = ''`)
	sync1(t, tr)
	require.Equal(t, 4.0, e.inv(t, n)["VCPU"].AllocationRatio)
}

func TestTrackerOverrideWins(t *testing.T) { bothModes(t, testTrackerOverrideWins) }

func testTrackerOverrideWins(t *testing.T, mode string) {
	e := newTrackerEnv(t, mode)
	n := e.addNode(t, "n", "gold", `{"cpus": 8, "memory_mb": 1024, "local_gb": 10}`)
	cfg := TrackerConfigFrom(config.PlacementBackend{
		ReportGenericResources: true, CPUAllocationRatio: f64(2), RAMAllocationRatio: f64(0),
		InitialCPUAllocationRatio: 16, InitialRAMAllocationRatio: 1.5, InitialDiskAllocationRatio: 1,
		AllocationRatios: map[string]float64{"custom_gold": 3},
	})
	tr := e.tracker(t, cfg)
	sync1(t, tr)
	inv := e.inv(t, n)
	require.Equal(t, 2.0, inv["VCPU"].AllocationRatio, "override on creation")
	require.Equal(t, 1.5, inv["MEMORY_MB"].AllocationRatio, "an explicit 0.0 override is ignored")
	require.Equal(t, 3.0, inv["CUSTOM_GOLD"].AllocationRatio)

	e.setRatio(t, n, "VCPU", 4)
	e.exec(t, `UPDATE nodes SET maintenance = true WHERE uuid = $1`, n)
	sync1(t, tr)
	require.Equal(t, 2.0, e.inv(t, n)["VCPU"].AllocationRatio, "override wins over the operator's PUT")

	// A changed configuration alone rewrites every provider.
	cfg.Ratios.Override[ClassVCPU] = 5
	st := sync1(t, e.tracker(t, cfg))
	require.Equal(t, 1, st.Updated)
	require.Equal(t, 5.0, e.inv(t, n)["VCPU"].AllocationRatio)
}

func TestTrackerZeroRatioInPlacement(t *testing.T) { bothModes(t, testTrackerZeroRatioInPlacement) }

func testTrackerZeroRatioInPlacement(t *testing.T, mode string) {
	e := newTrackerEnv(t, mode)
	n := e.addNode(t, "n", "gold", `{"cpus": 8, "memory_mb": 1024, "local_gb": 10}`)
	tr := e.tracker(t, TrackerConfig{ReportGenericResources: true})
	sync1(t, tr)
	// metalloc-placement refuses a 0.0 ratio, so write it behind its back
	// (as an old Nova would have left it).
	e.exec(t, `UPDATE placement.inventories i SET allocation_ratio = 0
	             FROM placement.resource_classes c WHERE c.id = i.resource_class_id AND c.name IN ('VCPU', 'MEMORY_MB')`)
	require.Equal(t, 0.0, e.inv(t, n)["VCPU"].AllocationRatio)
	zs, err := tr.FindZeroRatios(context.Background())
	require.NoError(t, err)
	require.Equal(t, []ZeroRatio{{n, "MEMORY_MB"}, {n, "VCPU"}}, zs)

	e.exec(t, `UPDATE placement_synced SET fingerprint = ''`)
	sync1(t, tr)
	inv := e.inv(t, n)
	require.Equal(t, 16.0, inv["VCPU"].AllocationRatio, "an existing 0.0 is treated as missing")
	require.Equal(t, 1.5, inv["MEMORY_MB"].AllocationRatio)
}

func TestTrackerUnavailableNodesFullyReserved(t *testing.T) {
	bothModes(t, testTrackerUnavailableNodesFullyReserved)
}

func testTrackerUnavailableNodesFullyReserved(t *testing.T, mode string) {
	e := newTrackerEnv(t, mode)
	ctx := context.Background()
	var ids []uuid.UUID
	for _, name := range []string{"a", "b", "c", "d"} {
		ids = append(ids, e.addNode(t, name, "gold", `{"cpus": 4, "memory_mb": 100, "local_gb": 10}`))
	}
	tr := e.tracker(t, TrackerConfig{ReportGenericResources: true})
	require.Equal(t, 4, sync1(t, tr).Created)
	for _, id := range ids {
		require.Equal(t, int64(0), e.inv(t, id)["CUSTOM_GOLD"].Reserved)
	}

	// a: maintenance. b: gets an instance, with its claim in Placement
	// (usage 1 of 1: reserved 1 would be refused by metalloc-placement).
	e.exec(t, `UPDATE nodes SET maintenance = true WHERE uuid = $1`, ids[0])
	consumer := e.claim(t, ids[1], "CUSTOM_GOLD")
	e.exec(t, `UPDATE nodes SET instance_uuid = $2, provision_state = 'active' WHERE uuid = $1`, ids[1], consumer)
	e.exec(t, `UPDATE nodes SET power_state = NULL WHERE uuid = $1`, ids[2])
	st := sync1(t, tr)
	require.Equal(t, [6]int{0, 3, 1, 0, 0, 0}, counts(st))

	require.Equal(t, client.Inventory{Total: 1, Reserved: 1, MinUnit: 1, MaxUnit: 1, StepSize: 1, AllocationRatio: 1},
		e.inv(t, ids[0])["CUSTOM_GOLD"])
	require.Equal(t, int64(4), e.inv(t, ids[0])["VCPU"].Reserved)
	require.Equal(t, int64(0), e.inv(t, ids[1])["CUSTOM_GOLD"].Reserved, "total − usage")
	require.Equal(t, int64(4), e.inv(t, ids[1])["VCPU"].Reserved)
	require.Equal(t, int64(1), e.inv(t, ids[2])["CUSTOM_GOLD"].Reserved)
	require.Equal(t, int64(0), e.inv(t, ids[3])["CUSTOM_GOLD"].Reserved)

	// No candidate among them but d.
	cands, err := e.pc.AllocationCandidates(ctx, map[string][]string{"resources": {"CUSTOM_GOLD:1"}})
	require.NoError(t, err)
	require.Len(t, cands.AllocationRequests, 1)
	require.Contains(t, cands.AllocationRequests[0].Allocations, ids[3])

	// Back to available: reserved 0 again; only a is written.
	e.exec(t, `UPDATE nodes SET maintenance = false WHERE uuid = $1`, ids[0])
	st = sync1(t, tr)
	require.Equal(t, [6]int{0, 1, 3, 0, 0, 0}, counts(st))
	require.Equal(t, int64(0), e.inv(t, ids[0])["CUSTOM_GOLD"].Reserved)
}

func TestTrackerDeletedNodeAndLeakedClaims(t *testing.T) {
	bothModes(t, testTrackerDeletedNodeAndLeakedClaims)
}

func testTrackerDeletedNodeAndLeakedClaims(t *testing.T, mode string) {
	e := newTrackerEnv(t, mode)
	ctx := context.Background()
	gone := e.addNode(t, "gone", "gold", `{}`)
	busy := e.addNode(t, "busy", "gold", `{}`)
	kept := e.addNode(t, "kept", "gold", `{}`)
	tr := e.tracker(t, TrackerConfig{})
	require.Equal(t, 3, sync1(t, tr).Created)

	// gone: deleted with an allocation in Placement that a claim row names.
	c1 := e.claim(t, gone, "CUSTOM_GOLD")
	e.exec(t, `INSERT INTO placement_claims (consumer_uuid, provider_uuid) VALUES ($1, $2)`, c1, gone)
	e.exec(t, `DELETE FROM nodes WHERE uuid = $1`, gone)
	// busy: a leaked claim (no allocation row), old enough, and an
	// in-flight one (fresh row) on kept that must stay.
	c2 := e.claim(t, busy, "CUSTOM_GOLD")
	e.exec(t, `INSERT INTO placement_claims (consumer_uuid, provider_uuid, created_at)
	           VALUES ($1, $2, now() - interval '1 minute')`, c2, busy)
	c3 := e.claim(t, kept, "CUSTOM_GOLD")
	e.exec(t, `INSERT INTO placement_claims (consumer_uuid, provider_uuid) VALUES ($1, $2)`, c3, kept)
	// An allocating allocation is not leaked either.
	c4 := uuid.New()
	e.exec(t, `INSERT INTO allocations (uuid, resource_class) VALUES ($1, 'gold')`, c4)
	e.exec(t, `INSERT INTO placement_claims (consumer_uuid, provider_uuid, created_at)
	           VALUES ($1, $2, now() - interval '1 minute')`, c4, kept)

	st := sync1(t, tr)
	require.Equal(t, 1, st.Deleted)
	require.Equal(t, 2, st.ClaimsReleased)
	require.Equal(t, 1, st.Updated, "busy's reserved recomputed")
	require.Equal(t, 1, st.Unchanged)

	_, err := e.pc.GetProvider(ctx, gone)
	require.True(t, client.IsNotFound(err), "%v", err)
	for _, c := range []uuid.UUID{c1, c2} {
		a, err := e.pc.GetAllocations(ctx, c)
		require.NoError(t, err)
		require.Empty(t, a.Allocations)
	}
	a, err := e.pc.GetAllocations(ctx, c3)
	require.NoError(t, err)
	require.Len(t, a.Allocations, 1, "in-flight claim left alone")
	require.Equal(t, 0, dbtest.Count(t, e.pool, `SELECT count(*) FROM placement_synced WHERE node_uuid = $1`, gone))
	require.Equal(t, 2, dbtest.Count(t, e.pool, `SELECT count(*) FROM placement_claims`))

	st = sync1(t, tr)
	require.Equal(t, [6]int{0, 0, 2, 0, 0, 0}, counts(st))
}

func TestTrackerConcurrentSyncs(t *testing.T) { bothModes(t, testTrackerConcurrentSyncs) }

func testTrackerConcurrentSyncs(t *testing.T, mode string) {
	e := newTrackerEnv(t, mode)
	for i := range 20 {
		e.addNode(t, "n"+string(rune('a'+i)), "gold", `{}`, "CUSTOM_X")
	}
	var mu sync.Mutex
	var total [6]int
	var wg sync.WaitGroup
	for range 3 {
		tr := e.tracker(t, TrackerConfig{Concurrency: 4})
		wg.Go(func() {
			for range 3 {
				st, err := tr.Sync(context.Background())
				require.NoError(t, err)
				mu.Lock()
				c := counts(st)
				for i := range c {
					total[i] += c[i]
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	require.Equal(t, 20, total[0], "each provider created once")
	require.Zero(t, total[1])
	require.Zero(t, total[5])
	require.Equal(t, 20, dbtest.Count(t, e.pool, `SELECT count(*) FROM placement.resource_providers`))

	// While another session holds the lock, a pass is skipped.
	conn, err := e.pool.Acquire(context.Background())
	require.NoError(t, err)
	defer conn.Release()
	_, err = conn.Exec(context.Background(), "SELECT pg_advisory_lock($1)", trackerLockKey)
	require.NoError(t, err)
	st, err := e.tracker(t, TrackerConfig{}).Sync(context.Background())
	require.NoError(t, err)
	require.True(t, st.Skipped)
	_, err = conn.Exec(context.Background(), "SELECT pg_advisory_unlock($1)", trackerLockKey)
	require.NoError(t, err)
}

func TestTrackerRunFollowsNodeChanges(t *testing.T) { bothModes(t, testTrackerRunFollowsNodeChanges) }

func testTrackerRunFollowsNodeChanges(t *testing.T, mode string) {
	e := newTrackerEnv(t, mode)
	tr := e.tracker(t, TrackerConfig{SyncSchedule: SyncOff, SyncDelay: 20 * time.Millisecond})
	passes := make(chan SyncStats, 100)
	tr.OnSync = func(st SyncStats, err error) {
		require.NoError(t, err)
		passes <- st
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- tr.Run(ctx) }()
	<-passes // the start-up pass
	n := e.addNode(t, "late", "gold", `{}`)
	dbtest.WaitFor(t, 10*time.Second, "the late node's provider to appear in Placement", func() bool {
		_, err := e.pc.GetProvider(context.Background(), n)
		return err == nil
	})
	cancel()
	require.NoError(t, <-done)
}

func TestTrackerPlacementUnreachable(t *testing.T) {
	pool := dbtest.New(t)
	dbtest.Node(t, pool, dbtest.NodeSpec{Name: "n"})
	pc := client.New("http://127.0.0.1:1", "admin", time.Second)
	st, err := NewTracker(pool, pc, TrackerConfig{}, zaptest.NewLogger(t)).Sync(context.Background())
	require.Error(t, err)
	require.True(t, client.IsUnreachable(err), "%v", err)
	require.Equal(t, 1, st.Failed)
	require.Equal(t, 0, dbtest.Count(t, pool, `SELECT count(*) FROM placement_synced`))
}

func TestPassSpacing(t *testing.T) {
	require.Equal(t, 200*time.Millisecond, passSpacing(200*time.Millisecond, 10*time.Millisecond))
	require.Equal(t, 2*time.Second, passSpacing(200*time.Millisecond, 500*time.Millisecond))
	require.Equal(t, 10*time.Second, passSpacing(200*time.Millisecond, time.Minute))
}

// TestNodeNotifications checks which node changes wake trackers: none while
// no tracker is registered; with one, a mirrored column does, and a node
// taking the instance whose claim is in placement_claims does not (the
// placement backend's reservation, kept off PostgreSQL's notification
// lock). Notifications arrive in commit order, so a marker sent after each
// change tells whether the change notified.
func TestNodeNotifications(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := dbtest.New(t)
	conn, err := pool.Acquire(ctx)
	require.NoError(t, err)
	defer conn.Release()
	_, err = conn.Exec(ctx, "LISTEN "+NodesNotifyChannel)
	require.NoError(t, err)
	exec := func(sql string, args ...any) {
		_, err := pool.Exec(ctx, sql, args...)
		require.NoError(t, err)
	}
	// notified runs change, then sends a marker, and reports whether a
	// notification came before the marker.
	notified := func(change func()) bool {
		change()
		exec(`SELECT pg_notify($1, 'marker')`, NodesNotifyChannel)
		wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		n, err := conn.Conn().WaitForNotification(wctx)
		require.NoError(t, err)
		if n.Payload == "marker" {
			return false
		}
		n, err = conn.Conn().WaitForNotification(wctx)
		require.NoError(t, err)
		require.Equal(t, "marker", n.Payload)
		return true
	}
	node, instance, other := uuid.New(), uuid.New(), uuid.New()
	require.False(t, notified(func() {
		exec(`INSERT INTO nodes (uuid, name, driver, resource_class, provision_state, power_state)
			VALUES ($1, 'n1', 'fake-hardware', 'gold', 'available', 'power off')`, node)
	}), "no tracker registered")
	exec(`INSERT INTO placement_trackers (id, hostname) VALUES ($1, 'h')`, uuid.New())
	require.True(t, notified(func() { exec(`UPDATE nodes SET maintenance = true WHERE uuid = $1`, node) }))
	require.False(t, notified(func() { exec(`UPDATE nodes SET driver_info = '{"a": 1}' WHERE uuid = $1`, node) }),
		"a column the tracker does not mirror")
	exec(`INSERT INTO placement_claims (consumer_uuid, provider_uuid) VALUES ($1, $2)`, instance, node)
	require.False(t, notified(func() { exec(`UPDATE nodes SET instance_uuid = $2 WHERE uuid = $1`, node, instance) }),
		"the placement backend's reservation of its claimed node")
	require.False(t, notified(func() { exec(`UPDATE nodes SET instance_uuid = NULL WHERE uuid = $1`, node) }),
		"a node giving up its claimed instance (the claim's release frees the provider)")
	require.True(t, notified(func() { exec(`UPDATE nodes SET instance_uuid = $2 WHERE uuid = $1`, node, other) }),
		"an instance without a Placement claim")
	require.True(t, notified(func() { exec(`UPDATE nodes SET instance_uuid = NULL WHERE uuid = $1`, node) }),
		"a node released")
	// What was notified is in the change log, in order: the maintenance
	// change, the instance without a claim, the release.
	require.Equal(t, 3, dbtest.Count(t, pool, `SELECT count(*) FROM placement_node_changes WHERE node_uuid = $1`, node))
}
