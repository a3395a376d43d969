package devstack

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	neturl "net/url"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"go.uber.org/zap"
	"golang.org/x/crypto/bcrypt"

	"github.com/metalloc/metalloc/internal/child"
	"github.com/metalloc/metalloc/internal/freeport"
)

// IronicPackages are the Debian packages StartIronic needs (Ironic 21.4,
// 2023.1 "Antelope" as shipped by bookworm, and the PostgreSQL driver its
// SQLAlchemy uses).
const IronicPackages = "ironic-api ironic-conductor python3-psycopg2"

// Ironic's authentication strategies ([DEFAULT]auth_strategy).
const (
	IronicNoAuth    = "noauth"
	IronicHTTPBasic = "http_basic"
	IronicKeystone  = "keystone"
)

// IronicOptions describes the Ironic StartIronic runs.
type IronicOptions struct {
	// DatabaseURL is a PostgreSQL server as a libpq URL (DATABASE_URL of
	// `make test`) whose user may create databases. Required. Ironic gets
	// its own database there, cloned from a template that ironic-dbsync
	// fills once per Ironic schema, and dropped by Stop.
	DatabaseURL string
	// Dir receives the configuration, state and logs (logs/). Required.
	Dir string
	// Port is the API's port on 127.0.0.1; 0 picks a free one.
	Port int
	// Conductors is how many ironic-conductor processes to run (default 2).
	Conductors int
	// AuthStrategy is IronicNoAuth (the default), IronicHTTPBasic or
	// IronicKeystone.
	AuthStrategy string
	// Keystone is the identity service of IronicKeystone: StartIronic
	// creates Ironic's service user there. Ironic checks tokens with
	// enforce_scope and enforce_new_defaults on (secure RBAC: project
	// members see their own nodes), as metalloc-api does by default.
	Keystone IronicIdentity
	// BasicUsers are the IronicHTTPBasic users (name → password), written
	// as Ironic's bcrypt htpasswd file. Default: {"admin": "admin"}.
	BasicUsers map[string]string
	// APIWorkers is ironic-api's [api]api_workers (default 1: tests; the
	// side-by-side benchmark uses Ironic's own default, the CPU count),
	// or with UWSGI the uWSGI processes (default: the processes of
	// Debian's /etc/ironic/ironic-api-uwsgi.ini, 8).
	APIWorkers int
	// UWSGI serves Ironic's API the way Debian's ironic-api package does
	// (its systemd unit runs /etc/init.d/ironic-api, which starts
	// uwsgi_python3 with /etc/ironic/ironic-api-uwsgi.ini: APIWorkers
	// processes of one thread each, no eventlet) instead of the
	// ironic-api command's eventlet server. The ini's settings are kept
	// but its user, group, directory, log and socket, which are this
	// Ironic's.
	UWSGI bool
	// Debug sets Ironic's [DEFAULT]debug.
	Debug bool
	// NoProxyHeaders leaves [oslo_middleware]enable_proxy_headers_parsing
	// at Ironic's default (false): Ironic's links then name its own
	// address, whatever X-Forwarded-* say. Default: true, links name the
	// proxy in front.
	NoProxyHeaders bool
	// Log reports progress.
	Log *zap.Logger
}

// IronicIdentity is what StartIronic needs of a Keystone for
// IronicKeystone: its endpoint and an administrator's calls
// (internal/keystonetest.Keystone, test-only, has them).
type IronicIdentity interface {
	// Endpoint is the identity endpoint, e.g. http://127.0.0.1:35000/v3.
	Endpoint() string
	// AdminToken is a system-scoped token of the administrator.
	AdminToken(ctx context.Context) (string, error)
	CreateProject(ctx context.Context, name string) (string, error)
	CreateUser(ctx context.Context, name, password string) (string, error)
	GrantProjectRole(ctx context.Context, userID, projectID, role string) error
}

