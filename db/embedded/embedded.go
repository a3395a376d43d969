// Package embedded runs a private PostgreSQL cluster that metalloc starts
// itself, for development and tests: it finds (or, as root, installs) the
// server binaries, initialises a data directory with initdb and starts and
// stops the server with pg_ctl. The server listens on 127.0.0.1 only, trusts
// every local connection and trades durability for speed (fsync=off): it is
// not meant for production data.
package embedded

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"go.uber.org/zap"

	"github.com/metalloc/metalloc/internal/freeport"
)

// Options configures Start.
type Options struct {
	// DataDir is the cluster directory. It is created (with its parents) if
	// missing; if it already holds a cluster, that cluster is reused, and if
	// that cluster is running it is used as it is.
	DataDir string
	// Port is the TCP port on 127.0.0.1; 0 picks a free port. Ignored when
	// reusing a running cluster, whose own port is used.
	Port int
	// Log receives progress messages; nil discards them.
	Log *zap.Logger
	// Settings are extra server settings (name to value, passed as -c),
	// overriding the defaults Start uses for speed (fsync, synchronous_commit
	// and full_page_writes off), e.g. {"synchronous_commit": "on"}.
	Settings map[string]string
}

// Cluster is a PostgreSQL server reachable on 127.0.0.1 as the superuser
// postgres without a password. Its methods are not safe for concurrent use.
type Cluster struct {
	dataDir  string
	binDir   string
	port     int
	log      *zap.Logger
	cred     *syscall.Credential // run server programs as this user (nil: as ourselves)
	settings map[string]string   // Options.Settings

	started bool   // Start launched the server, so Stop stops it
	tmpSock string // socket dir Start created under /tmp, removed by Stop
}

// maxSocketPath is the longest unix socket path PostgreSQL accepts
// (sizeof(sun_path)-1 on Linux).
const maxSocketPath = 107

// Start returns a running cluster in opt.DataDir, initialising it with initdb
// if the directory holds no cluster yet and starting it with pg_ctl unless it
// is already running. Server binaries are located with EnsureBinaries.
//
// As root (PostgreSQL refuses to run as root), the server runs as the user
// postgres if it exists, otherwise as a system user metalloc created with
// useradd; DataDir is chowned to that user, and every parent directory of
// DataDir must be traversable by it (use a directory under os.TempDir(),
// not under /root), or Start returns an error naming the directory.
//
// If the server fails to start, the error includes the tail of
// DataDir/postgres.log.
func Start(ctx context.Context, opt Options) (*Cluster, error) {
	if opt.DataDir == "" {
		return nil, errors.New("embedded postgres: Options.DataDir is empty")
	}
	log := opt.Log
	if log == nil {
		log = zap.NewNop()
	}
	dataDir, err := filepath.Abs(opt.DataDir)
	if err != nil {
		return nil, fmt.Errorf("embedded postgres: data dir: %w", err)
	}
	binDir, err := EnsureBinaries(ctx, log)
	if err != nil {
		return nil, fmt.Errorf("embedded postgres: %w", err)
	}
	c := &Cluster{dataDir: dataDir, binDir: binDir, log: log, settings: opt.Settings}

	if err := os.MkdirAll(filepath.Dir(dataDir), 0o755); err != nil {
		return nil, fmt.Errorf("embedded postgres: creating data dir: %w", err)
	}
	if err := os.Mkdir(dataDir, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
		return nil, fmt.Errorf("embedded postgres: creating data dir: %w", err)
	}
	if os.Geteuid() == 0 {
		if err := c.dropPrivileges(); err != nil {
			return nil, fmt.Errorf("embedded postgres: %w", err)
		}
	}

	if _, err := os.Stat(filepath.Join(dataDir, "PG_VERSION")); errors.Is(err, fs.ErrNotExist) {
		if err := c.initdb(ctx); err != nil {
			return nil, err
		}
	} else if err != nil {
		return nil, fmt.Errorf("embedded postgres: %w", err)
	} else if port, running := c.running(ctx); running {
		c.port = port
		log.Info("reusing running PostgreSQL cluster", zap.String("dir", dataDir), zap.Int("port", port))
		return c, nil
	}

	c.port = opt.Port
	if c.port == 0 {
		if c.port, err = freeport.Pick(); err != nil {
			return nil, fmt.Errorf("embedded postgres: picking a port: %w", err)
		}
	}
	if err := c.start(ctx); err != nil {
		c.removeTmpSock()
		return nil, err
	}
	return c, nil
}

