// Package patroni runs a local highly available PostgreSQL for the tests
// and `metalloc-manage dev up --ha`: a three-member etcd cluster (the
// etcd 3.4 of Debian's etcd-server) and two or three PostgreSQL members,
// each under its own Patroni (Debian's patroni 3.0), in synchronous mode
// with pg_rewind, everything on 127.0.0.1 on free ports. It is the
// production layout docs/operations.md ("PostgreSQL high availability")
// describes, shrunk onto one machine with short timeouts so that a
// failover takes seconds: Patroni's ttl 10 s, loop_wait 1 s,
// retry_timeout 4 s (Patroni wants loop_wait + 2 * retry_timeout <= ttl).
//
// As root, Patroni (and so PostgreSQL, which refuses to run as root) runs
// as the user embedded.ServerCredential names; etcd runs as ourselves.
// Like db/embedded's cluster it trades durability for speed (fsync off: a
// SIGKILL loses nothing, a power cut would) and trusts every loopback
// connection: it is not meant for production data.
package patroni

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"go.uber.org/zap"

	"github.com/metalloc/metalloc/db/embedded"
	"github.com/metalloc/metalloc/internal/child"
	"github.com/metalloc/metalloc/internal/freeport"
	"github.com/metalloc/metalloc/internal/pgtest"
)

// Timing of every member (Patroni's dynamic configuration, seconds): a
// leader key not renewed for TTL seconds expires and a synchronous
// standby takes over; the loop runs every LoopWait seconds; a DCS or
// PostgreSQL operation is retried for RetryTimeout seconds before the
// leader demotes itself.
const (
	TTL          = 10
	LoopWait     = 1
	RetryTimeout = 4
)

// Options configures Start.
type Options struct {
	// Members is the number of PostgreSQL members: 2 or 3 (default 3).
	Members int
	// LogDir receives etcd1.log.. and pg1.log.. (each Patroni's log, which
	// holds its PostgreSQL's); default: the cluster's directory, removed
	// by Stop.
	LogDir string
	// Database is created once a leader is elected (default "metalloc").
	Database string
	// Log reports progress; nil discards it.
	Log *zap.Logger
}

// Cluster is a running etcd and Patroni cluster. Its methods are safe for
// use by one goroutine at a time.
type Cluster struct {
	// Members are the PostgreSQL members, pg1, pg2, ...
	Members []*Member
	// EtcdURLs are the etcd members' client URLs.
	EtcdURLs []string

	dir      string // everything lives here; Stop removes it
	logDir   string
	database string
	binDir   string // PostgreSQL's
	cred     *syscall.Credential
	log      *zap.Logger
	etcd     []*child.Group
}

// Member is one PostgreSQL member and its Patroni.
type Member struct {
	// Name is Patroni's member name (pg1, pg2, ...).
	Name string
	// Port is its PostgreSQL's port on 127.0.0.1.
	Port int
	// RESTURL is its Patroni REST API, e.g. http://127.0.0.1:8008.
	RESTURL string
	// DataDir is its PostgreSQL data directory.
	DataDir string
	// LogPath is its Patroni's log (with PostgreSQL's output).
	LogPath string

	config  string // its Patroni YAML
	patroni *child.Group
}

// Start starts three etcd members, waits until they agree, then starts
// opt.Members Patroni members, waits until one is the leader and a
// synchronous standby streams from it, and creates opt.Database. The
// binaries are Debian's: /usr/bin/etcd (package etcd-server),
// /usr/bin/patroni (patroni) and PostgreSQL's (embedded.EnsureBinaries);
// a missing one fails with the package to install. On error everything
// started is stopped and the directory removed.
func Start(ctx context.Context, opt Options) (*Cluster, error) {
	if opt.Members == 0 {
		opt.Members = 3
	}
	if opt.Members < 2 || opt.Members > 3 {
		return nil, fmt.Errorf("patroni: %d members: want 2 or 3", opt.Members)
	}
	if opt.Database == "" {
		opt.Database = "metalloc"
	}
	log := opt.Log
	if log == nil {
		log = zap.NewNop()
	}
	for prog, pkg := range map[string]string{"etcd": "etcd-server", "patroni": "patroni"} {
		if _, err := exec.LookPath(prog); err != nil {
			return nil, fmt.Errorf("patroni: %s not found: install the Debian package %s", prog, pkg)
		}
	}
	binDir, err := embedded.EnsureBinaries(ctx, log)
	if err != nil {
		return nil, fmt.Errorf("patroni: %w", err)
	}
	dir, err := os.MkdirTemp("", "metalloc-ha-")
	if err != nil {
		return nil, fmt.Errorf("patroni: %w", err)
	}
	// The members' user must traverse it (MkdirTemp makes it 0700).
	if err := os.Chmod(dir, 0o755); err != nil {
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("patroni: %w", err)
	}
	c := &Cluster{dir: dir, logDir: opt.LogDir, database: opt.Database, binDir: binDir, log: log}
	if c.logDir == "" {
		c.logDir = dir
	}
	if os.Geteuid() == 0 {
		if c.cred, _, err = embedded.ServerCredential(); err != nil {
			_ = os.RemoveAll(dir)
			return nil, fmt.Errorf("patroni: %w", err)
		}
	}
	if err := c.start(ctx, opt.Members); err != nil {
		c.Stop()
		return nil, err
	}
	return c, nil
}