// Ironic is a running OpenStack Ironic 21.4 from Debian's packages:
// ironic-api and Conductors ironic-conductor processes talking json-rpc
// on loopback addresses of their own, fake-hardware with every fake
// interface, on a private PostgreSQL database. Its methods act on it as
// an operator would (AdminHeaders, Do), stop and start its parts (for
// outage tests) and show its logs.
type Ironic struct {
	// URL is the API root, e.g. http://127.0.0.1:40123.
	URL string
	// Dir holds etc/, state and logs/ (LogDir).
	Dir    string
	LogDir string
	// Database is the name of Ironic's database on the server of
	// IronicOptions.DatabaseURL.
	Database string
	// Hosts are the conductors' hostnames (and json-rpc addresses), in
	// start order.
	Hosts []string

	opts    IronicOptions
	server  string // maintenance URL of the PostgreSQL server
	listen  string // the API's address:port
	svcUser string // keystone: Ironic's service user
	svcPass string

	mu         sync.Mutex
	api        *child.Group
	conductors []*child.Group
	stopped    bool
}

// ironicTemplateLock is the pg_advisory_lock key serialising the creation
// of the Ironic template database across test processes ("ironicdb").
const ironicTemplateLock int64 = 0x6972_6f6e_6963_6462

// StartIronic creates Ironic's database (a clone of the template, created
// with `ironic-dbsync create_schema` on first use), writes one
// configuration per process, starts ironic-api and the conductors at
// once, and waits until the API answers and lists every conductor alive
// (about 7 s on this machine, most of it Python start-up). The packages
// in IronicPackages must be installed; when they are not, the error says
// how to install them. On error everything started is stopped; Stop ends
// it all and drops the database.
func StartIronic(ctx context.Context, opts IronicOptions) (*Ironic, error) {
	if opts.Log == nil {
		opts.Log = zap.NewNop()
	}
	if opts.Conductors <= 0 {
		opts.Conductors = 2
	}
	if opts.APIWorkers <= 0 && !opts.UWSGI {
		opts.APIWorkers = 1
	}
	if opts.AuthStrategy == "" {
		opts.AuthStrategy = IronicNoAuth
	}
	switch opts.AuthStrategy {
	case IronicNoAuth, IronicHTTPBasic:
	case IronicKeystone:
		if opts.Keystone == nil {
			return nil, errors.New("devstack: Ironic with auth_strategy keystone needs IronicOptions.Keystone")
		}
	default:
		return nil, fmt.Errorf("devstack: Ironic auth_strategy %q: want noauth, http_basic or keystone", opts.AuthStrategy)
	}
	if opts.AuthStrategy == IronicHTTPBasic && len(opts.BasicUsers) == 0 {
		opts.BasicUsers = map[string]string{"admin": "admin"}
	}
	if opts.DatabaseURL == "" || opts.Dir == "" {
		return nil, errors.New("devstack: StartIronic needs DatabaseURL and Dir")
	}
	for _, bin := range []string{"ironic-api", "ironic-conductor", "ironic-dbsync"} {
		if _, err := exec.LookPath(bin); err != nil {
			return nil, fmt.Errorf("Ironic is not installed (%s not found): apt-get install -y %s", bin, IronicPackages)
		}
	}
	dir, err := filepath.Abs(opts.Dir)
	if err != nil {
		return nil, err
	}
	i := &Ironic{Dir: dir, LogDir: filepath.Join(dir, "logs"), opts: opts, server: opts.DatabaseURL}
	for _, d := range []string{"etc", "logs", "state", "tmp", "lock", "httpboot", "tftpboot"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			return nil, err
		}
	}
	if err := i.setUp(ctx); err != nil {
		i.Stop()
		return nil, err
	}
	start := time.Now()
	if err := i.startAll(); err != nil {
		i.Stop()
		return nil, err
	}
	if err := i.waitReady(ctx, 3*time.Minute); err != nil {
		i.Stop()
		return nil, err
	}
	opts.Log.Info("Ironic up", zap.String("url", i.URL), zap.Strings("conductors", i.Hosts),
		zap.Duration("start", time.Since(start)), zap.String("logs", i.LogDir))
	return i, nil
}

