package e2e

import (
	"context"
	"fmt"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gophercloud/gophercloud/v2/openstack/baremetal/v1/allocations"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/metalloc/metalloc/db/dbtest"
	"github.com/metalloc/metalloc/devstack"
)

// livenessEnv keeps the default expiry and takeover schedule (60 s each):
// within these tests only the liveness lock can make a killed conductor
// dead, so a takeover within seconds is the lock's.
var livenessEnv = []string{
	"METALLOC_LOG_LEVEL=debug",
	"METALLOC_CONDUCTOR_HEARTBEAT_TIMEOUT=60s",
	"METALLOC_CONDUCTOR_TAKEOVER_SCHEDULE=@every 60s",
	"METALLOC_CONDUCTOR_SHUTDOWN_GRACE=1s",
	"METALLOC_CONDUCTOR_LOCKED_NODE_WAIT=120s",
}

// livenessTakeoverBound is the generous bound the kill tests assert: the
// rows of a SIGKILLed conductor belong to a live process within it. The
// expiry rule alone takes heartbeat_timeout plus up to a takeover period
// (60 s + 60 s here); the figures measured are logged, not asserted.
const livenessTakeoverBound = 15 * time.Second

// TestKilledConductorTakenOverBySeconds is issue 41's must-show in its
// shape: three conductors, a burst of 1,000 allocations, one conductor
// (the one owning the most unfinished rows) SIGKILLed a third of the way
// through and replaced by a conductor of a new hostname, 20 times. Every
// allocation ends active, no node is held twice, and the killed
// conductor's rows belong to a live process within seconds of the kill
// (p50, p99 and max logged; livenessTakeoverBound asserted). About 50 s
// on two cores.
func TestKilledConductorTakenOverBySeconds(t *testing.T) {
	killConductorsInBursts(t, false)
}

// TestKilledConductorRestartedUnderSameHostname: the same, the killed
// conductor restarted at once under its hostname (as systemd does): it
// registers at once (its liveness lock is free), and its rows are its own
// again or taken over by a peer.
func TestKilledConductorRestartedUnderSameHostname(t *testing.T) {
	killConductorsInBursts(t, true)
}

// killRounds is issue 41's kill test: kills rounds of burst allocations.
const (
	killRounds = 20
	killBurst  = 1000
)

func killConductorsInBursts(t *testing.T, restart bool) {
	if testing.Short() {
		t.Skip("process HA test")
	}
	// Info, not debug: the debug lines of 20,000 allocations cost the
	// conductors CPU the test measures.
	env := append(slices.Clone(livenessEnv), "METALLOC_LOG_LEVEL=info")
	stack, client, pool := haStackEnv(t, 3, env)
	dbtest.Nodes(t, pool, killRounds*killBurst, "gold")
	killInBursts(t, killRun{
		stack: stack, pool: pool, rounds: killRounds, burst: killBurst, blocked: 15, clients: 8,
		restart: func(int) bool { return restart },
		post: func(rc string) error {
			_, err := allocations.Create(context.Background(), client, allocations.CreateOpts{ResourceClass: rc}).Extract()
			return err
		},
	})
}

// killRun is one kill test: its stack and database, its rounds of a burst
// of allocations of class gold each (nodes enrolled by the caller), blocked
// allocations per round waiting for nodes the test holds locked (0: none;
// the burst's own backlog is what the victim owns), how many clients post
// the burst, whether round k restarts the victim under its hostname, how
// an allocation is posted, and what is checked after each round.
type killRun struct {
	stack                           *devstack.Stack
	pool                            *pgxpool.Pool
	rounds, burst, blocked, clients int
	restart                         func(round int) bool
	post                            func(rc string) error
	check                           func(t *testing.T)
}

