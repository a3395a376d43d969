package conductor

import (
	"context"
	"encoding/json"
	"errors"
	"github.com/metalloc/metalloc/conductor/backend"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"

	"github.com/metalloc/metalloc/allocgroup"
	"github.com/metalloc/metalloc/db/dbtest"
	"github.com/metalloc/metalloc/placement/client"
	"github.com/metalloc/metalloc/topology"
)

// rackedFleet inserts racks*perRack nodes of rc (dbtest.RackedNodes) and
// sets the topology row=extra.row, rack=extra.rack.
func rackedFleet(t testing.TB, pool *pgxpool.Pool, racks, perRack int, rc string) {
	t.Helper()
	dbtest.RackedNodes(t, pool, racks, perRack, rc)
	require.NoError(t, topology.Save(context.Background(), pool,
		[]topology.Level{{Name: "row", Source: "extra.row"}, {Name: "rack", Source: "extra.rack"}}))
}

// addGroup inserts an allocating group of count nodes of rc under rule at
// level (rule none: level "").
func addGroup(t testing.TB, pool *pgxpool.Pool, count int, rc, rule, level string) uuid.UUID {
	t.Helper()
	p := allocgroup.CreateGroupParams{Uuid: uuid.New(), Count: int32(count), ResourceClass: rc,
		Traits: []string{}, Extra: json.RawMessage(`{}`), Rule: rule}
	if rule != allocgroup.RuleNone {
		p.RuleLevel = &level
	}
	_, err := allocgroup.New(pool).CreateGroup(context.Background(), p)
	require.NoError(t, err)
	return p.Uuid
}

// checkGroups asserts the all-or-nothing rules on every group of pool's
// database: an active group has exactly count members, each active and
// holding its own node, all in one rack when the rule is required; a group
// in error has none; no node serves two members. It returns how many
// groups are active and in error.
func checkGroups(t *testing.T, pool *pgxpool.Pool) (active, failed int) {
	t.Helper()
	ctx := context.Background()
	rows, err := pool.Query(ctx, `
		SELECT g.uuid, g.state, g.count, g.rule, coalesce(g.last_error, ''),
		       (SELECT count(*) FROM allocations a WHERE a.group_id = g.id)::int,
		       (SELECT count(*) FROM allocations a JOIN nodes n ON n.id = a.node_id
		         WHERE a.group_id = g.id AND a.state = 'active' AND n.allocation_id = a.id
		           AND n.instance_uuid = a.uuid)::int,
		       (SELECT count(DISTINCT n.extra->>'rack') FROM allocations a JOIN nodes n ON n.id = a.node_id
		         WHERE a.group_id = g.id)::int
		  FROM allocation_groups g ORDER BY g.id`)
	require.NoError(t, err)
	defer rows.Close()
	for rows.Next() {
		var u uuid.UUID
		var state, rule, lastErr string
		var count, members, held, racks int
		require.NoError(t, rows.Scan(&u, &state, &count, &rule, &lastErr, &members, &held, &racks))
		switch allocgroup.State(state) {
		case allocgroup.StateActive:
			active++
			require.Equal(t, count, members, "group %s: members", u)
			require.Equal(t, count, held, "group %s: members holding their nodes", u)
			if rule == allocgroup.RuleRequired {
				require.Equal(t, 1, racks, "group %s spans racks", u)
			}
		case allocgroup.StateError:
			failed++
			require.Zero(t, members, "group %s in error has members", u)
			require.NotEmpty(t, lastErr, "group %s in error has no last_error", u)
		default:
			t.Fatalf("group %s still %s", u, state)
		}
	}
	require.NoError(t, rows.Err())
	require.Zero(t, dbtest.Count(t, pool, `SELECT count(*) FROM (SELECT node_id FROM allocations
		WHERE node_id IS NOT NULL GROUP BY node_id HAVING count(*) > 1) d`), "a node serves two allocations")
	require.Empty(t, dbtest.Broken(t, pool))
	return active, failed
}