// setUp creates the database, picks the addresses and writes the
// configuration files (and the Keystone user or htpasswd file).
func (i *Ironic) setUp(ctx context.Context) error {
	tmpl, err := ensureIronicTemplate(ctx, i.server, i.Dir, i.opts.Log)
	if err != nil {
		return err
	}
	i.Database = "ironic_test_" + randomHex(8)
	if err := execSQL(ctx, i.server, "CREATE DATABASE "+pgx.Identifier{i.Database}.Sanitize()+
		" TEMPLATE "+pgx.Identifier{tmpl}.Sanitize()); err != nil {
		return fmt.Errorf("creating Ironic's database: %w", err)
	}
	port := i.opts.Port
	if port == 0 {
		if port, err = freeport.Pick(); err != nil {
			return err
		}
	}
	i.listen = "127.0.0.1:" + strconv.Itoa(port)
	i.URL = "http://" + i.listen
	hosts, rpcPort, err := conductorAddresses(i.opts.Conductors)
	if err != nil {
		return err
	}
	i.Hosts = hosts
	switch i.opts.AuthStrategy {
	case IronicKeystone:
		if err := i.keystoneUser(ctx); err != nil {
			return err
		}
	case IronicHTTPBasic:
		if err := writeHtpasswd(filepath.Join(i.Dir, "etc", "htpasswd"), i.opts.BasicUsers); err != nil {
			return err
		}
	}
	if err := os.WriteFile(i.confPath("api"), []byte(i.config("127.0.0.1", rpcPort)), 0o644); err != nil {
		return err
	}
	for n, h := range hosts {
		if err := os.WriteFile(i.confPath(conductorName(n)), []byte(i.config(h, rpcPort)), 0o644); err != nil {
			return err
		}
	}
	return nil
}

func conductorName(n int) string { return "conductor-" + strconv.Itoa(n+1) }

func (i *Ironic) confPath(name string) string {
	return filepath.Join(i.Dir, "etc", "ironic-"+name+".conf")
}

// keystoneUser creates Ironic's service user (admin of a project of its
// own, with the service role) for keystonemiddleware's token checks.
func (i *Ironic) keystoneUser(ctx context.Context) error {
	k := i.opts.Keystone
	suffix := randomHex(4)
	i.svcUser, i.svcPass = "ironic-"+suffix, "ironic-pw-"+suffix
	pid, err := k.CreateProject(ctx, "service-"+suffix)
	if err != nil {
		return fmt.Errorf("keystone: Ironic's service project: %w", err)
	}
	uid, err := k.CreateUser(ctx, i.svcUser, i.svcPass)
	if err != nil {
		return fmt.Errorf("keystone: Ironic's service user: %w", err)
	}
	for _, role := range []string{"admin", "service"} {
		if err := k.GrantProjectRole(ctx, uid, pid, role); err != nil {
			return fmt.Errorf("keystone: granting %s to Ironic's service user: %w", role, err)
		}
	}
	i.svcUser += "@service-" + suffix // user@project, split again in config
	return nil
}