func (c *Cluster) start(ctx context.Context, members int) error {
	if err := c.startEtcd(ctx); err != nil {
		return err
	}
	for i := range members {
		m, err := c.newMember(i + 1)
		if err != nil {
			return err
		}
		c.Members = append(c.Members, m)
	}
	// The first member alone bootstraps (initdb) and takes the leader key;
	// the others, started together after, clone it with pg_basebackup.
	if err := c.Restart(c.Members[0]); err != nil {
		return err
	}
	if _, err := c.WaitPrimary(ctx, nil, 90*time.Second); err != nil {
		return err
	}
	for _, m := range c.Members[1:] {
		if err := c.Restart(m); err != nil {
			return err
		}
	}
	if err := c.WaitSynchronous(ctx, 90*time.Second); err != nil {
		return err
	}
	conn, err := pgx.Connect(ctx, c.URL("postgres"))
	if err != nil {
		return fmt.Errorf("patroni: connecting to the primary: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{c.database}.Sanitize()); err != nil {
		return fmt.Errorf("patroni: creating database %s: %w", c.database, err)
	}
	c.log.Info("PostgreSQL under Patroni up", zap.Strings("etcd", c.EtcdURLs), zap.String("url", c.URL(c.database)))
	return nil
}

// URL is the multi-host URL of database dbname on every member with
// target_session_attrs=read-write: a client tries the members in turn and
// keeps the one that accepts writes, the primary, wherever Patroni put it.
func (c *Cluster) URL(dbname string) string {
	hosts := make([]string, len(c.Members))
	for i, m := range c.Members {
		hosts[i] = "127.0.0.1:" + strconv.Itoa(m.Port)
	}
	return fmt.Sprintf("postgres://postgres@%s/%s?sslmode=disable&target_session_attrs=read-write",
		strings.Join(hosts, ","), dbname)
}

// MemberURL is the URL of database dbname on member m alone.
func MemberURL(m *Member, dbname string) string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/%s?sslmode=disable", m.Port, dbname)
}

// Dir is the directory holding the cluster's data (and logs unless
// Options.LogDir was set).
func (c *Cluster) Dir() string { return c.dir }

// startEtcd starts three etcd members on free loopback ports and waits
// until each reports healthy (a quorum elected a leader). Heartbeat and
// election timeouts are 2.5 times etcd's defaults: on a loaded test
// machine the defaults make etcd re-elect, which stalls Patroni.
func (c *Cluster) startEtcd(ctx context.Context) error {
	const n = 3
	peers := make([]string, n)
	clients := make([]string, n)
	for i := range n {
		pp, err := freeport.Pick()
		if err != nil {
			return err
		}
		cp, err := freeport.Pick()
		if err != nil {
			return err
		}
		peers[i] = fmt.Sprintf("http://127.0.0.1:%d", pp)
		clients[i] = fmt.Sprintf("http://127.0.0.1:%d", cp)
	}
	var initial []string
	for i := range n {
		initial = append(initial, fmt.Sprintf("etcd%d=%s", i+1, peers[i]))
	}
	for i := range n {
		name := fmt.Sprintf("etcd%d", i+1)
		argv := []string{"etcd", "--name", name, "--data-dir", filepath.Join(c.dir, name),
			"--listen-peer-urls", peers[i], "--initial-advertise-peer-urls", peers[i],
			"--listen-client-urls", clients[i], "--advertise-client-urls", clients[i],
			"--initial-cluster", strings.Join(initial, ","), "--initial-cluster-state", "new",
			"--initial-cluster-token", filepath.Base(c.dir),
			"--heartbeat-interval", "250", "--election-timeout", "2500",
			"--logger", "zap", "--log-outputs", "stderr", "--log-level", "warn"}
		g, err := child.StartGroup(name, argv, os.Environ(), filepath.Join(c.logDir, name+".log"), c.log)
		if err != nil {
			return fmt.Errorf("patroni: %w", err)
		}
		c.etcd = append(c.etcd, g)
	}
	c.EtcdURLs = clients
	deadline := time.Now().Add(60 * time.Second)
	for i, u := range clients {
		for {
			if err := c.etcd[i].Exited(); err != nil {
				return fmt.Errorf("patroni: %w; see %s", err, filepath.Join(c.logDir, fmt.Sprintf("etcd%d.log", i+1)))
			}
			var h struct{ Health string }
			if getJSON(ctx, u+"/health", &h) == nil && h.Health == "true" {
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("patroni: etcd at %s not healthy within 60s; see %s", u, c.logDir)
			}
			if err := sleep(ctx, 100*time.Millisecond); err != nil {
				return err
			}
		}
	}
	return nil
}

