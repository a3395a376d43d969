package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/cobra"

	"github.com/metalloc/metalloc/conductor"
)

// conductorCmd is "conductor list" and "conductor drain HOST".
func conductorCmd() *cobra.Command {
	c := &cobra.Command{Use: "conductor", Short: "list the conductors; drain one (hand its rows over while it keeps running)"}
	var out *output
	list := &cobra.Command{
		Use:   "list [-f table|json|yaml|value] [-c COLUMN]...",
		Short: "every registered conductor: its state (alive, draining, drained, dead, stopped) and the rows it holds",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := out.check(); err != nil {
				return err
			}
			return withSchema(cmd, func(ctx context.Context, pool *pgxpool.Pool) error {
				rows, err := conductor.ConductorStates(ctx, pool)
				if err != nil {
					return err
				}
				docs := make([]map[string]any, len(rows))
				for i, r := range rows {
					docs[i] = map[string]any{
						"hostname": r.Hostname, "conductor_group": r.ConductorGroup, "version": r.Version,
						"state": conductorState(r), "heartbeat_age": heartbeatAge(r), "held": r.Held,
					}
				}
				return out.list(cmd.OutOrStdout(), []column{
					{heading: "Hostname", field: "hostname"}, {heading: "Conductor Group", field: "conductor_group"},
					{heading: "State", field: "state"}, {heading: "Held", field: "held"},
					{heading: "Heartbeat Age", field: "heartbeat_age"}, {heading: "Version", field: "version"},
				}, docs)
			})
		},
	}
	out = addOutputFlags(list)

	var timeout time.Duration
	drain := &cobra.Command{
		Use:   "drain HOST [--timeout D]",
		Short: "ask the live conductor HOST to hand its rows over, and wait until it holds none",
		Long: "Asks the live conductor registered as HOST (on whatever host it runs) to drain: it stops\n" +
			"claiming and taking over, finishes its in-flight allocations within its conductor.shutdown_grace,\n" +
			"hands the rest back unowned (its peers claim them at once, as after a SIGTERM) and stays\n" +
			"running, idle (state drained in `conductor list`), until it is stopped; restarting it ends the\n" +
			"drain. Prints a line while it drains, then how many rows it handed over. Exits 1 for an unknown,\n" +
			"offline (stopped) or dead HOST, if HOST restarts or dies meanwhile, or if it still holds rows\n" +
			"after --timeout (it keeps draining).",
		Example: "  metalloc-manage conductor drain cond-1 --timeout 2m",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if timeout <= 0 {
				return errors.New("--timeout must be positive")
			}
			return withSchema(cmd, func(ctx context.Context, pool *pgxpool.Pool) error {
				return drainConductor(ctx, pool, args[0], timeout, drainPoll, cmd.OutOrStdout())
			})
		},
	}
	drain.Flags().DurationVar(&timeout, "timeout", 5*time.Minute, "how long to wait for the conductor to hold no rows")
	c.AddCommand(list, drain)
	return c
}

// conductorState is a conductor's state as `conductor list` prints it:
// stopped (offline), dead (online, expired), else alive, draining or
// drained.
func conductorState(r conductor.ConductorStatesRow) string {
	switch {
	case !r.Online:
		return "stopped"
	case !r.Alive:
		return "dead"
	case r.Drained:
		return "drained"
	case r.DrainRequested:
		return "draining"
	}
	return "alive"
}

// heartbeatAge is the seconds since r's last heartbeat, to 0.1 s, while it
// is online (nil once stopped).
func heartbeatAge(r conductor.ConductorStatesRow) any {
	if !r.Online {
		return nil
	}
	return float64(int64(r.HeartbeatAge*10)) / 10
}

// `conductor drain` reads the drain's progress every drainPoll and prints
// a line when the rows held change, and at least every drainProgressEvery.
const (
	drainPoll          = 250 * time.Millisecond
	drainProgressEvery = 5 * time.Second
)

// drainConductor asks conductor host to drain (conductor.RequestDrain) and
// waits, printing progress to w, until it has drained and holds no rows:
// an error if it cannot drain (unknown, offline, dead), restarts or dies
// meanwhile, or still holds rows after timeout.
func drainConductor(ctx context.Context, pool *pgxpool.Pool, host string, timeout, poll time.Duration, w io.Writer) error {
	req, err := conductor.RequestDrain(ctx, pool, host)
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "conductor %s asked to drain; waiting until it holds no rows (timeout %s)\n", host, timeout)
	start := time.Now()
	deadline := start.Add(timeout)
	lastHeld, lastLine := int64(-1), time.Time{}
	for {
		s, err := conductor.ReadDrain(ctx, pool, req)
		if err != nil {
			return fmt.Errorf("reading conductor %q: %w", host, err)
		}
		switch {
		case s.Restarted || !s.Requested:
			return fmt.Errorf("conductor %q was registered again (restarted) while draining: the drain ended with the process asked", host)
		case !s.Alive:
			return fmt.Errorf("conductor %q died or stopped while draining: its peers take over what it held", host)
		case s.Drained && s.Held == 0:
			fmt.Fprintf(w, "conductor %s drained in %s: %d rows handed over to the other conductors; it claims nothing until restarted\n",
				host, time.Since(start).Round(time.Millisecond), s.Released)
			return nil
		}
		if s.Held != lastHeld || time.Since(lastLine) >= drainProgressEvery {
			fmt.Fprintf(w, "conductor %s draining: holds %d allocating rows (%s)\n", host, s.Held, time.Since(start).Round(time.Second))
			lastHeld, lastLine = s.Held, time.Now()
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("conductor %q still holds %d rows after %s (it goes on draining; is it a release without drain?)", host, s.Held, timeout)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(poll):
		}
	}
}