// config is the ironic.conf of one process: host is [DEFAULT]host and the
// json-rpc address (the API's is unused: it only calls out).
func (i *Ironic) config(host string, rpcPort int) string {
	dbURL, _ := psycopgURL(i.server, i.Database)
	var b strings.Builder
	fmt.Fprintf(&b, `[DEFAULT]
host = %[1]s
auth_strategy = %[2]s
rpc_transport = json-rpc
debug = %[3]t
use_stderr = false
state_path = %[4]s/state
tempdir = %[4]s/tmp
enabled_hardware_types = fake-hardware
enabled_bios_interfaces = fake,no-bios
default_bios_interface = fake
enabled_boot_interfaces = fake
default_boot_interface = fake
enabled_console_interfaces = fake,no-console
default_console_interface = fake
enabled_deploy_interfaces = fake
default_deploy_interface = fake
enabled_inspect_interfaces = fake,no-inspect
default_inspect_interface = fake
enabled_management_interfaces = fake
default_management_interface = fake
enabled_network_interfaces = noop
default_network_interface = noop
enabled_power_interfaces = fake
default_power_interface = fake
enabled_raid_interfaces = fake,no-raid
default_raid_interface = fake
enabled_rescue_interfaces = fake,no-rescue
default_rescue_interface = fake
enabled_storage_interfaces = noop,fake
default_storage_interface = noop
enabled_vendor_interfaces = fake,no-vendor
default_vendor_interface = fake
`, host, i.opts.AuthStrategy, i.opts.Debug, i.Dir)
	if i.opts.AuthStrategy == IronicHTTPBasic {
		fmt.Fprintf(&b, "http_basic_auth_user_file = %s/etc/htpasswd\n", i.Dir)
	}
	fmt.Fprintf(&b, `
[api]
host_ip = 127.0.0.1
port = %[1]s
api_workers = %[6]d

[oslo_middleware]
# Links in answers name the proxy in front (X-Forwarded-Host/-Proto), as
# metalloc in front of Ironic forwards them.
enable_proxy_headers_parsing = %[7]t

[json_rpc]
auth_strategy = noauth
host_ip = %[2]s
port = %[3]d

[database]
connection = %[4]s

[conductor]
automated_clean = false

[dhcp]
dhcp_provider = none

[oslo_concurrency]
lock_path = %[5]s/lock

[pxe]
tftp_root = %[5]s/tftpboot
tftp_master_path = %[5]s/tftpboot/master_images
images_path = %[5]s/images
instance_master_path = %[5]s/master_images

[deploy]
http_root = %[5]s/httpboot
http_url = http://127.0.0.1:1/
`, strings.TrimPrefix(i.listen, "127.0.0.1:"), host, rpcPort, dbURL, i.Dir, i.opts.APIWorkers, !i.opts.NoProxyHeaders)
	if i.opts.AuthStrategy == IronicKeystone {
		user, project, _ := strings.Cut(i.svcUser, "@")
		base := strings.TrimSuffix(i.opts.Keystone.Endpoint(), "/v3")
		fmt.Fprintf(&b, `
[keystone_authtoken]
www_authenticate_uri = %[1]s
auth_url = %[1]s
auth_type = password
username = %[2]s
password = %[3]s
project_name = %[4]s
user_domain_name = Default
project_domain_name = Default

[oslo_policy]
enforce_scope = true
enforce_new_defaults = true
`, base, user, i.svcPass, project)
	} else {
		b.WriteString("\n[oslo_policy]\nenforce_scope = false\nenforce_new_defaults = false\n")
	}
	return b.String()
}

// startAll starts the API and every conductor at once (Python start-up
// dominates; they do not wait for each other).
func (i *Ironic) startAll() error {
	if err := i.startAPI(); err != nil {
		return err
	}
	for n := range i.Hosts {
		if err := i.startConductor(n); err != nil {
			return err
		}
	}
	return nil
}

func (i *Ironic) startAPI() error {
	argv := []string{"/usr/bin/python3", "/usr/bin/ironic-api",
		"--config-file", i.confPath("api"), "--log-file", filepath.Join(i.LogDir, "api.log")}
	if i.opts.UWSGI {
		ini, err := i.uwsgiINI()
		if err != nil {
			return err
		}
		argv = []string{uwsgiBinary, "--ini", ini}
	}
	g, err := child.StartGroup("ironic-api", argv, nil, filepath.Join(i.LogDir, "api.out"), i.opts.Log)
	if err != nil {
		return err
	}
	i.mu.Lock()
	i.api = g
	i.mu.Unlock()
	return nil
}

// debianUWSGIINI is the uWSGI configuration of Debian's ironic-api
// package, and uwsgiBinary the server its init script runs.
const (
	debianUWSGIINI = "/etc/ironic/ironic-api-uwsgi.ini"
	uwsgiBinary    = "/usr/bin/uwsgi_python3"
)

// uwsgiINI writes the API's uWSGI configuration (UWSGI): Debian's ini
// without the settings that belong to the installed service (user, group,
// working directory, log file, process count), followed by this Ironic's
// socket, configuration file and log, and the processes of APIWorkers
// when set. It returns the file's path.
func (i *Ironic) uwsgiINI() (string, error) {
	raw, err := os.ReadFile(debianUWSGIINI)
	if err != nil {
		return "", fmt.Errorf("ironic-api under uWSGI needs Debian's %s (package ironic-api): %w", debianUWSGIINI, err)
	}
	var b strings.Builder
	for _, line := range strings.Split(string(raw), "\n") {
		key, _, _ := strings.Cut(line, "=")
		switch strings.TrimSpace(key) {
		case "uid", "gid", "chdir", "logto", "http-socket", "socket", "pyargv":
			continue
		case "processes":
			if i.opts.APIWorkers > 0 {
				continue
			}
		}
		b.WriteString(line + "\n")
	}
	fmt.Fprintf(&b, "http-socket = %s\nchdir = %s\nlogto = %s\npyargv = --config-file %s --log-file %s\n",
		i.listen, filepath.Join(i.Dir, "state"), filepath.Join(i.LogDir, "api-uwsgi.log"),
		i.confPath("api"), filepath.Join(i.LogDir, "api.log"))
	if i.opts.APIWorkers > 0 {
		fmt.Fprintf(&b, "processes = %d\n", i.opts.APIWorkers)
	}
	path := filepath.Join(i.Dir, "etc", "api-uwsgi.ini")
	return path, os.WriteFile(path, []byte(b.String()), 0o644)
}