// TestGroupsRaceOnLimitedRoom: 100 groups of mixed sizes (2 to 16, required
// rack) and 60 single allocations race on 12 racks of 16 nodes (192 nodes,
// far fewer than asked) through three conductors. Every group ends fully
// active inside one rack or in error with no member; no node serves two;
// every single allocation and every group finishes.
func TestGroupsRaceOnLimitedRoom(t *testing.T) {
	t.Parallel()
	pool := dbtest.New(t)
	rackedFleet(t, pool, 12, 16, "gpu")
	startConductors(t, pool, Config{Workers: 4, ClaimBatch: 4, LockedNodeWait: 3 * time.Second}, 3)
	sizes := []int{2, 4, 8, 12, 16}
	var wg sync.WaitGroup
	for i := range 100 {
		wg.Go(func() {
			rule := allocgroup.RuleRequired
			if i%10 == 0 {
				rule = allocgroup.RuleNone
			}
			addGroup(t, pool, sizes[rand.IntN(len(sizes))], "gpu", rule, "rack")
		})
		if i%5 == 0 {
			wg.Go(func() { dbtest.Allocation(t, pool, dbtest.AllocationSpec{ResourceClass: "gpu"}) })
			wg.Go(func() { dbtest.Allocation(t, pool, dbtest.AllocationSpec{ResourceClass: "gpu"}) })
			wg.Go(func() { dbtest.Allocation(t, pool, dbtest.AllocationSpec{ResourceClass: "gpu"}) })
		}
	}
	wg.Wait()
	dbtest.WaitFor(t, 60*time.Second, "every group and allocation to finish", func() bool {
		return dbtest.Count(t, pool, `SELECT (SELECT count(*) FROM allocation_groups WHERE state = 'allocating')
			+ (SELECT count(*) FROM allocations WHERE state = 'allocating')`) == 0
	})
	active, failed := checkGroups(t, pool)
	require.Equal(t, 100, active+failed)
	require.Positive(t, active)
	require.Positive(t, failed, "the fleet has room for far fewer than 100 groups")
	singles := dbtest.Count(t, pool, `SELECT count(*) FROM allocations WHERE group_id IS NULL AND state = 'active'`)
	t.Logf("groups: %d active, %d in error; singles: %d active of 60; nodes held: %d of 192", active, failed, singles,
		dbtest.Count(t, pool, `SELECT count(*) FROM nodes WHERE allocation_id IS NOT NULL`))
}

// TestGroupNoFitExplains: a group no rack can take goes to error at once
// with a per-domain explanation and nothing reserved.
func TestGroupNoFitExplains(t *testing.T) {
	t.Parallel()
	pool := dbtest.New(t)
	rackedFleet(t, pool, 3, 6, "gpu")
	start(t, pool, Config{Hostname: "c0", PollInterval: time.Hour})
	u := addGroup(t, pool, 8, "gpu", allocgroup.RuleRequired, "rack")
	dbtest.WaitFor(t, 10*time.Second, "the group to fail", func() bool {
		return dbtest.Count(t, pool, `SELECT count(*) FROM allocation_groups WHERE state = 'error'`) == 1
	})
	var lastErr string
	require.NoError(t, pool.QueryRow(context.Background(),
		`SELECT last_error FROM allocation_groups WHERE uuid = $1`, u).Scan(&lastErr))
	require.Contains(t, lastErr, "Failed to process allocation group "+u.String())
	require.Contains(t, lastErr, "8")
	t.Log(lastErr)
	require.Zero(t, dbtest.Count(t, pool, `SELECT count(*) FROM allocations`))
}

