package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"go.uber.org/zap"

	"github.com/metalloc/metalloc/db"
	"github.com/metalloc/metalloc/db/embedded"
	"github.com/metalloc/metalloc/devstack"
	"github.com/metalloc/metalloc/loadgen"
)

// soakCmd is `metalloc-manage soak`: the long-running reliability check of
// docs/operations.md ("Soak"), not part of the tests.
func soakCmd() *cobra.Command {
	var o loadgen.SoakOptions
	c := &cobra.Command{
		Use:   "soak",
		Short: "steady allocate/delete traffic for --duration while conductors are SIGKILLed and PostgreSQL restarts; checks nothing leaks or is lost",
		Long: "Starts a private PostgreSQL (or uses DATABASE_URL, then without the restart), metalloc-api and two\n" +
			"conductors, enrolls --nodes nodes through the API, then for --duration keeps --rate allocations/s\n" +
			"flowing (create, wait until active, delete) from --concurrency clients on loopback, SIGKILLs a random\n" +
			"conductor and starts a replacement every --kill-every, restarts PostgreSQL once at half time, and\n" +
			"samples every process's RSS and goroutines every --sample-every. At the end it checks that no\n" +
			"acknowledged allocation is lost and nothing is double-booked, prints first and last samples per\n" +
			"process, and exits 1 on FAIL.",
		RunE: func(cmd *cobra.Command, _ []string) error {
			_, log, err := load(cmd)
			if err != nil {
				return err
			}
			ctx, stop := signalContext(cmd)
			defer stop()
			url, cluster, stopDB, err := soakDatabase(ctx, log)
			if err != nil {
				return err
			}
			defer stopDB()
			if _, err := db.Migrate(ctx, url, log); err != nil {
				return err
			}
			stack, err := devstack.Start(ctx, devstack.Options{
				DatabaseURL: url, Conductors: 2, Log: log,
				Env: []string{"METALLOC_LOG_LEVEL=warn", "METALLOC_CONDUCTOR_HEARTBEAT_INTERVAL=2s",
					"METALLOC_CONDUCTOR_HEARTBEAT_TIMEOUT=10s", "METALLOC_CONDUCTOR_TAKEOVER_SCHEDULE=@every 5s"},
			})
			if err != nil {
				return err
			}
			defer stack.Stop(context.WithoutCancel(ctx))
			pool, err := db.Open(ctx, url, db.PoolOptions{MaxConns: 2, ApplicationName: "metalloc-soak"})
			if err != nil {
				return err
			}
			defer pool.Close()

			o.Load.APIURL, o.Load.Log = stack.APIURL, log
			o.Load.Progress = func(phase string, done, total int) {
				if phase == "enroll" {
					log.Info("progress", zap.String("phase", phase), zap.Int("done", done), zap.Int("total", total))
				}
			}
			generation := 0
			o.KillConductor = func(context.Context) (string, error) {
				i, err := loadgen.PickConductor(len(stack.Conductors))
				if err != nil {
					return "", err
				}
				victim := stack.Conductors[i]
				_ = victim.Signal(syscall.SIGKILL)
				_ = victim.Wait(10 * time.Second)
				stack.Conductors = append(stack.Conductors[:i], stack.Conductors[i+1:]...)
				generation++
				// A replacement under a new name: the dead one's rows are
				// taken over once its heartbeat is older than the timeout.
				name := fmt.Sprintf("soak-%d", generation)
				if _, err := stack.StartConductor(name); err != nil {
					return "", err
				}
				return fmt.Sprintf("SIGKILLed %s (pid %d), started %s", victim.Name, victim.Cmd.Process.Pid, name), nil
			}
			if cluster != nil {
				o.RestartDatabase = cluster.Restart
			} else {
				log.Warn("DATABASE_URL is set: PostgreSQL is not restarted during the soak")
			}
			o.Processes = func() []loadgen.SoakProcess {
				ps := []loadgen.SoakProcess{{Name: "metalloc-api", PID: stack.API.Cmd.Process.Pid, MetricsURL: stack.APIURL + "/metrics"}}
				for _, c := range stack.Conductors {
					ps = append(ps, loadgen.SoakProcess{Name: c.Name, PID: c.Cmd.Process.Pid, MetricsURL: c.MetricsURL})
				}
				return ps
			}
			o.Check = func(ctx context.Context, kept []string) (lost, broken int, err error) {
				deadline := time.Now().Add(2 * time.Minute)
				for {
					var n int
					if err := pool.QueryRow(ctx, `SELECT count(*) FROM allocations WHERE state = 'allocating'`).Scan(&n); err != nil {
						return 0, 0, err
					}
					if n == 0 || time.Now().After(deadline) {
						break
					}
					time.Sleep(200 * time.Millisecond)
				}
				if err := pool.QueryRow(ctx, `SELECT count(*) FROM unnest($1::uuid[]) k(u)
					WHERE NOT EXISTS (SELECT 1 FROM allocations a WHERE a.uuid = k.u AND a.state IN ('active', 'error'))`,
					kept).Scan(&lost); err != nil {
					return 0, 0, err
				}
				err = pool.QueryRow(ctx, `SELECT
					(SELECT count(*) FROM (SELECT node_id FROM allocations WHERE node_id IS NOT NULL
					                        GROUP BY node_id HAVING count(*) > 1) d)
					+ (SELECT count(*) FROM allocations a LEFT JOIN nodes n ON n.id = a.node_id
					    WHERE a.state = 'active' AND (n.id IS NULL OR n.allocation_id IS DISTINCT FROM a.id
					                                  OR n.instance_uuid IS DISTINCT FROM a.uuid))
					+ (SELECT count(*) FROM nodes n LEFT JOIN allocations a ON a.id = n.allocation_id
					    WHERE n.allocation_id IS NOT NULL AND (a.state IS DISTINCT FROM 'active' OR a.node_id IS DISTINCT FROM n.id))`).Scan(&broken)
				return lost, broken, err
			}
			res, err := loadgen.Soak(ctx, o)
			if err != nil {
				return err
			}
			report, pass := res.Report()
			fmt.Print(report)
			if !pass {
				return fmt.Errorf("soak failed")
			}
			return nil
		},
	}
	c.Flags().DurationVar(&o.Duration, "duration", 30*time.Minute, "how long the traffic runs")
	c.Flags().DurationVar(&o.KillEvery, "kill-every", 3*time.Minute, "SIGKILL and replace a conductor this often (0: never)")
	c.Flags().DurationVar(&o.SampleEvery, "sample-every", 30*time.Second, "sample RSS and goroutines this often")
	c.Flags().Float64Var(&o.Rate, "rate", 40, "allocations per second aimed at")
	c.Flags().IntVar(&o.Load.Nodes, "nodes", 2000, "nodes to enroll through the API")
	c.Flags().IntVar(&o.Load.Concurrency, "concurrency", 8, "concurrent clients")
	return c
}

// soakDatabase is DATABASE_URL's server (no cluster: it is not restarted),
// or a private cluster the soak may restart.
func soakDatabase(ctx context.Context, log *zap.Logger) (url string, cluster *embedded.Cluster, stop func(), err error) {
	if u := os.Getenv("DATABASE_URL"); u != "" {
		return u, nil, func() {}, nil
	}
	dir, err := os.MkdirTemp(os.TempDir(), "metalloc-soak-")
	if err != nil {
		return "", nil, nil, err
	}
	if err := os.Chmod(dir, 0o755); err != nil { // the server user reaches pg/ through it
		return "", nil, nil, err
	}
	cluster, err = embedded.Start(ctx, embedded.Options{DataDir: filepath.Join(dir, "pg"), Log: log})
	if err != nil {
		_ = os.RemoveAll(dir)
		return "", nil, nil, err
	}
	stop = func() {
		_ = cluster.Stop(context.Background())
		_ = os.RemoveAll(dir)
	}
	if err := cluster.CreateDatabase(ctx, "metalloc"); err != nil {
		stop()
		return "", nil, nil, err
	}
	return cluster.URL("metalloc"), cluster, stop, nil
}