// URL returns the connection URL of database dbname on the cluster:
// postgres://postgres@127.0.0.1:PORT/dbname?sslmode=disable.
func (c *Cluster) URL(dbname string) string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/%s?sslmode=disable", c.port, url.PathEscape(dbname))
}

// Port returns the TCP port the cluster listens on (127.0.0.1).
func (c *Cluster) Port() int { return c.port }

// CreateDatabase creates database name (owned by postgres) unless it already
// exists.
func (c *Cluster) CreateDatabase(ctx context.Context, name string) error {
	conn, err := pgx.Connect(ctx, c.URL("postgres"))
	if err != nil {
		return fmt.Errorf("embedded postgres: connecting: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	var exists bool
	err = conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)`, name).Scan(&exists)
	if err != nil {
		return fmt.Errorf("embedded postgres: looking up database %s: %w", name, err)
	}
	if exists {
		return nil
	}
	_, err = conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize())
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "42P04" { // duplicate_database: lost a race
		return nil
	}
	if err != nil {
		return fmt.Errorf("embedded postgres: creating database %s: %w", name, err)
	}
	return nil
}

// Stop shuts the server down with `pg_ctl stop -m fast` (open connections are
// terminated) if Start started it; it is a no-op for a cluster Start found
// already running, and for a cluster already stopped. The data directory
// is kept: StartAgain starts the server again on it, on the same port.
func (c *Cluster) Stop(ctx context.Context) error {
	if !c.started {
		return nil
	}
	if _, err := c.run(ctx, "pg_ctl", "-D", c.dataDir, "-m", "fast", "-w", "-t", "60", "stop"); err != nil {
		return fmt.Errorf("embedded postgres: stopping: %w", err)
	}
	c.started = false
	c.removeTmpSock()
	c.log.Info("stopped PostgreSQL", zap.String("dir", c.dataDir))
	return nil
}

// StartAgain starts the server again after Stop, on the same data directory
// and port (so URLs handed out before stay valid), and waits until it
// accepts connections; Stop then stops it again. It does nothing if a server
// already runs on the data directory. Tests use Stop and StartAgain to take
// the database away from running clients and give it back. If the server
// fails to start (say, another process took the port meanwhile), the error
// includes the tail of DataDir/postgres.log.
func (c *Cluster) StartAgain(ctx context.Context) error {
	if _, running := c.running(ctx); running {
		return nil
	}
	if err := c.start(ctx); err != nil {
		c.removeTmpSock()
		return err
	}
	return nil
}

// Restart stops the server (as Stop does: open connections are terminated
// with SQLSTATE 57P01 admin_shutdown) and starts it again on the same data
// directory and port (StartAgain). Like Stop, it is for a cluster Start
// started: on a reused cluster it returns an error and changes nothing.
func (c *Cluster) Restart(ctx context.Context) error {
	if !c.started {
		return errors.New("embedded postgres: Restart: this cluster was not started by Start")
	}
	if err := c.Stop(ctx); err != nil {
		return err
	}
	return c.StartAgain(ctx)
}

// dropPrivileges picks the unprivileged user to run the server as, checks it
// can reach the data dir and hands the data dir over to it.
func (c *Cluster) dropPrivileges() error {
	cred, name, err := ServerCredential()
	if err != nil {
		return err
	}
	if err := HandOver(c.dataDir, name, cred); err != nil {
		return err
	}
	c.cred = cred
	return nil
}

// ServerCredential is the unprivileged user a root process runs
// PostgreSQL (and Patroni, package internal/patroni) as, since the server
// refuses to run as root: user postgres if it exists, else user metalloc,
// created as a system user with useradd if missing. It returns the
// credential to put in exec.Cmd's SysProcAttr (with the user's
// supplementary groups) and the user name, for messages.
func ServerCredential() (*syscall.Credential, string, error) {
	u, err := serverUser()
	if err != nil {
		return nil, "", err
	}
	uid, _ := strconv.ParseUint(u.Uid, 10, 32)
	gid, _ := strconv.ParseUint(u.Gid, 10, 32)
	cred := &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
	if ids, err := u.GroupIds(); err == nil {
		for _, s := range ids {
			if g, err := strconv.ParseUint(s, 10, 32); err == nil {
				cred.Groups = append(cred.Groups, uint32(g))
			}
		}
	}
	return cred, u.Username, nil
}

// HandOver gives dir and everything in it to cred's user (username, for
// messages), after checking that the user can reach dir: an error names
// the first parent directory the user cannot traverse (a directory under
// /root, a 0700 test temp dir).
func HandOver(dir, username string, cred *syscall.Credential) error {
	if err := checkTraversable(dir, username, cred); err != nil {
		return err
	}
	if err := chownTree(dir, cred); err != nil {
		return fmt.Errorf("handing %s to user %s: %w", dir, username, err)
	}
	return nil
}

// serverUser returns user postgres, else user metalloc, creating the latter
// as a system user if needed.
func serverUser() (*user.User, error) {
	for _, name := range []string{"postgres", "metalloc"} {
		u, err := user.Lookup(name)
		if err == nil {
			return u, nil
		}
		if !errors.As(err, new(user.UnknownUserError)) {
			return nil, fmt.Errorf("looking up user %s: %w", name, err)
		}
	}
	out, err := exec.Command("useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", "metalloc").CombinedOutput()
	if err != nil {
		return nil, fmt.Errorf("creating system user metalloc to run PostgreSQL: %w: %s", err, bytes.TrimSpace(out))
	}
	u, err := user.Lookup("metalloc")
	if err != nil {
		return nil, fmt.Errorf("looking up user metalloc: %w", err)
	}
	return u, nil
}

// checkTraversable returns an error naming the first parent directory of dir
// that the user cred cannot search (execute permission).
func checkTraversable(dir, username string, cred *syscall.Credential) error {
	for d := filepath.Dir(dir); ; d = filepath.Dir(d) {
		fi, err := os.Stat(d)
		if err != nil {
			return err
		}
		st, ok := fi.Sys().(*syscall.Stat_t)
		if !ok {
			return nil
		}
		perm := fi.Mode().Perm()
		var can bool
		switch {
		case st.Uid == cred.Uid:
			can = perm&0o100 != 0
		case st.Gid == cred.Gid || containsGroup(cred.Groups, st.Gid):
			can = perm&0o010 != 0
		default:
			can = perm&0o001 != 0
		}
		if !can {
			return fmt.Errorf("directory %s is not traversable by user %s, which runs PostgreSQL: "+
				"put the data directory elsewhere, e.g. under %s", d, username, os.TempDir())
		}
		if d == filepath.Dir(d) {
			return nil
		}
	}
}

func containsGroup(groups []uint32, g uint32) bool {
	for _, x := range groups {
		if x == g {
			return true
		}
	}
	return false
}

// chownTree gives dir and everything in it to cred's user, unless dir is
// already theirs.
func chownTree(dir string, cred *syscall.Credential) error {
	fi, err := os.Stat(dir)
	if err != nil {
		return err
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && st.Uid == cred.Uid {
		return nil
	}
	return filepath.WalkDir(dir, func(p string, _ fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(p, int(cred.Uid), int(cred.Gid))
	})
}

func (c *Cluster) initdb(ctx context.Context) error {
	c.log.Info("initialising PostgreSQL cluster", zap.String("dir", c.dataDir))
	args := []string{"-D", c.dataDir, "-U", "postgres", "--auth=trust", "-E", "UTF8"}
	_, err := c.run(ctx, "initdb", append(args, "--locale=C.UTF-8")...)
	if err != nil {
		// Older systems lack the C.UTF-8 locale; initdb cleans up after itself.
		c.log.Debug("initdb with locale C.UTF-8 failed, retrying with C", zap.Error(err))
		_, err = c.run(ctx, "initdb", append(args, "--locale=C")...)
	}
	if err != nil {
		return fmt.Errorf("embedded postgres: initdb: %w", err)
	}
	return nil
}

// running reports whether a server runs on the data dir and, if so, its port.
func (c *Cluster) running(ctx context.Context) (port int, ok bool) {
	if _, err := c.run(ctx, "pg_ctl", "-D", c.dataDir, "status"); err != nil {
		return 0, false
	}
	b, err := os.ReadFile(filepath.Join(c.dataDir, "postmaster.pid"))
	if err != nil {
		return 0, false
	}
	lines := strings.Split(string(b), "\n")
	if len(lines) < 4 {
		return 0, false
	}
	port, err = strconv.Atoi(strings.TrimSpace(lines[3]))
	return port, err == nil && port > 0
}

func (c *Cluster) start(ctx context.Context) error {
	sockDir, err := c.socketDir()
	if err != nil {
		return fmt.Errorf("embedded postgres: socket dir: %w", err)
	}
	logFile := filepath.Join(c.dataDir, "postgres.log")
	opts := fmt.Sprintf("-p %d -k %s -c listen_addresses=127.0.0.1 -c max_connections=300 "+
		"-c fsync=off -c synchronous_commit=off -c full_page_writes=off -c shared_buffers=%s",
		c.port, shellQuote(sockDir), SharedBuffers(memTotal()))
	names := make([]string, 0, len(c.settings))
	for k := range c.settings {
		names = append(names, k)
	}
	slices.Sort(names)
	for _, k := range names { // a later -c wins over the defaults above
		opts += fmt.Sprintf(" -c %s=%s", k, shellQuote(c.settings[k]))
	}
	c.log.Info("starting PostgreSQL", zap.String("dir", c.dataDir), zap.Int("port", c.port))
	if _, err := c.run(ctx, "pg_ctl", "-D", c.dataDir, "-l", logFile, "-w", "-t", "60", "-o", opts, "start"); err != nil {
		logTail := ""
		if b, rerr := os.ReadFile(logFile); rerr == nil {
			logTail = "\npostgres.log:\n" + tail(b, 3000)
		}
		return fmt.Errorf("embedded postgres: starting server on port %d: %w%s", c.port, err, logTail)
	}
	c.started = true
	return nil
}

// socketDir creates the unix socket directory: DataDir/sock, or a directory
// under /tmp when that path would be too long for a socket.
func (c *Cluster) socketDir() (string, error) {
	dir := filepath.Join(c.dataDir, "sock")
	if len(dir)+len("/.s.PGSQL.65535") > maxSocketPath {
		d, err := os.MkdirTemp("/tmp", "metalloc-pg-")
		if err != nil {
			return "", err
		}
		dir, c.tmpSock = d, d
	} else if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
		return "", err
	}
	if c.cred != nil {
		if err := os.Chown(dir, int(c.cred.Uid), int(c.cred.Gid)); err != nil {
			return "", err
		}
	}
	return dir, nil
}

func (c *Cluster) removeTmpSock() {
	if c.tmpSock != "" {
		_ = os.RemoveAll(c.tmpSock)
		c.tmpSock = ""
	}
}

// run runs a server program from binDir as the server user and returns its
// combined output; a failure's error includes the output.
func (c *Cluster) run(ctx context.Context, prog string, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, filepath.Join(c.binDir, prog), args...)
	cmd.Dir = "/" // our working directory may not be readable by the server user
	cmd.WaitDelay = 5 * time.Second
	if c.cred != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: c.cred}
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		return out, fmt.Errorf("%s %s: %w: %s", prog, strings.Join(args, " "), err, tail(out, 2000))
	}
	return out, nil
}

// shellQuote quotes s for the shell pg_ctl passes its -o options through.
func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// SharedBuffers is the private cluster's shared_buffers for a machine with
// memTotal bytes of memory (0: unknown): a quarter of it, as
// docs/operations.md ("Sizing") advises for any metalloc database, at
// least 256 MB and at most 2 GB (the cluster shares the machine with the
// whole system, and make test runs several). PostgreSQL touches its
// buffers only as it uses them. At 1,000,000 nodes (a 1 GB database) 256 MB
// left the claims reading pages from the kernel's cache: a burst ran at
// 2,433/s and 0.52 ms of the database's CPU per allocation, against
// 2,763/s and 0.46 ms with 2 GB (issue 29).
func SharedBuffers(memTotal uint64) string {
	const mb = 1 << 20
	v := min(max(memTotal/4, 256*mb), 2048*mb)
	return strconv.FormatUint(v/mb, 10) + "MB"
}

// memTotal is MemTotal of /proc/meminfo in bytes, 0 if unreadable.
func memTotal() uint64 {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "MemTotal:"); ok {
			kb, err := strconv.ParseUint(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			if err != nil {
				return 0
			}
			return kb * 1024
		}
	}
	return 0
}