// TestGroupGrowAndShrink: a required group grows in its rack; a member
// released lowers the count; a grow that cannot fit returns the group to
// active with its members and a last_error.
func TestGroupGrowAndShrink(t *testing.T) {
	t.Parallel()
	pool := dbtest.New(t)
	ctx := context.Background()
	rackedFleet(t, pool, 2, 8, "gpu")
	start(t, pool, Config{Hostname: "c0", PollInterval: 50 * time.Millisecond})
	u := addGroup(t, pool, 4, "gpu", allocgroup.RuleRequired, "rack")
	q := allocgroup.New(pool)
	waitState := func(want allocgroup.State) allocgroup.View {
		var v allocgroup.View
		dbtest.WaitFor(t, 10*time.Second, "group "+want.String(), func() bool {
			var err error
			v, err = allocgroup.NewStore(pool).Get(ctx, u.String())
			require.NoError(t, err)
			return v.State == want
		})
		return v
	}
	v := waitState(allocgroup.StateActive)
	require.Len(t, v.Members, 4)
	_, err := q.GrowGroup(ctx, allocgroup.GrowGroupParams{ID: v.ID, Count: 7})
	require.NoError(t, err)
	v = waitState(allocgroup.StateActive)
	require.Len(t, v.Members, 7)
	checkGroups(t, pool)
	// Release one member the way DELETE /v1/allocations does.
	_, err = pool.Exec(ctx, `SELECT metalloc_deallocate(a.id) FROM allocations a WHERE a.uuid = $1`, v.Members[0].UUID)
	require.NoError(t, err)
	v = waitState(allocgroup.StateActive)
	require.EqualValues(t, 6, v.Count)
	require.Len(t, v.Members, 6)
	// 6 in a rack of 8: growing by 3 cannot fit under required rack.
	_, err = q.GrowGroup(ctx, allocgroup.GrowGroupParams{ID: v.ID, Count: 9})
	require.NoError(t, err)
	dbtest.WaitFor(t, 10*time.Second, "the failed grow to settle", func() bool {
		return dbtest.Count(t, pool, `SELECT count(*) FROM allocation_groups WHERE state = 'active' AND last_error IS NOT NULL`) == 1
	})
	v, err = allocgroup.NewStore(pool).Get(ctx, u.String())
	require.NoError(t, err)
	require.EqualValues(t, 6, v.Count)
	require.Len(t, v.Members, 6)
	checkGroups(t, pool)
}

// TestGroupTakeoverResumeRelease: groups owned by a dead conductor are
// taken over and placed; a conductor resumes its own unfinished group at
// start; a clean stop hands an owned allocating group back unowned.
func TestGroupTakeoverResumeRelease(t *testing.T) {
	t.Parallel()
	pool := dbtest.New(t)
	ctx := context.Background()
	rackedFleet(t, pool, 4, 8, "gpu")
	dead := dbtest.Conductor(t, pool, "dead", time.Hour, true)
	crashed := dbtest.Conductor(t, pool, "crashed", time.Hour, true)
	own := func(u uuid.UUID, c int64) {
		_, err := pool.Exec(ctx, `UPDATE allocation_groups SET conductor_affinity = $1 WHERE uuid = $2`, c, u)
		require.NoError(t, err)
	}
	// Release (before any conductor runs): a stopping conductor hands
	// its allocating group back, unowned.
	id := dbtest.Conductor(t, pool, "stopping", 0, true)
	rows := NewRows(pool)
	g := addGroup(t, pool, 2, "gpu", allocgroup.RuleNone, "")
	own(g, id)
	n, err := rows.Release(ctx, id)
	require.NoError(t, err)
	require.EqualValues(t, 1, n)
	require.Zero(t, dbtest.Count(t, pool, `SELECT count(*) FROM allocation_groups WHERE conductor_affinity = $1`, id))
	for range 2 {
		own(addGroup(t, pool, 4, "gpu", allocgroup.RuleRequired, "rack"), dead)
	}
	own(addGroup(t, pool, 3, "gpu", allocgroup.RuleRequired, "rack"), crashed)
	cfg := fastHA
	cfg.Hostname = "live"
	start(t, pool, cfg)
	cfg.Hostname = "crashed"
	start(t, pool, cfg)
	dbtest.WaitFor(t, 20*time.Second, "the dead conductor's groups taken over and the crashed one's resumed", func() bool {
		return dbtest.Count(t, pool, `SELECT count(*) FROM allocation_groups WHERE state = 'active'`) == 4
	})
	require.Zero(t, dbtest.Count(t, pool, `SELECT count(*) FROM allocation_groups WHERE conductor_affinity = $1`, dead))
	checkGroups(t, pool)
}