// newMember writes member i's Patroni configuration, not starting it.
func (c *Cluster) newMember(i int) (*Member, error) {
	name := fmt.Sprintf("pg%d", i)
	home := filepath.Join(c.dir, name)
	if err := os.Mkdir(home, 0o700); err != nil {
		return nil, fmt.Errorf("patroni: %w", err)
	}
	port, err := freeport.Pick()
	if err != nil {
		return nil, err
	}
	rest, err := freeport.Pick()
	if err != nil {
		return nil, err
	}
	m := &Member{Name: name, Port: port, RESTURL: fmt.Sprintf("http://127.0.0.1:%d", rest),
		DataDir: filepath.Join(home, "data"), LogPath: filepath.Join(c.logDir, name+".log"),
		config: filepath.Join(home, "patroni.yml")}
	hosts := make([]string, len(c.EtcdURLs))
	for j, u := range c.EtcdURLs {
		hosts[j] = strings.TrimPrefix(u, "http://")
	}
	conf := config{
		Scope: "metalloc", Name: name,
		RESTAPI: listenPair{Listen: fmt.Sprintf("127.0.0.1:%d", rest), ConnectAddress: fmt.Sprintf("127.0.0.1:%d", rest)},
		Etcd3:   etcd3{Hosts: strings.Join(hosts, ",")},
		Bootstrap: bootstrap{
			DCS: dcs{
				TTL: TTL, LoopWait: LoopWait, RetryTimeout: RetryTimeout,
				MaximumLagOnFailover: 16 << 20, SynchronousMode: true,
				PostgreSQL: dcsPostgres{UsePgRewind: true, UseSlots: true, Parameters: map[string]any{
					// What pg_rewind needs (full_page_writes too, on by
					// default); fsync off is db/embedded's trade.
					"wal_log_hints": "on", "fsync": "off", "max_connections": 300,
					"shared_buffers": "128MB", "wal_keep_size": "256MB",
				}},
			},
			InitDB: []any{map[string]string{"encoding": "UTF8"}, map[string]string{"locale": "C.UTF-8"}},
		},
		PostgreSQL: memberPostgres{
			Listen: fmt.Sprintf("127.0.0.1:%d", port), ConnectAddress: fmt.Sprintf("127.0.0.1:%d", port),
			DataDir: m.DataDir, BinDir: c.binDir, PgPass: filepath.Join(home, "pgpass"),
			Authentication: map[string]auth{
				"superuser":   {Username: "postgres", Password: "postgres"},
				"replication": {Username: "replicator", Password: "replicator"},
				"rewind":      {Username: "postgres", Password: "postgres"},
			},
			PgHBA: []string{
				"local all all trust",
				"host all all 127.0.0.1/32 trust",
				"host replication all 127.0.0.1/32 trust",
			},
			Parameters: map[string]any{"unix_socket_directories": home},
		},
		Watchdog: map[string]string{"mode": "off"},
	}
	// JSON is YAML: no YAML library needed.
	raw, err := json.MarshalIndent(conf, "", "  ")
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(m.config, raw, 0o600); err != nil {
		return nil, fmt.Errorf("patroni: %w", err)
	}
	if c.cred != nil {
		if err := embedded.HandOver(home, name, c.cred); err != nil {
			return nil, fmt.Errorf("patroni: %w", err)
		}
	}
	return m, nil
}

