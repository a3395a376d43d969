package e2e

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gophercloud/gophercloud/v2/openstack/baremetal/v1/allocations"
	"github.com/jackc/pgx/v5"
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

// TestKilledConductorTakenOverBySeconds: three conductors serve bursts of
// allocations; three times, the one owning the most unfinished rows is
// SIGKILLed in the middle of a burst and replaced by a conductor of a new
// hostname. Its rows are taken over by the live ones within seconds, every
// allocation ends active and no node is held twice.
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

func killConductorsInBursts(t *testing.T, restart bool) {
	if testing.Short() {
		t.Skip("process HA test")
	}
	stack, client, pool := haStackEnv(t, 3, livenessEnv)
	ctx := context.Background()
	// A peer judges a conductor by its lock only once it has seen it held
	// (a poll every 500 ms): one killed in the first moments after it
	// registered is judged by its expiry (conductor/doc.go, "Liveness").
	time.Sleep(time.Second)

	const rounds, burst, blocked = 3, 100, 15
	dbtest.Nodes(t, pool, rounds*burst, "gold")
	live := map[string]*devstack.Process{}
	for _, p := range stack.Conductors {
		live[p.Name] = p
	}
	post := func(rc string) {
		_, err := allocations.Create(ctx, client, allocations.CreateOpts{ResourceClass: rc}).Extract()
		require.NoError(t, err)
	}
	var delays []time.Duration
	for round := range rounds {
		// Rows that wait for nodes the test holds locked: every conductor
		// owns unfinished rows when one dies.
		rc := fmt.Sprintf("blocked%d", round)
		dbtest.Nodes(t, pool, blocked, rc)
		release := lockNodes(t, pool, rc)
		for range blocked {
			post(rc)
		}
		dbtest.WaitFor(t, 20*time.Second, "the blocked allocations claimed", func() bool {
			return queryInt(t, pool, `SELECT count(*) FROM allocations WHERE resource_class = $1 AND conductor_affinity IS NOT NULL`, rc) == blocked
		})

		var wg sync.WaitGroup
		for c := range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range burst / 4 {
					_, err := allocations.Create(ctx, client, allocations.CreateOpts{ResourceClass: "gold"}).Extract()
					if err != nil {
						t.Errorf("client %d: %v", c, err)
						return
					}
				}
			}()
		}
		dbtest.WaitFor(t, 30*time.Second, "a third of the burst posted", func() bool {
			return queryInt(t, pool, `SELECT count(*) FROM allocations WHERE resource_class = 'gold'`) >= round*burst+burst/3
		})
		var victim string
		require.NoError(t, pool.QueryRow(ctx, `
			SELECT c.hostname FROM conductors c JOIN allocations a ON a.conductor_affinity = c.id
			 WHERE a.state = 'allocating' AND c.online GROUP BY c.hostname ORDER BY count(*) DESC, c.hostname LIMIT 1`).Scan(&victim))
		victimID := conductorID(t, pool, victim)
		require.NoError(t, live[victim].Signal(syscall.SIGKILL))
		killedAt := time.Now()
		_ = live[victim].Wait(10 * time.Second)
		delete(live, victim)
		rows, err := pool.Query(ctx, `SELECT id FROM allocations WHERE state = 'allocating' AND conductor_affinity = $1`, victimID)
		require.NoError(t, err)
		owned, err := pgx.CollectRows(rows, pgx.RowTo[int64])
		require.NoError(t, err)
		require.NotEmpty(t, owned)

		name := victim
		if !restart {
			name = fmt.Sprintf("replacement%d", round)
		}
		p, err := stack.StartConductor(name)
		require.NoError(t, err)
		live[name] = p

		// Taken over: no row the victim owned at its death is still owned
		// by the dead process (its id with the registration it had).
		dbtest.WaitFor(t, livenessTakeoverBound, "the killed conductor's rows owned by a live process", func() bool {
			return queryInt(t, pool, `
				SELECT count(*) FROM allocations a JOIN conductors c ON c.id = a.conductor_affinity
				 WHERE a.id = ANY($1) AND a.state = 'allocating' AND c.id = $2
				   AND c.started_at < now() - make_interval(secs => $3)`,
				owned, victimID, time.Since(killedAt).Seconds()) == 0
		}, func() { logMatching(t, stack.Conductors, "liveness", "crashed", "takeover", "took over") })
		delay := time.Since(killedAt)
		delays = append(delays, delay)
		t.Logf("round %d: SIGKILLed %s owning %d unfinished allocations; its rows owned by a live process %s later (restart under the same hostname: %v)",
			round, victim, len(owned), delay.Round(time.Millisecond), restart)
		if restart {
			dbtest.WaitFor(t, livenessTakeoverBound, "the restarted conductor registered", func() bool {
				return queryInt(t, pool, `SELECT count(*) FROM conductors WHERE id = $1 AND online
					AND started_at > now() - make_interval(secs => $2)`, victimID, time.Since(killedAt).Seconds()) == 1
			})
		}

		wg.Wait()
		release()
		dbtest.WaitFor(t, 60*time.Second, "every allocation finished", func() bool {
			return queryInt(t, pool, `SELECT count(*) FROM allocations WHERE state = 'allocating'`) == 0
		})
		checkInvariants(t, pool)
		require.Equal(t, (round+1)*(burst+blocked), queryInt(t, pool, `SELECT count(*) FROM allocations WHERE state = 'active'`))
	}
	slices.Sort(delays)
	t.Logf("takeover after SIGKILL over %d kills: min %s, max %s (expiry rule alone: heartbeat_timeout 60s + takeover period up to 60s)",
		len(delays), delays[0].Round(time.Millisecond), delays[len(delays)-1].Round(time.Millisecond))
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