func (i *Ironic) startConductor(n int) error {
	name := conductorName(n)
	g, err := child.StartGroup("ironic-"+name, []string{"/usr/bin/python3", "/usr/bin/ironic-conductor",
		"--config-file", i.confPath(name), "--log-file", filepath.Join(i.LogDir, name+".log")},
		nil, filepath.Join(i.LogDir, name+".out"), i.opts.Log)
	if err != nil {
		return err
	}
	i.mu.Lock()
	for len(i.conductors) <= n {
		i.conductors = append(i.conductors, nil)
	}
	i.conductors[n] = g
	i.mu.Unlock()
	return nil
}

// waitReady waits until GET /v1/conductors lists every conductor of
// this Ironic alive (the API answering alone is not enough: a request
// for a node needs the hash ring of live conductors).
func (i *Ironic) waitReady(ctx context.Context, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	var last string
	for {
		if err := i.exited(); err != nil {
			return fmt.Errorf("%w; see %s", err, i.LogDir)
		}
		var out struct {
			Conductors []struct {
				Hostname string `json:"hostname"`
				Alive    bool   `json:"alive"`
			} `json:"conductors"`
		}
		status, err := i.Do(ctx, http.MethodGet, "/v1/conductors?fields=hostname,alive", nil, &out)
		if err == nil && status == http.StatusOK {
			alive := 0
			for _, c := range out.Conductors {
				for _, h := range i.Hosts {
					if c.Alive && c.Hostname == h {
						alive++
					}
				}
			}
			if alive == len(i.Hosts) {
				return nil
			}
			last = fmt.Sprintf("%d of %d conductors alive", alive, len(i.Hosts))
		} else if err != nil {
			last = err.Error()
		} else {
			last = "status " + strconv.Itoa(status)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("Ironic at %s not ready within %s (%s); see %s\n%s", i.URL, timeout, last, i.LogDir, i.LogTail(20))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// exited returns an error naming a process of this Ironic that has exited
// without being stopped.
func (i *Ironic) exited() error {
	i.mu.Lock()
	defer i.mu.Unlock()
	for _, g := range append([]*child.Group{i.api}, i.conductors...) {
		if g != nil {
			if err := g.Exited(); err != nil {
				return err
			}
		}
	}
	return nil
}

// Stop ends every process (SIGTERM to each process group, SIGKILL after
// 10 s) and drops the database. Calling it again does nothing.
func (i *Ironic) Stop() {
	i.mu.Lock()
	if i.stopped {
		i.mu.Unlock()
		return
	}
	i.stopped = true
	all := append([]*child.Group{i.api}, i.conductors...)
	i.mu.Unlock()
	var wg sync.WaitGroup
	for _, g := range all {
		if g != nil {
			wg.Add(1)
			go func() { defer wg.Done(); g.Stop() }()
		}
	}
	wg.Wait()
	if i.Database != "" {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := execSQL(ctx, i.server, "DROP DATABASE IF EXISTS "+pgx.Identifier{i.Database}.Sanitize()+" WITH (FORCE)"); err != nil {
			i.opts.Log.Warn("dropping Ironic's database", zap.String("database", i.Database), zap.Error(err))
		}
	}
}

// StopAPI stops ironic-api alone (the conductors keep running): Ironic is
// unreachable until StartAPI.
func (i *Ironic) StopAPI() {
	i.mu.Lock()
	g := i.api
	i.mu.Unlock()
	if g != nil {
		g.Stop()
	}
}

// StartAPI starts ironic-api again on the same address after StopAPI and
// waits until it answers with every conductor alive.
func (i *Ironic) StartAPI(ctx context.Context) error {
	if err := i.startAPI(); err != nil {
		return err
	}
	return i.waitReady(ctx, 2*time.Minute)
}

// KillConductor ends conductor n (0-based) with SIGKILL, as a crash.
func (i *Ironic) KillConductor(n int) {
	i.mu.Lock()
	g := i.conductors[n]
	i.mu.Unlock()
	g.Kill()
}

// AdminHeaders are the headers of a request as Ironic's administrator:
// none with noauth, the first BasicUsers entry (by name) with http_basic,
// a system-scoped admin token with keystone.
func (i *Ironic) AdminHeaders(ctx context.Context) (http.Header, error) {
	h := http.Header{}
	switch i.opts.AuthStrategy {
	case IronicHTTPBasic:
		names := make([]string, 0, len(i.opts.BasicUsers))
		for n := range i.opts.BasicUsers {
			names = append(names, n)
		}
		sort.Strings(names)
		req := http.Request{Header: h}
		req.SetBasicAuth(names[0], i.opts.BasicUsers[names[0]])
	case IronicKeystone:
		tok, err := i.opts.Keystone.AdminToken(ctx)
		if err != nil {
			return nil, err
		}
		h.Set("X-Auth-Token", tok)
	}
	return h, nil
}

// Do sends one request to Ironic's API as its administrator (AdminHeaders)
// at microversion 1.82, with body (if not nil) as JSON, decodes a JSON
// answer into out (if not nil and the status is 2xx) and returns the
// status. A status that is not 2xx is returned with an error carrying
// Ironic's message.
func (i *Ironic) Do(ctx context.Context, method, path string, body, out any) (int, error) {
	h, err := i.AdminHeaders(ctx)
	if err != nil {
		return 0, err
	}
	var rd io.Reader
	if body != nil {
		raw, err := json.Marshal(body)
		if err != nil {
			return 0, err
		}
		rd = bytes.NewReader(raw)
	}
	req, err := http.NewRequestWithContext(ctx, method, i.URL+path, rd)
	if err != nil {
		return 0, err
	}
	req.Header = h
	req.Header.Set("X-OpenStack-Ironic-API-Version", "1.82")
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if resp.StatusCode/100 != 2 {
		return resp.StatusCode, fmt.Errorf("ironic %s %s: %s: %s", method, path, resp.Status, bytes.TrimSpace(data))
	}
	if out != nil && len(data) > 0 {
		if err := json.Unmarshal(data, out); err != nil {
			return resp.StatusCode, fmt.Errorf("ironic %s %s: %w", method, path, err)
		}
	}
	return resp.StatusCode, nil
}

// LogTail returns the last n lines of each log file of this Ironic, for a
// failing test's output.
func (i *Ironic) LogTail(n int) string {
	files, _ := filepath.Glob(filepath.Join(i.LogDir, "*"))
	var b strings.Builder
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil || len(data) == 0 {
			continue
		}
		lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
		if len(lines) > n {
			lines = lines[len(lines)-n:]
		}
		fmt.Fprintf(&b, "==> %s <==\n%s\n", f, strings.Join(lines, "\n"))
	}
	return b.String()
}

// conductorAddresses picks n loopback addresses of a random 127.x.y.0/24
// (Ironic's json-rpc client calls a conductor at its hostname and the one
// [json_rpc]port of the whole deployment) and a port free on all of them.
func conductorAddresses(n int) ([]string, int, error) {
	for range 20 {
		a, _ := rand.Int(rand.Reader, big.NewInt(250))
		b, _ := rand.Int(rand.Reader, big.NewInt(250))
		hosts := make([]string, n)
		for k := range hosts {
			hosts[k] = fmt.Sprintf("127.%d.%d.%d", a.Int64()+2, b.Int64()+2, k+1)
		}
		l, err := net.Listen("tcp", hosts[0]+":0")
		if err != nil {
			return nil, 0, err
		}
		port := l.Addr().(*net.TCPAddr).Port
		ok := true
		var held []net.Listener
		for _, h := range hosts[1:] {
			o, err := net.Listen("tcp", net.JoinHostPort(h, strconv.Itoa(port)))
			if err != nil {
				ok = false
				break
			}
			held = append(held, o)
		}
		l.Close()
		for _, o := range held {
			o.Close()
		}
		if ok {
			return hosts, port, nil
		}
	}
	return nil, 0, errors.New("devstack: no json-rpc port free on the conductors' loopback addresses")
}

// ensureIronicTemplate returns the name of a template database holding
// Ironic's schema, creating it with `ironic-dbsync create_schema` when no
// ready one exists (one per set of Ironic migrations; marked IS_TEMPLATE
// once complete, an unfinished one is rebuilt). dir is scratch space for
// its configuration.
func ensureIronicTemplate(ctx context.Context, server, dir string, log *zap.Logger) (string, error) {
	hash, err := ironicSchemaHash()
	if err != nil {
		return "", err
	}
	name := "ironic_tmpl_" + hash[:12]
	conn, err := pgx.Connect(ctx, server)
	if err != nil {
		return "", fmt.Errorf("connecting to PostgreSQL for Ironic's database: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if _, err := conn.Exec(ctx, "SELECT pg_advisory_lock($1)", ironicTemplateLock); err != nil {
		return "", err
	}
	defer func() {
		_, _ = conn.Exec(context.WithoutCancel(ctx), "SELECT pg_advisory_unlock($1)", ironicTemplateLock)
	}()
	var ready *bool
	err = conn.QueryRow(ctx, "SELECT datistemplate FROM pg_database WHERE datname = $1", name).Scan(&ready)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return "", err
	}
	if ready != nil && *ready {
		return name, nil
	}
	id := pgx.Identifier{name}.Sanitize()
	if ready != nil {
		if _, err := conn.Exec(ctx, "DROP DATABASE "+id+" WITH (FORCE)"); err != nil {
			return "", err
		}
	}
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+id); err != nil {
		return "", err
	}
	dbURL, err := psycopgURL(server, name)
	if err != nil {
		return "", err
	}
	conf := filepath.Join(dir, "etc", "ironic-dbsync.conf")
	if err := os.WriteFile(conf, []byte("[DEFAULT]\nuse_stderr = true\n[database]\nconnection = "+dbURL+"\n"), 0o644); err != nil {
		return "", err
	}
	log.Info("ironic-dbsync create_schema", zap.String("template", name))
	syncCtx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(syncCtx, "/usr/bin/python3", "/usr/bin/ironic-dbsync", "--config-file", conf, "create_schema").CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("ironic-dbsync create_schema: %w\n%s", err, out)
	}
	if _, err := conn.Exec(ctx, "ALTER DATABASE "+id+" WITH ALLOW_CONNECTIONS false IS_TEMPLATE true"); err != nil {
		return "", err
	}
	return name, nil
}