// Restart starts m's Patroni (again, after Kill): on an empty data
// directory it bootstraps or clones the leader; on the data of a member
// that was primary before a failover it rejoins as a standby, rewinding
// with pg_rewind what the new primary does not have. It does not wait:
// see WaitSynchronous and State.
func (c *Cluster) Restart(m *Member) error {
	if m.patroni != nil && m.patroni.Exited() == nil {
		return fmt.Errorf("patroni: %s is running", m.Name)
	}
	// PYTHONUNBUFFERED: the log is a file, and a killed Patroni's last
	// lines are the interesting ones.
	env := append(os.Environ(), "PYTHONUNBUFFERED=1")
	g, err := child.StartGroupAs(c.cred, "patroni "+m.Name, []string{"patroni", m.config}, env, m.LogPath, c.log)
	if err != nil {
		return fmt.Errorf("patroni: %w", err)
	}
	m.patroni = g
	return nil
}

// Kill ends m as a crashed host would: SIGKILL to its Patroni and at once
// to its PostgreSQL server and every backend (Patroni starts the server in
// a session of its own, so killing Patroni's process group leaves it
// running). Nothing is shut down cleanly and m's leader key stays in etcd
// until its TTL expires.
func (c *Cluster) Kill(m *Member) error {
	pid, err := postmasterPID(m.DataDir)
	if err != nil {
		return fmt.Errorf("patroni: killing %s: %w", m.Name, err)
	}
	m.patroni.Kill()
	if err := pgtest.KillPostmaster(pid); err != nil {
		return fmt.Errorf("patroni: killing %s: %w", m.Name, err)
	}
	return nil
}

// postmasterPID is the first line of dataDir/postmaster.pid.
func postmasterPID(dataDir string) (int, error) {
	b, err := os.ReadFile(filepath.Join(dataDir, "postmaster.pid"))
	if err != nil {
		return 0, err
	}
	first, _, _ := strings.Cut(string(b), "\n")
	return strconv.Atoi(strings.TrimSpace(first))
}

// MemberState is one member as Patroni's REST GET /cluster shows it.
type MemberState struct {
	Name string `json:"name"`
	// Role is "leader", "sync_standby" or "replica".
	Role string `json:"role"`
	// State is "running" (or "streaming" in later Patroni versions) when
	// the member's PostgreSQL is up; "starting", "stopped", "crashed",
	// "creating replica" otherwise.
	State    string `json:"state"`
	Port     int    `json:"port"`
	Timeline int    `json:"timeline"`
	// Lag is a replica's replication lag in bytes (absent from the leader).
	Lag any `json:"lag,omitempty"`
}

// State is the cluster as the first member whose REST API answers sees
// it (GET /cluster): members known to the DCS, their role and state.
func (c *Cluster) State(ctx context.Context) ([]MemberState, error) {
	var last error = errors.New("no member")
	for _, m := range c.Members {
		if m.patroni == nil || m.patroni.Exited() != nil {
			continue
		}
		var doc struct {
			Members []MemberState `json:"members"`
		}
		if last = getJSON(ctx, m.RESTURL+"/cluster", &doc); last == nil {
			return doc.Members, nil
		}
	}
	return nil, fmt.Errorf("patroni: no REST API answers: %w", last)
}

// Primary is the member whose Patroni REST API answers GET /primary with
// 200 (the check a load balancer in front of the members uses), nil when
// none does.
func (c *Cluster) Primary(ctx context.Context) *Member {
	for _, m := range c.Members {
		if m.patroni == nil || m.patroni.Exited() != nil {
			continue
		}
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, m.RESTURL+"/primary", nil)
		resp, err := restClient.Do(req)
		if err != nil {
			continue
		}
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			return m
		}
	}
	return nil
}

// WaitPrimary waits up to timeout for a primary other than not (nil: any)
// that accepts writes, and returns it. Patroni's REST API calls a member
// primary as soon as it begins its promotion, a moment before its server
// leaves recovery: WaitPrimary waits for the server.
func (c *Cluster) WaitPrimary(ctx context.Context, not *Member, timeout time.Duration) (*Member, error) {
	deadline := time.Now().Add(timeout)
	for {
		if p := c.Primary(ctx); p != nil && p != not && acceptsWrites(ctx, p) {
			return p, nil
		}
		for _, m := range c.Members {
			if m.patroni != nil && m != not {
				if err := m.patroni.Exited(); err != nil {
					return nil, exitedError(m, err)
				}
			}
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("patroni: no primary within %s; see %s", timeout, c.logDir)
		}
		if err := sleep(ctx, 100*time.Millisecond); err != nil {
			return nil, err
		}
	}
}