// killInBursts runs k: in each round, blocked allocations claimed first,
// then the burst, and a third of the way through, the conductor owning the
// most unfinished rows SIGKILLed and replaced (a new hostname, or
// restarted under its own); from the kill, a poll every 20 ms for the
// moment no row it owned at its death is owned by the dead process. Every
// allocation ends active and the invariants hold after each round. The
// delays' p50, p99 and max are logged; each must be within
// livenessTakeoverBound.
func killInBursts(t *testing.T, k killRun) {
	ctx := context.Background()
	pool := k.pool
	// A peer judges a conductor by its lock only once it has seen it held
	// (a poll every 500 ms): one killed in the first moments after it
	// registered is judged by its expiry (conductor/doc.go, "Liveness").
	time.Sleep(time.Second)
	live := map[string]*devstack.Process{}
	for _, p := range k.stack.Conductors {
		live[p.Name] = p
	}
	var delays []time.Duration
	for round := range k.rounds {
		release := func() {}
		if k.blocked > 0 {
			// Rows that wait for nodes the test holds locked: every
			// conductor owns unfinished rows when one dies.
			rc := fmt.Sprintf("blocked%d", round)
			dbtest.Nodes(t, pool, k.blocked, rc)
			release = lockNodes(t, pool, rc)
			for range k.blocked {
				require.NoError(t, k.post(rc))
			}
			dbtest.WaitFor(t, 20*time.Second, "the blocked allocations claimed", func() bool {
				return queryInt(t, pool, `SELECT count(*) FROM allocations WHERE resource_class = $1 AND conductor_affinity IS NOT NULL`, rc) == k.blocked
			})
		}
		var wg sync.WaitGroup
		for c := range k.clients {
			wg.Add(1)
			go func() {
				defer wg.Done()
				n := k.burst / k.clients
				if c < k.burst%k.clients {
					n++
				}
				for range n {
					if err := k.post("gold"); err != nil {
						t.Errorf("client %d: %v", c, err)
						return
					}
				}
			}()
		}
		dbtest.WaitFor(t, 60*time.Second, "a third of the burst posted", func() bool {
			return queryInt(t, pool, `SELECT count(*) FROM allocations WHERE resource_class = 'gold'`) >= round*k.burst+k.burst/3
		})
		var victim string
		var victimID int64
		var owned []int64
		dbtest.WaitFor(t, 30*time.Second, "a conductor owning unfinished allocations", func() bool {
			err := pool.QueryRow(ctx, `
				SELECT c.hostname, c.id FROM conductors c JOIN allocations a ON a.conductor_affinity = c.id
				 WHERE a.state = 'allocating' AND metalloc_conductor_alive(c.online, c.expires_at)
				 GROUP BY c.hostname, c.id ORDER BY count(*) DESC, c.hostname LIMIT 1`).Scan(&victim, &victimID)
			return err == nil
		})
		require.NoError(t, live[victim].Signal(syscall.SIGKILL))
		killedAt := time.Now()
		rows, err := pool.Query(ctx, `SELECT id FROM allocations WHERE state = 'allocating' AND conductor_affinity = $1`, victimID)
		require.NoError(t, err)
		owned, err = pgx.CollectRows(rows, pgx.RowTo[int64])
		require.NoError(t, err)
		// Taken over: no row the victim owned at its death is still owned
		// by the dead process (its id with the registration it had),
		// polled from the kill on, while the replacement starts.
		takenOver := make(chan time.Duration, 1)
		go func() {
			deadline := killedAt.Add(livenessTakeoverBound + 5*time.Second)
			for time.Now().Before(deadline) {
				var left int
				err := pool.QueryRow(ctx, `
					SELECT count(*) FROM allocations a JOIN conductors c ON c.id = a.conductor_affinity
					 WHERE a.id = ANY($1) AND a.state = 'allocating' AND c.id = $2
					   AND c.started_at < $3::timestamptz`, owned, victimID, killedAt).Scan(&left)
				if err == nil && left == 0 {
					takenOver <- time.Since(killedAt)
					return
				}
				time.Sleep(20 * time.Millisecond)
			}
			takenOver <- -1
		}()
		_ = live[victim].Wait(10 * time.Second)
		delete(live, victim)

		restart := k.restart(round)
		name := victim
		if !restart {
			name = fmt.Sprintf("replacement%d", round)
		}
		p, err := k.stack.StartConductor(name)
		require.NoError(t, err)
		live[name] = p

		delay := <-takenOver
		if delay < 0 || delay > livenessTakeoverBound {
			logMatching(t, k.stack.Conductors, "liveness", "crashed", "takeover", "took over")
			t.Fatalf("round %d: the rows %s owned at its SIGKILL not all owned by a live process %s later", round, victim, livenessTakeoverBound)
		}
		delays = append(delays, delay)
		t.Logf("round %d: SIGKILLed %s owning %d unfinished allocations; its rows owned by a live process %s later (restart under the same hostname: %v)",
			round, victim, len(owned), delay.Round(time.Millisecond), restart)
		if restart {
			dbtest.WaitFor(t, livenessTakeoverBound, "the restarted conductor registered", func() bool {
				return queryInt(t, pool, `SELECT count(*) FROM conductors WHERE id = $1 AND online
					AND started_at > $2::timestamptz`, victimID, killedAt) == 1
			})
		}

		wg.Wait()
		release()
		dbtest.WaitFor(t, 2*time.Minute, "every allocation finished", func() bool {
			return queryInt(t, pool, `SELECT count(*) FROM allocations WHERE state = 'allocating'`) == 0
		})
		checkInvariants(t, pool)
		require.Equal(t, (round+1)*(k.burst+k.blocked), queryInt(t, pool, `SELECT count(*) FROM allocations WHERE state = 'active'`))
		if k.check != nil {
			k.check(t)
		}
	}
	slices.Sort(delays)
	p := func(q float64) time.Duration {
		return delays[int(math.Ceil(q*float64(len(delays))))-1].Round(time.Millisecond)
	}
	t.Logf("takeover after SIGKILL over %d kills: p50 %s, p99 %s, max %s (issue 41: within 2 s at p99; expiry rule alone: heartbeat_timeout 60s + takeover period up to 60s)",
		len(delays), p(0.5), p(0.99), delays[len(delays)-1].Round(time.Millisecond))
}

