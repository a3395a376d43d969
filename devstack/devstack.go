// Package devstack starts and stops a local metalloc system as child
// processes: one metalloc-api and N metalloc-conductor, on a given database.
// `metalloc-manage dev up`, the allocation benchmark and the end-to-end tests
// use it.
package devstack

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"go.uber.org/zap"

	"github.com/metalloc/metalloc/internal/child"
	"github.com/metalloc/metalloc/internal/freeport"
)

// Options describes the stack to start.
type Options struct {
	// BinDir holds metalloc-api and metalloc-conductor. Default: the
	// directory of the running executable.
	BinDir string
	// DatabaseURL is passed to every process. Required.
	DatabaseURL string
	// Conductors is how many conductors to start (default 2).
	Conductors int
	// NoConductors starts no conductor (Conductors is ignored): the
	// allocations created stay allocating, and a database where conductors
	// of the same names are alive is no obstacle (Start would wait for
	// its own conductors, which such a database refuses).
	NoConductors bool
	// ConductorPrefix names them: <prefix>1, <prefix>2, ... (default
	// "conductor-").
	ConductorPrefix string
	// ConductorMetricsPort is the first conductor's metrics port on
	// 127.0.0.1: the n-th conductor started (StartConductor too) listens
	// on ConductorMetricsPort+n-1, so that `dev up --metrics-port` keeps
	// every listener in a range its user chose. 0: a free port each.
	ConductorMetricsPort int
	// APIListen is the API's address:port (default 127.0.0.1 on a free port).
	APIListen string
	// Placement also starts metalloc-placement, on PlacementListen (default
	// 127.0.0.1 on a free port).
	Placement       bool
	PlacementListen string
	// PlacementOnly starts metalloc-placement alone (no API, no
	// conductors): BinDir, DatabaseURL, PlacementListen, LogDir, Env and
	// Log apply, the rest is ignored.
	PlacementOnly bool
	// AllocationBackend is the conductors' conductor.allocation_backend:
	// "" or "database" (the default), or "placement". With "placement" the
	// conductors get METALLOC_CONDUCTOR_ALLOCATION_BACKEND=placement,
	// METALLOC_PLACEMENT_BACKEND_ENDPOINT and a short
	// METALLOC_PLACEMENT_BACKEND_SYNC_DELAY (50ms); Env overrides them.
	AllocationBackend string
	// PlacementBackendEndpoint is the Placement service the placement
	// backend uses, e.g. an OpenStack Placement (StartOpenStackPlacement).
	// "" means the stack's own metalloc-placement, which is then started
	// even without Placement, with randomized allocation candidates so that
	// racing conductors spread over the nodes.
	PlacementBackendEndpoint string
	// LogDir receives one log file per process (default: a temp dir).
	LogDir string
	// Env is extra environment (KEY=VALUE) for every process, e.g.
	// METALLOC_CONDUCTOR_WORKERS=32. The APIs' shutdown_delay is 0 unless
	// it sets METALLOC_API_SHUTDOWN_DELAY or
	// METALLOC_PLACEMENT_SHUTDOWN_DELAY.
	Env []string
	// Log reports progress.
	Log *zap.Logger
}

// Process is one child process of the stack.
type Process struct {
	Name    string
	Cmd     *exec.Cmd
	LogPath string
	// MetricsURL is a conductor's Prometheus endpoint ("" for the API).
	MetricsURL string
	done       chan error
}

// exitedError says that p exited during the start, with the last lines of
// its log (where a failed start says why) and the log's path.
func (p *Process) exitedError() error {
	const keep = 10
	raw, _ := os.ReadFile(p.LogPath)
	lines := strings.Split(strings.TrimRight(string(raw), "\n"), "\n")
	if len(lines) > keep {
		lines = lines[len(lines)-keep:]
	}
	return fmt.Errorf("%s exited; the end of %s:\n%s", p.Name, p.LogPath, strings.Join(lines, "\n"))
}

// Stack is a running set of metalloc processes.
type Stack struct {
	// APIURL is the API's base URL, e.g. http://127.0.0.1:6385.
	APIURL     string
	API        *Process
	Conductors []*Process
	// PlacementURL and Placement are set when Options.Placement was.
	PlacementURL string
	Placement    *Process
	// BackendPlacementURL is the Placement the conductors allocate through
	// when Options.AllocationBackend is "placement" ("" otherwise).
	BackendPlacementURL string
	opts                Options
	conductorEnv        []string
	// started is when Start began (conductors registered before are stale).
	started time.Time
}