// exitedError says that m's Patroni exited (err) and where its log is,
// with the package to install when the log says its etcd client is
// missing (Debian's patroni only suggests one).
func exitedError(m *Member, err error) error {
	raw, _ := os.ReadFile(m.LogPath)
	if strings.Contains(string(raw), "Can not find suitable configuration of distributed configuration store") {
		return fmt.Errorf("patroni: %w: Patroni cannot load its etcd client: install the Debian package python3-etcd; see %s", err, m.LogPath)
	}
	return fmt.Errorf("patroni: %w; see %s", err, m.LogPath)
}

// acceptsWrites reports whether m's server answers as a primary.
func acceptsWrites(ctx context.Context, m *Member) bool {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, MemberURL(m, "postgres")+"&target_session_attrs=read-write")
	if err != nil {
		return false
	}
	conn.Close(ctx)
	return true
}

// WaitSynchronous waits up to timeout until every member whose Patroni
// runs is in /cluster, running (or streaming), one of them the leader and
// one a sync_standby: commits are then on two members before they are
// acknowledged, and a failover loses none.
func (c *Cluster) WaitSynchronous(ctx context.Context, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		ok, seen := c.synchronous(ctx)
		if ok {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("patroni: the members not running with a synchronous standby within %s (%v); see %s", timeout, seen, c.logDir)
		}
		if err := sleep(ctx, 200*time.Millisecond); err != nil {
			return err
		}
	}
}

// synchronous reports whether WaitSynchronous's condition holds, and the
// states seen.
func (c *Cluster) synchronous(ctx context.Context) (bool, []MemberState) {
	states, err := c.State(ctx)
	if err != nil {
		return false, nil
	}
	want := 0
	for _, m := range c.Members {
		if m.patroni != nil && m.patroni.Exited() == nil {
			want++
		}
	}
	running, leader, sync := 0, 0, 0
	for _, s := range states {
		if s.State == "running" || s.State == "streaming" {
			running++
			switch s.Role {
			case "leader", "master", "primary":
				leader++
			case "sync_standby":
				sync++
			}
		}
	}
	return running == want && leader == 1 && sync >= 1, states
}

// Stop stops every Patroni (SIGTERM: each stops its PostgreSQL with a
// fast shutdown) then the etcd members, and removes the cluster's
// directory. Calling it again does nothing.
func (c *Cluster) Stop() {
	// All at once: one by one, each standby would see its primary go and
	// wait out loop_wait and retry_timeout before it stops too.
	var wg sync.WaitGroup
	for _, m := range c.Members {
		if m.patroni != nil {
			wg.Add(1)
			go func() { defer wg.Done(); m.patroni.Stop() }()
		}
	}
	wg.Wait()
	// A member Kill left without its Patroni may hold a server still (a
	// Stop after a failed Kill): never leave one behind.
	for _, m := range c.Members {
		if pid, err := postmasterPID(m.DataDir); err == nil && c.isPostgres(pid) {
			_ = pgtest.KillPostmaster(pid)
		}
	}
	for _, g := range c.etcd {
		g.Stop()
	}
	if c.dir != "" {
		if err := os.RemoveAll(c.dir); err != nil {
			c.log.Warn("removing the Patroni cluster's directory", zap.String("dir", c.dir), zap.Error(err))
		}
		c.dir = ""
	}
}

// isPostgres reports whether process pid runs this cluster's postgres
// binary (a stale postmaster.pid's number may be another process's now).
func (c *Cluster) isPostgres(pid int) bool {
	exe, err := os.Readlink(filepath.Join("/proc", strconv.Itoa(pid), "exe"))
	return err == nil && exe == filepath.Join(c.binDir, "postgres")
}

var restClient = &http.Client{Timeout: 2 * time.Second}

// getJSON decodes the JSON answer of GET url into v; a status other than
// 200 is an error.
func getJSON(ctx context.Context, url string, v any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := restClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return json.NewDecoder(resp.Body).Decode(v)
}

func sleep(ctx context.Context, d time.Duration) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(d):
		return nil
	}
}