// logMatching logs the lines of procs' logs that contain any of words.
func logMatching(t *testing.T, procs []*devstack.Process, words ...string) {
	t.Helper()
	for _, p := range procs {
		raw, err := os.ReadFile(p.LogPath)
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(raw), "\n") {
			for _, w := range words {
				if strings.Contains(line, w) {
					t.Logf("%s: %s", p.Name, line)
					break
				}
			}
		}
	}
}

// TestIronicFrontKilledConductorTakenOver is the kill test in front of the
// real Ironic (issue 41): three conductors, the one owning the most
// unfinished allocations SIGKILLed a third of the way through a burst,
// replaced by a new hostname and restarted under its own in turn. Ironic
// makes about 15 allocations/s on two cores, so 4 kills in bursts of 50
// (about 4 s of Ironic's work each; a round, with the restart and the
// rows settled in Ironic, about 15 s), not 20 of 1,000: 162 s with
// Ironic's start (about 40 s) and enrolment on two cores shared with other
// work, where 6 kills of 60 took 187 s. The expiry and the takeover
// schedule are 60 s, so a takeover within seconds is the liveness lock's.
// Every allocation ends active in both systems on the same node
// (agree); the delays' p50, p99 and max are logged. It runs in parallel
// with the other Ironic tests: its figures include their load.
// METALLOC_TEST_IRONIC_KILLS and METALLOC_TEST_IRONIC_KILL_BURST change
// the rounds and the burst for a measurement outside make test (the
// issue's 20 kills: METALLOC_TEST_IRONIC_KILLS=20).
func TestIronicFrontKilledConductorTakenOver(t *testing.T) {
	if testing.Short() {
		t.Skip("process HA test")
	}
	t.Parallel()
	rounds, burst := envInt(t, "METALLOC_TEST_IRONIC_KILLS", 4), envInt(t, "METALLOC_TEST_IRONIC_KILL_BURST", 50)
	ctx := context.Background()
	ir := startIronic(t, devstack.IronicOptions{})
	tmpl := enrollClass(t, ir, "gold", 1)
	_, err := ir.CloneNodes(ctx, tmpl[0], rounds*burst-1, "gold-c")
	require.NoError(t, err)
	url := dbtest.NewURL(t)
	stack, client := startStackOpts(t, 3, devstack.Options{DatabaseURL: url, Env: ironicEnv(ir,
		"METALLOC_LOG_LEVEL=info", "METALLOC_CONDUCTOR_HEARTBEAT_INTERVAL=10s",
		"METALLOC_CONDUCTOR_HEARTBEAT_TIMEOUT=60s", "METALLOC_CONDUCTOR_TAKEOVER_SCHEDULE=@every 60s")})
	pool, err := pgxpool.New(ctx, url)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	waitFree(t, pool, "gold", rounds*burst)
	killInBursts(t, killRun{
		stack: stack, pool: pool, rounds: rounds, burst: burst, clients: 4,
		restart: func(round int) bool { return round%2 == 1 },
		post: func(rc string) error {
			_, err := allocations.Create(ctx, client, allocations.CreateOpts{ResourceClass: rc}).Extract()
			return err
		},
	})
	agree(t, ir, pool, "gold")
}

// envInt is the positive whole number in the environment variable name,
// or def when it is unset; anything else fails the test.
func envInt(t *testing.T, name string, def int) int {
	s := os.Getenv(name)
	if s == "" {
		return def
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 {
		t.Fatalf("%s=%q: want a positive whole number", name, s)
	}
	return n
}