// ironicSchemaHash identifies the installed Ironic's schema: the hex
// sha256 of its alembic migration file names.
func ironicSchemaHash() (string, error) {
	files, err := filepath.Glob("/usr/lib/python3/dist-packages/ironic/db/sqlalchemy/alembic/versions/*.py")
	if err != nil || len(files) == 0 {
		return "", fmt.Errorf("no Ironic migrations found (is python3-ironic installed? apt-get install -y %s)", IronicPackages)
	}
	sort.Strings(files)
	h := sha256.New()
	for _, f := range files {
		h.Write([]byte(filepath.Base(f) + "\x00"))
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// psycopgURL turns the libpq URL server into SQLAlchemy's URL for database
// name (postgresql+psycopg2://user:password@host:port/name?sslmode=...).
func psycopgURL(server, name string) (string, error) {
	u, err := neturl.Parse(server)
	if err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") {
		return "", fmt.Errorf("devstack: DatabaseURL must be a postgres:// URL")
	}
	u.Scheme = "postgresql+psycopg2"
	u.Path = "/" + name
	u.RawPath = ""
	return u.String(), nil
}

// execSQL runs one statement on a short-lived connection to server.
func execSQL(ctx context.Context, server, sql string) error {
	conn, err := pgx.Connect(ctx, server)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	_, err = conn.Exec(ctx, sql)
	return err
}

// writeHtpasswd writes users as an Apache htpasswd file with bcrypt
// entries (what Ironic's http_basic reads).
func writeHtpasswd(path string, users map[string]string) error {
	var b strings.Builder
	for name, pw := range users {
		hash, err := bcrypt.GenerateFromPassword([]byte(pw), bcrypt.MinCost)
		if err != nil {
			return err
		}
		fmt.Fprintf(&b, "%s:%s\n", name, hash)
	}
	return os.WriteFile(path, []byte(b.String()), 0o600)
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