// TestGroupsPlacementBackend: a conductor running the placement backend,
// in-process (local) and over HTTP, reserves a group inside one rack with
// a Placement allocation per member on its node; a group that does not
// fit (counting a node free in the database but taken in Placement) goes
// to error with nothing claimed anywhere; releasing the members lets the
// resource tracker remove their Placement allocations, as for single
// allocations.
func TestGroupsPlacementBackend(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{backend.PlacementModeLocal, backend.PlacementModeHTTP} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			pool, pc := placementFleet(t)
			start(t, pool, placementConfig(pc, mode))
			g1 := addGroup(t, pool, 3, "gpu", allocgroup.RuleRequired, "rack")
			dbtest.WaitFor(t, 10*time.Second, "the group to be active", func() bool {
				return dbtest.Count(t, pool, `SELECT count(*) FROM allocation_groups WHERE state = 'active'`) == 1
			})
			checkGroups(t, pool)
			checkPlacementMembers(t, pool, pc, 3)

			// One node of the other, untouched rack is taken in Placement
			// by someone else: that rack offers 3, the first 1; a group of
			// 4 fits nowhere, and one of 5 neither.
			var other uuid.UUID
			require.NoError(t, pool.QueryRow(ctx, `
				SELECT n.uuid FROM nodes n WHERE n.allocation_id IS NULL AND n.extra->>'rack' NOT IN
				  (SELECT m.extra->>'rack' FROM nodes m WHERE m.allocation_id IS NOT NULL) LIMIT 1`).Scan(&other))
			stranger, err := takeInPlacement(ctx, pc, other)
			require.NoError(t, err)
			addGroup(t, pool, 4, "gpu", allocgroup.RuleRequired, "rack")
			dbtest.WaitFor(t, 10*time.Second, "the second group to fail", func() bool {
				return dbtest.Count(t, pool, `SELECT count(*) FROM allocation_groups WHERE state = 'error'`) == 1
			})
			var lastErr string
			require.NoError(t, pool.QueryRow(ctx, `SELECT last_error FROM allocation_groups WHERE state = 'error'`).Scan(&lastErr))
			require.Contains(t, lastErr, "no rack has 4 free nodes")
			require.Contains(t, lastErr, "; of the 5 nodes free in the database, Placement offers 4")
			checkGroups(t, pool)
			checkPlacementMembers(t, pool, pc, 3)

			// Releasing the members (as DELETE of the group does) releases
			// their Placement allocations in the same transaction
			// (metalloc_placement_release, as for singles): nothing is
			// left for the tracker.
			_, err = pool.Exec(ctx, `SELECT metalloc_deallocate(a.id) FROM allocations a
				JOIN allocation_groups g ON g.id = a.group_id WHERE g.uuid = $1`, g1)
			require.NoError(t, err)
			require.Zero(t, dbtest.Count(t, pool, `SELECT count(*) FROM allocation_groups WHERE uuid = $1`, g1))
			checkPlacementMembers(t, pool, pc, 0)
			require.Zero(t, dbtest.Count(t, pool, `SELECT count(*) FROM placement_claims`))
			tr := NewTracker(pool, pc, TrackerConfig{SyncSchedule: SyncOff, ClaimGrace: time.Nanosecond}, zaptest.NewLogger(t))
			st, err := tr.Sync(ctx)
			require.NoError(t, err)
			require.Zero(t, st.ClaimsReleased)
			a, err := pc.GetAllocations(ctx, stranger)
			require.NoError(t, err)
			require.Len(t, a.Allocations, 1, "someone else's allocation left alone")
		})
	}
}

