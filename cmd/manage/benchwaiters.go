package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"go.uber.org/zap"

	"github.com/metalloc/metalloc/db"
	"github.com/metalloc/metalloc/devstack"
	"github.com/metalloc/metalloc/loadgen"
	"github.com/metalloc/metalloc/web"
)

// waitersCmd is `metalloc-manage bench waiters`: what 10,000 open
// Prefer: wait requests (or event streams) cost metalloc-api.
func waitersCmd() *cobra.Command {
	var o loadgen.WaitersOptions
	c := &cobra.Command{
		Use:   "waiters",
		Short: "open N Prefer: wait requests (or event streams) on metalloc-api, report its memory per waiter and the fan-out time",
		Long: "Starts metalloc-api on DATABASE_URL (a fresh database) with no conductor, creates N allocations\n" +
			"(which stay allocating), opens N GET /v1/allocations/{uuid} with Prefer: wait (--mode wait) or N\n" +
			"GET /v1/allocations/events (--mode stream), each on its own connection, and reads the API's\n" +
			"/metrics before and after: RSS, Go heap and stacks, goroutines, per waiter. Then one UPDATE\n" +
			"fails every allocation (wait) or one allocation is created (stream), and it times until the\n" +
			"last client got its answer. Needs N file descriptors here and in metalloc-api (ulimit -n).\n" +
			"With --mode wait it refuses a database where a conductor is alive (it would process the\n" +
			"allocations, which must stay allocating). SIGINT or SIGTERM stops the metalloc-api it started.",
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, log, err := loadDatabase(cmd)
			if err != nil {
				return err
			}
			var lim syscall.Rlimit
			if syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim) == nil && lim.Cur < uint64(o.N+256) {
				return fmt.Errorf("ulimit -n is %d; %d waiters need about %d (in this process and in metalloc-api)", lim.Cur, o.N, o.N+256)
			}
			ctx, stop := signalContext(cmd)
			defer stop()
			// No conductor: the allocations must stay allocating. (Starting
			// one and stopping it failed on a database where a conductor
			// of its name was alive: Start waits for its conductors, and
			// that one was refused.)
			stack, err := devstack.Start(ctx, devstack.Options{DatabaseURL: cfg.Database.URL, NoConductors: true, Log: log,
				Env: []string{"METALLOC_API_MAX_WAIT=" + (o.Wait + 30*time.Second).String()}})
			if err != nil {
				return err
			}
			defer stack.Stop(context.WithoutCancel(ctx))
			if o.Mode != "stream" {
				// Another conductor on this database would fail the
				// allocations at once (no node has their class): no
				// waiter would stay open, the bench would wait for
				// them in vain.
				alive, err := aliveConductors(ctx, stack.APIURL)
				if err != nil {
					return err
				}
				if len(alive) > 0 {
					return fmt.Errorf("conductor %s is alive on this database and would process the bench's allocations, "+
						"which must stay allocating: stop it or use a fresh database (metalloc-manage dev exec -- ...)",
						strings.Join(alive, ", "))
				}
			}
			pool, err := db.Open(ctx, cfg.Database.URL, db.PoolOptions{MaxConns: 2, ApplicationName: "metalloc-bench"})
			if err != nil {
				return err
			}
			defer pool.Close()
			o.APIURL = stack.APIURL
			o.Progress = func(phase string, done, total int) {
				log.Info("progress", zap.String("phase", phase), zap.Int("done", done), zap.Int("total", total))
			}
			o.Release = func(ctx context.Context) error {
				if o.Mode == "stream" {
					_, err := pool.Exec(ctx, `INSERT INTO allocations (uuid, resource_class) VALUES (gen_random_uuid(), 'waiters-bench')`)
					return err
				}
				_, err := pool.Exec(ctx, `UPDATE allocations SET state = 'error', last_error = 'bench waiters', updated_at = now()
					WHERE state = 'allocating' AND resource_class = 'waiters-bench'`)
				return err
			}
			r, err := loadgen.RunWaiters(ctx, o)
			if ctx.Err() != nil {
				return context.Cause(ctx)
			}
			if err != nil {
				return err
			}
			fmt.Println(r)
			return nil
		},
	}
	c.Flags().IntVar(&o.N, "n", 10000, "waiters (or streams) to open")
	c.Flags().StringVar(&o.Mode, "mode", "wait", "wait (Prefer: wait GETs) or stream (event streams)")
	c.Flags().DurationVar(&o.Wait, "wait", 60*time.Second, "Prefer: wait asked")
	return c
}

// aliveConductors names the conductors metalloc-api at apiURL reports
// alive (GET /v1/conductors, its alive field).
func aliveConductors(ctx context.Context, apiURL string) ([]string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, apiURL+"/v1/conductors?limit=1000", nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set(web.IronicVersionHeader, "1.82")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("listing conductors: %w", err)
	}
	defer resp.Body.Close()
	var body struct {
		Conductors []struct {
			Hostname string `json:"hostname"`
			Alive    bool   `json:"alive"`
		} `json:"conductors"`
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("listing conductors: %s", resp.Status)
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		return nil, fmt.Errorf("listing conductors: %w", err)
	}
	var alive []string
	for _, c := range body.Conductors {
		if c.Alive {
			alive = append(alive, c.Hostname)
		}
	}
	return alive, nil
}

// signalContext is cmd's context, ended by SIGINT or SIGTERM: a command
// that started processes returns through its deferred Stop, which stops
// them, instead of dying with them left running (devstack also gives
// each a parent-death signal, for SIGKILL).
func signalContext(cmd *cobra.Command) (context.Context, context.CancelFunc) {
	return signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
}