// Start launches the API and the conductors (or, with
// Options.PlacementOnly, metalloc-placement alone) and waits until they
// answer. On error everything started is stopped.
func Start(ctx context.Context, opts Options) (*Stack, error) {
	if opts.DatabaseURL == "" {
		return nil, errors.New("devstack: DatabaseURL is required")
	}
	switch {
	case opts.NoConductors:
		opts.Conductors = 0
	case opts.Conductors <= 0:
		opts.Conductors = 2
	}
	if err := opts.setDefaults(); err != nil {
		return nil, err
	}
	if opts.PlacementOnly {
		return startPlacement(ctx, opts)
	}
	if opts.APIListen == "" {
		port, err := freeport.Pick()
		if err != nil {
			return nil, err
		}
		opts.APIListen = "127.0.0.1:" + strconv.Itoa(port)
	}
	var placementEnv []string
	switch opts.AllocationBackend {
	case "", "database":
	case "placement":
		if opts.PlacementBackendEndpoint == "" {
			opts.Placement = true
			placementEnv = []string{"METALLOC_PLACEMENT_RANDOMIZE_ALLOCATION_CANDIDATES=true"}
		}
	default:
		return nil, fmt.Errorf("devstack: unknown allocation backend %q (database or placement)", opts.AllocationBackend)
	}
	if err := checkFree("metalloc-api", opts.APIListen); err != nil {
		return nil, err
	}
	if opts.Placement && opts.PlacementListen != "" {
		if err := checkFree("metalloc-placement", opts.PlacementListen); err != nil {
			return nil, err
		}
	}
	s := &Stack{APIURL: "http://" + opts.APIListen, opts: opts, started: time.Now()}
	api, err := s.spawnEnv("metalloc-api", "api", noShutdownDelay, "--api.listen", opts.APIListen)
	if err != nil {
		return nil, err
	}
	s.API = api
	if opts.Placement {
		if err := s.spawnPlacement(placementEnv); err != nil {
			s.Stop(context.WithoutCancel(ctx))
			return nil, err
		}
	}
	if opts.AllocationBackend == "placement" {
		s.BackendPlacementURL = opts.PlacementBackendEndpoint
		if s.BackendPlacementURL == "" {
			// The conductors' resource tracker starts at once: let it find
			// metalloc-placement answering.
			if err := waitHTTP(ctx, s.Placement, s.PlacementURL); err != nil {
				s.Stop(context.WithoutCancel(ctx))
				return nil, err
			}
			s.BackendPlacementURL = s.PlacementURL
		}
		s.conductorEnv = []string{
			"METALLOC_CONDUCTOR_ALLOCATION_BACKEND=placement",
			"METALLOC_PLACEMENT_BACKEND_ENDPOINT=" + s.BackendPlacementURL,
			"METALLOC_PLACEMENT_BACKEND_SYNC_DELAY=50ms",
		}
	}
	var hostnames []string
	if opts.ConductorPrefix == "" {
		opts.ConductorPrefix = "conductor-"
	}
	for i := range opts.Conductors {
		hostnames = append(hostnames, fmt.Sprintf("%s%d", opts.ConductorPrefix, i+1))
		if _, err := s.StartConductor(hostnames[i]); err != nil {
			s.Stop(context.WithoutCancel(ctx))
			return nil, err
		}
	}
	if err := waitHTTP(ctx, s.API, s.APIURL); err != nil {
		s.Stop(context.WithoutCancel(ctx))
		return nil, err
	}
	// Nodes can be enrolled once a conductor serves their driver (as in
	// Ironic): the stack is up when every conductor has registered.
	if err := s.waitConductors(ctx, hostnames, s.started); err != nil {
		s.Stop(context.WithoutCancel(ctx))
		return nil, err
	}
	if s.Placement != nil {
		if err := waitHTTP(ctx, s.Placement, s.PlacementURL); err != nil {
			s.Stop(context.WithoutCancel(ctx))
			return nil, err
		}
	}
	opts.Log.Info("metalloc stack up", zap.String("api", s.APIURL), zap.Int("conductors", opts.Conductors),
		zap.String("backend", opts.AllocationBackend), zap.String("backend_placement", s.BackendPlacementURL),
		zap.String("logs", opts.LogDir))
	return s, nil
}