// TestGroupsPlacementUnknownTrait: a group asking for a trait the nodes
// have in the database but Placement does not know (400 to the candidates
// query) fails with the no-fit message, saying that Placement offers none
// of the free nodes; nothing is claimed.
func TestGroupsPlacementUnknownTrait(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, pc := placementFleet(t)
	_, err := pool.Exec(ctx, `INSERT INTO node_traits (node_id, trait) SELECT id, 'CUSTOM_FAST' FROM nodes`)
	require.NoError(t, err)
	start(t, pool, placementConfig(pc, backend.PlacementModeLocal))
	rack := "rack"
	_, err = allocgroup.New(pool).CreateGroup(ctx, allocgroup.CreateGroupParams{Uuid: uuid.New(), Count: 2,
		ResourceClass: "gpu", Traits: []string{"CUSTOM_FAST"}, Extra: json.RawMessage(`{}`),
		Rule: allocgroup.RuleRequired, RuleLevel: &rack})
	require.NoError(t, err)
	dbtest.WaitFor(t, 10*time.Second, "the group to fail", func() bool {
		return dbtest.Count(t, pool, `SELECT count(*) FROM allocation_groups WHERE state = 'error'`) == 1
	})
	var lastErr string
	require.NoError(t, pool.QueryRow(ctx, `SELECT last_error FROM allocation_groups`).Scan(&lastErr))
	require.Contains(t, lastErr, "no rack has 2 free nodes of gpu with CUSTOM_FAST")
	require.Contains(t, lastErr, "; of the 8 nodes free in the database, Placement offers 0")
	checkGroups(t, pool)
	checkPlacementMembers(t, pool, pc, 0)
}

// TestGroupsPlacementGrowRelease: on the placement backend, growing a
// group claims the new members in Placement in the group's rack, and
// releasing one member releases its Placement allocation in the same
// transaction while the others keep theirs.
func TestGroupsPlacementGrowRelease(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{backend.PlacementModeLocal, backend.PlacementModeHTTP} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			pool, pc := placementFleet(t)
			start(t, pool, placementConfig(pc, mode))
			g := addGroup(t, pool, 2, "gpu", allocgroup.RuleRequired, "rack")
			active := func(count int) func() bool {
				return func() bool {
					return dbtest.Count(t, pool, `SELECT count(*) FROM allocation_groups WHERE state = 'active' AND count = $1`, count) == 1
				}
			}
			dbtest.WaitFor(t, 10*time.Second, "the group to be active", active(2))
			var id int64
			require.NoError(t, pool.QueryRow(ctx, `SELECT id FROM allocation_groups WHERE uuid = $1`, g).Scan(&id))
			_, err := allocgroup.New(pool).GrowGroup(ctx, allocgroup.GrowGroupParams{ID: id, Count: 4})
			require.NoError(t, err)
			dbtest.WaitFor(t, 10*time.Second, "the grown group to be active", active(4))
			checkGroups(t, pool)
			checkPlacementMembers(t, pool, pc, 4)

			_, err = pool.Exec(ctx, `SELECT metalloc_deallocate(min(id)) FROM allocations WHERE group_id = $1`, id)
			require.NoError(t, err)
			checkGroups(t, pool)
			checkPlacementMembers(t, pool, pc, 3)
			tr := NewTracker(pool, pc, TrackerConfig{SyncSchedule: SyncOff, ClaimGrace: time.Nanosecond}, zaptest.NewLogger(t))
			st, err := tr.Sync(ctx)
			require.NoError(t, err)
			require.Zero(t, st.ClaimsReleased, "released with the member")
			checkPlacementMembers(t, pool, pc, 3)
		})
	}
}

// TestGroupsPlacementRace: two conductors on the placement backend race
// 24 groups of 1 to 5 nodes (required rack) for 4 racks of 4 nodes: every
// group ends active inside one rack or in error with nothing reserved, and
// Placement holds exactly one allocation per member, on its node.
func TestGroupsPlacementRace(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{backend.PlacementModeLocal, backend.PlacementModeHTTP} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			pool := dbtest.New(t)
			rackedFleet(t, pool, 4, 4, "gpu")
			pc := pbPlacement(t, pool, "gpu")
			cfg := placementConfig(pc, mode)
			cfg.Workers = 4
			startConductors(t, pool, cfg, 2)
			rng := rand.New(rand.NewPCG(7, 7))
			for range 24 {
				addGroup(t, pool, 1+rng.IntN(5), "gpu", allocgroup.RuleRequired, "rack")
			}
			dbtest.WaitFor(t, 30*time.Second, "every group to finish", func() bool {
				return dbtest.Count(t, pool, `SELECT count(*) FROM allocation_groups WHERE state = 'allocating'`) == 0
			})
			active, failed := checkGroups(t, pool)
			require.Equal(t, 24, active+failed)
			require.NotZero(t, active)
			t.Logf("%d groups active, %d in error", active, failed)
			checkPlacementMembers(t, pool, pc, dbtest.Count(t, pool, `SELECT count(*) FROM allocations WHERE group_id IS NOT NULL`))
		})
	}
}

// placementFleet is a database with 2 racks of 4 gpu nodes and a
// metalloc-placement on it mirroring them (pbPlacement).
func placementFleet(t *testing.T) (*pgxpool.Pool, *client.Client) {
	t.Helper()
	pool := dbtest.New(t)
	rackedFleet(t, pool, 2, 4, "gpu")
	return pool, pbPlacement(t, pool, "gpu")
}

// placementConfig is a conductor "pb" on the placement backend pc in mode.
func placementConfig(pc *client.Client, mode string) Config {
	return Config{Hostname: "pb", PollInterval: 100 * time.Millisecond, Backend: BackendPlacement,
		Placement: pc, PlacementMode: mode}
}

// takeInPlacement has a stranger consumer (not metalloc's) take gpu node
// in Placement, and returns it.
func takeInPlacement(ctx context.Context, pc *client.Client, node uuid.UUID) (uuid.UUID, error) {
	stranger := uuid.New()
	return stranger, pc.PutAllocations(ctx, stranger, client.Claim{ProjectID: "p", UserID: "u",
		Request: client.AllocationRequest{Allocations: map[uuid.UUID]client.ProviderResources{
			node: {Resources: client.Resources{"CUSTOM_GPU": 1}}}}})
}

// interfering is a group Placement claimer that, on its first claim,
// either has someone else take the plan's first node in Placement just
// before (taken: Placement answers 409), or lets the claim succeed and
// then makes the reservation fail: in mode local an error in its
// transaction, over HTTP the first node goes into maintenance before the
// transaction locks it.
type interfering struct {
	backend.GroupPlacement
	pool     *pgxpool.Pool
	pc       *client.Client
	taken    bool
	once     sync.Once
	stranger uuid.UUID
	node     uuid.UUID
}

var errInjected = errors.New("injected failure after the Placement claim")

func (w *interfering) ClaimGroup(ctx context.Context, tx pgx.Tx, owner *string, offer backend.GroupOffer,
	members []backend.GroupMember) error {
	first := false
	w.once.Do(func() { first = true })
	if !first {
		return w.GroupPlacement.ClaimGroup(ctx, tx, owner, offer, members)
	}
	w.node = members[0].Node
	if w.taken {
		var err error
		if w.stranger, err = takeInPlacement(ctx, w.pc, w.node); err != nil {
			return err
		}
		return w.GroupPlacement.ClaimGroup(ctx, tx, owner, offer, members)
	}
	if err := w.GroupPlacement.ClaimGroup(ctx, tx, owner, offer, members); err != nil {
		return err
	}
	if tx != nil {
		return errInjected
	}
	_, err := w.pool.Exec(ctx, `UPDATE nodes SET maintenance = true WHERE uuid = $1`, w.node)
	return err
}