// RestartConductors stops every conductor (SIGTERM, as Stop does) and
// starts the same hostnames again with extraEnv (KEY=VALUE, after the
// stack's Env, as StartConductor takes it), then waits until they have
// registered. For a bench comparing conductor settings on one fleet
// (metalloc-manage bench ironic --max-in-flight); run it while no
// allocation is in flight.
func (s *Stack) RestartConductors(ctx context.Context, extraEnv ...string) error {
	var hostnames []string
	for _, p := range s.Conductors {
		hostnames = append(hostnames, p.Name)
	}
	stopAll(s.Conductors)
	s.Conductors = nil
	since := time.Now()
	for _, h := range hostnames {
		if _, err := s.StartConductor(h, extraEnv...); err != nil {
			return err
		}
	}
	return s.waitConductors(ctx, hostnames, since)
}

// waitConductors waits until every conductor of hostnames has registered
// (its conductors row online, started at since or later), or one of them
// exited.
func (s *Stack) waitConductors(ctx context.Context, hostnames []string, since time.Time) error {
	if len(hostnames) == 0 {
		return nil
	}
	conn, err := pgx.Connect(ctx, s.opts.DatabaseURL)
	if err != nil {
		return fmt.Errorf("devstack: waiting for the conductors: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		for _, p := range s.Conductors {
			if p.Exited() {
				return p.exitedError()
			}
		}
		var n int
		err := conn.QueryRow(ctx, `SELECT count(*) FROM conductors
			WHERE hostname = ANY($1) AND online AND started_at >= $2`, hostnames, since.Add(-time.Second)).Scan(&n)
		if err != nil {
			return fmt.Errorf("devstack: waiting for the conductors: %w", err)
		}
		if n == len(hostnames) {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
	return fmt.Errorf("devstack: the conductors did not register within 60s; see %s", s.opts.LogDir)
}

// setDefaults fills in Log (no-op), BinDir (the running executable's
// directory) and LogDir (a new temp dir) when unset.
func (o *Options) setDefaults() error {
	if o.Log == nil {
		o.Log = zap.NewNop()
	}
	if o.BinDir == "" {
		exe, err := os.Executable()
		if err != nil {
			return err
		}
		o.BinDir = filepath.Dir(exe)
	}
	if o.LogDir == "" {
		dir, err := os.MkdirTemp("", "metalloc-logs-")
		if err != nil {
			return err
		}
		o.LogDir = dir
	}
	return nil
}

// noShutdownDelay is the APIs' environment before the stack's Env: no
// load balancer probes a dev stack's /readyz, so at SIGTERM the APIs stop
// accepting at once instead of after api.shutdown_delay (Env may set it).
var noShutdownDelay = []string{"METALLOC_API_SHUTDOWN_DELAY=0s", "METALLOC_PLACEMENT_SHUTDOWN_DELAY=0s"}

// spawnPlacement starts metalloc-placement on opts.PlacementListen (a free
// loopback port when empty) with env before the stack's Env.
func (s *Stack) spawnPlacement(env []string) error {
	if s.opts.PlacementListen == "" {
		port, err := freeport.Pick()
		if err != nil {
			return err
		}
		s.opts.PlacementListen = "127.0.0.1:" + strconv.Itoa(port)
	}
	p, err := s.spawnEnv("metalloc-placement", "placement", append(noShutdownDelay[:len(noShutdownDelay):len(noShutdownDelay)], env...),
		"--placement.listen", s.opts.PlacementListen)
	if err != nil {
		return err
	}
	s.Placement, s.PlacementURL = p, "http://"+s.opts.PlacementListen
	return nil
}

// startPlacement is Start with Options.PlacementOnly: metalloc-placement
// alone, answering.
func startPlacement(ctx context.Context, opts Options) (*Stack, error) {
	if opts.PlacementListen != "" {
		if err := checkFree("metalloc-placement", opts.PlacementListen); err != nil {
			return nil, err
		}
	}
	s := &Stack{opts: opts}
	if err := s.spawnPlacement(nil); err != nil {
		return nil, err
	}
	if err := waitHTTP(ctx, s.Placement, s.PlacementURL); err != nil {
		s.Stop(context.WithoutCancel(ctx))
		return nil, err
	}
	return s, nil
}

// StartConductor starts one more conductor with the given hostname, its
// metrics listener on a loopback port (Process.MetricsURL: the next one
// from Options.ConductorMetricsPort when set, else a free one), and
// extraEnv (KEY=VALUE) after the stack's Env. With the placement backend
// its backend settings come before the stack's Env, which overrides them.
func (s *Stack) StartConductor(hostname string, extraEnv ...string) (*Process, error) {
	port := s.opts.ConductorMetricsPort + len(s.Conductors)
	if s.opts.ConductorMetricsPort == 0 {
		var err error
		if port, err = freeport.Pick(); err != nil {
			return nil, err
		}
	}
	listen := "127.0.0.1:" + strconv.Itoa(port)
	env := append([]string{"METALLOC_CONDUCTOR_METRICS_LISTEN=" + listen}, extraEnv...)
	p, err := s.spawnEnv("metalloc-conductor", hostname, s.conductorEnv, env, "--conductor.hostname", hostname)
	if err != nil {
		return nil, err
	}
	p.MetricsURL = "http://" + listen + "/metrics"
	s.Conductors = append(s.Conductors, p)
	return p, nil
}

// spawnEnv starts bin (in BinDir) as the process name, logging to its
// file in LogDir, with args (strings are arguments, []string environment
// after the stack's Env) and baseEnv placed before the stack's Env.
func (s *Stack) spawnEnv(bin, name string, baseEnv []string, args ...any) (*Process, error) {
	var env []string
	var argv []string
	for _, a := range args {
		switch v := a.(type) {
		case string:
			argv = append(argv, v)
		case []string:
			env = append(env, v...)
		}
	}
	logPath := filepath.Join(s.opts.LogDir, name+".log")
	f, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(filepath.Join(s.opts.BinDir, bin), argv...)
	cmd.Env = append(append(append(append(os.Environ(), "DATABASE_URL="+s.opts.DatabaseURL), baseEnv...), s.opts.Env...), env...)
	cmd.Stdout, cmd.Stderr = f, f
	p := &Process{Name: name, Cmd: cmd, LogPath: logPath, done: make(chan error, 1)}
	if err := child.Start(cmd, func(err error) { p.done <- err; f.Close() }); err != nil {
		f.Close()
		return nil, fmt.Errorf("starting %s: %w", bin, err)
	}
	s.opts.Log.Debug("started", zap.String("process", name), zap.Int("pid", cmd.Process.Pid))
	return p, nil
}

// Exited reports whether p has exited.
func (p *Process) Exited() bool {
	select {
	case err := <-p.done:
		p.done <- err
		return true
	default:
		return false
	}
}

// Signal sends sig to p.
func (p *Process) Signal(sig os.Signal) error { return p.Cmd.Process.Signal(sig) }

// Wait waits up to d for p to exit and returns its exit error.
func (p *Process) Wait(d time.Duration) error {
	select {
	case err := <-p.done:
		p.done <- err
		return err
	case <-time.After(d):
		return fmt.Errorf("%s did not exit within %s", p.Name, d)
	}
}

// Stop sends SIGTERM to every process, waits up to 30s each, then kills.
func (s *Stack) Stop(ctx context.Context) {
	all := append([]*Process{}, s.Conductors...)
	for _, p := range []*Process{s.API, s.Placement} {
		if p != nil {
			all = append(all, p)
		}
	}
	stopAll(all)
}

// stopAll sends SIGTERM to every process of ps, waits up to 30s each,
// then kills.
func stopAll(ps []*Process) {
	for _, p := range ps {
		_ = p.Signal(syscall.SIGTERM)
	}
	for _, p := range ps {
		if err := p.Wait(30 * time.Second); err != nil && !errors.As(err, new(*exec.ExitError)) {
			_ = p.Signal(syscall.SIGKILL)
			_ = p.Wait(5 * time.Second)
		}
	}
}

// waitHTTP waits until p answers HTTP at url (or exits), and checks that
// the listener is p's own: another process that took the port in the
// meantime fails the start (ErrPortBusy) instead of passing for p.
func waitHTTP(ctx context.Context, p *Process, url string) error {
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		if p.Exited() {
			return p.exitedError()
		}
		resp, err := http.Get(url + "/")
		if err == nil {
			resp.Body.Close()
			addr := strings.TrimPrefix(url, "http://")
			_, port, _ := net.SplitHostPort(addr)
			n, _ := strconv.Atoi(port)
			if !listensOn(p.Cmd.Process.Pid, n) {
				return fmt.Errorf("devstack: %w: %s answers on %s, but not from %s (pid %d)%s; see %s",
					ErrPortBusy, addr, addr, p.Name, p.Cmd.Process.Pid, holderOf(addr), p.LogPath)
			}
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
	return fmt.Errorf("%s did not answer on %s; see %s", p.Name, url, p.LogPath)
}