// TestGroupsPlacementClaimUndone: a plan whose claim Placement refuses
// (409: a node taken there after the candidates were read) falls back to
// the other rack, and a claim whose reservation fails (an error in the
// local transaction; over HTTP a claimed node that cannot be locked any
// more) is removed from Placement again: in every case the group ends
// active with exactly its members' allocations in Placement.
func TestGroupsPlacementClaimUndone(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{backend.PlacementModeLocal, backend.PlacementModeHTTP} {
		for _, taken := range []bool{true, false} {
			name := mode + "/failed-tx"
			if taken {
				name = mode + "/taken"
			}
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				ctx := context.Background()
				pool, pc := placementFleet(t)
				svc, err := NewService(placementConfig(pc, mode), pool, zaptest.NewLogger(t))
				require.NoError(t, err)
				r := svc.groups.(*backend.GroupReserver)
				w := &interfering{GroupPlacement: r.Placement, pool: pool, pc: pc, taken: taken}
				r.Placement = w
				runService(t, svc)
				addGroup(t, pool, 4, "gpu", allocgroup.RuleRequired, "rack")
				dbtest.WaitFor(t, 10*time.Second, "the group to be active", func() bool {
					return dbtest.Count(t, pool, `SELECT count(*) FROM allocation_groups WHERE state = 'active'`) == 1
				})
				checkGroups(t, pool)
				checkPlacementMembers(t, pool, pc, 4)
				used := dbtest.Count(t, pool, `SELECT count(*) FROM nodes WHERE uuid = $1 AND allocation_id IS NOT NULL`, w.node)
				if taken || mode == backend.PlacementModeHTTP {
					require.Zero(t, used, "the node taken in Placement or put in maintenance is not a member's")
				}
				if taken {
					a, err := pc.GetAllocations(ctx, w.stranger)
					require.NoError(t, err)
					require.Len(t, a.Allocations, 1)
				}
			})
		}
	}
}

// checkPlacementMembers asserts that Placement holds exactly one
// allocation per group member, on the member's node (under the member's
// uuid, logged in placement_claims), and nothing else of the conductor's:
// want members in all.
func checkPlacementMembers(t *testing.T, pool *pgxpool.Pool, pc *client.Client, want int) {
	t.Helper()
	ctx := context.Background()
	rows, err := pool.Query(ctx, `SELECT a.uuid, n.uuid FROM allocations a JOIN nodes n ON n.id = a.node_id
		WHERE a.group_id IS NOT NULL AND a.state = 'active'`)
	require.NoError(t, err)
	members := map[uuid.UUID]uuid.UUID{}
	for rows.Next() {
		var m, n uuid.UUID
		require.NoError(t, rows.Scan(&m, &n))
		members[m] = n
	}
	require.NoError(t, rows.Err())
	require.Len(t, members, want)
	for m, n := range members {
		cur, err := pc.GetAllocations(ctx, m)
		require.NoError(t, err)
		require.Len(t, cur.Allocations, 1, "member %s", m)
		require.Contains(t, cur.Allocations, n, "member %s", m)
		require.Equal(t, backend.PlacementUserID, cur.UserID)
	}
	require.Equal(t, want, dbtest.Count(t, pool, `SELECT count(*) FROM placement_claims`))
	require.Equal(t, want, dbtest.Count(t, pool, `
		SELECT count(*) FROM placement.consumers c WHERE c.user_id = $1
		   AND EXISTS (SELECT 1 FROM placement.allocations x WHERE x.consumer_id = c.id)`, backend.PlacementUserID))
}

// TestGroupFreedNodesAreSeen: nodes freed right after a reservation (the
// shared candidate read still shows them taken) serve the next group: "no
// fit" is only concluded on a fresh read.
func TestGroupFreedNodesAreSeen(t *testing.T) {
	t.Parallel()
	pool := dbtest.New(t)
	ctx := context.Background()
	rackedFleet(t, pool, 1, 4, "gpu")
	start(t, pool, Config{Hostname: "c0", PollInterval: 50 * time.Millisecond})
	for round := range 3 {
		addGroup(t, pool, 4, "gpu", allocgroup.RuleRequired, "rack")
		dbtest.WaitFor(t, 10*time.Second, "the group to finish", func() bool {
			return dbtest.Count(t, pool, `SELECT count(*) FROM allocation_groups WHERE state <> 'allocating'`) == 1
		})
		require.Equal(t, 1, dbtest.Count(t, pool, `SELECT count(*) FROM allocation_groups WHERE state = 'active'`),
			"round %d", round)
		// Release every member at once: the last one takes the group.
		_, err := pool.Exec(ctx, `SELECT metalloc_deallocate(id) FROM allocations`)
		require.NoError(t, err)
		require.Zero(t, dbtest.Count(t, pool, `SELECT count(*) FROM allocation_groups`))
	}
}
