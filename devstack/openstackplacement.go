package devstack

import (
	"context"
	"fmt"
	"net/http"
	neturl "net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/metalloc/metalloc/internal/freeport"
	"github.com/metalloc/metalloc/internal/wsgi"

	"github.com/metalloc/metalloc/placement/client"
)

// OpenStackPlacementPackages are the Debian packages StartOpenStackPlacement
// needs (OpenStack Placement 8.0, Zed, served by gunicorn).
const OpenStackPlacementPackages = "python3-placement placement-api gunicorn python3-gunicorn"

// OpenStackPlacement is a running OpenStack Placement (the reference
// implementation, Debian's python3-placement 8.0) on a private sqlite
// database, served by gunicorn on a free loopback port with
// auth_strategy = noauth2: send `X-Auth-Token: admin`.
type OpenStackPlacement struct {
	// URL is the API root, e.g. http://127.0.0.1:40123.
	URL string
	// Dir holds placement.conf, the sqlite database and the logs.
	Dir string
	// LogPath is gunicorn's and Placement's log.
	LogPath string
	*wsgi.Process
	log *zap.Logger
}

// StartOpenStackPlacement writes a placement.conf into dir (sqlite database
// dir/placement.sqlite, noauth2, no Keystone), creates the schema with
// `placement-manage db sync`, starts gunicorn serving
// placement.wsgi:init_application() on a free loopback port, and waits until
// `GET /` answers. gunicorn runs ONE sync worker: two worker processes on
// one sqlite file answer concurrent writes with 500 "database is locked"
// (sqlite refuses a read-to-write lock upgrade at once, without waiting),
// which a PostgreSQL-backed Placement never does. One worker serializes
// the requests (about 10 ms each for provider writes on this machine). The packages in OpenStackPlacementPackages must be
// installed; when they are not, the error says how to install them.
// Stop ends it.
func StartOpenStackPlacement(ctx context.Context, dir string, log *zap.Logger) (*OpenStackPlacement, error) {
	if log == nil {
		log = zap.NewNop()
	}
	manage, err := exec.LookPath("placement-manage")
	if err != nil {
		return nil, fmt.Errorf("OpenStack Placement is not installed (placement-manage not found): "+
			"apt-get install -y %s", OpenStackPlacementPackages)
	}
	dir, err = filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	etc := filepath.Join(dir, "etc")
	if err := os.MkdirAll(etc, 0o755); err != nil {
		return nil, err
	}
	logPath := filepath.Join(dir, "openstack-placement.log")
	conf := fmt.Sprintf(`[DEFAULT]
debug = false
log_file = %s
[api]
auth_strategy = noauth2
[placement_database]
connection = sqlite:///%s
# A throw-away test database: no fsync per commit.
sqlite_synchronous = false
`, logPath, filepath.Join(dir, "placement.sqlite"))
	if err := os.WriteFile(filepath.Join(etc, "placement.conf"), []byte(conf), 0o644); err != nil {
		return nil, err
	}
	env := append(os.Environ(), "OS_PLACEMENT_CONFIG_DIR="+etc)

	syncCtx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	dbsync := exec.CommandContext(syncCtx, manage, "--config-file", filepath.Join(etc, "placement.conf"), "db", "sync")
	dbsync.Env = env
	if out, err := dbsync.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("placement-manage db sync: %w\n%s", err, out)
	}

	port, err := freeport.Pick()
	if err != nil {
		return nil, err
	}
	listen := "127.0.0.1:" + strconv.Itoa(port)
	g, err := wsgi.Start("OpenStack Placement", dir, listen, "placement.wsgi:init_application()", logPath, env, log)
	if err != nil {
		return nil, err
	}
	p := &OpenStackPlacement{URL: "http://" + listen, Dir: dir, LogPath: logPath, Process: g, log: log}

	deadline := time.Now().Add(60 * time.Second)
	for {
		if err := p.Exited(); err != nil {
			return nil, fmt.Errorf("%w; see %s", err, logPath)
		}
		resp, err := http.Get(p.URL + "/")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		if time.Now().After(deadline) {
			p.Stop()
			return nil, fmt.Errorf("OpenStack Placement did not answer on %s within 60s; see %s", p.URL, logPath)
		}
		select {
		case <-ctx.Done():
			p.Stop()
			return nil, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	log.Info("OpenStack Placement up", zap.String("url", p.URL), zap.String("log", logPath))
	return p, nil
}

// Stop terminates gunicorn and its workers (the whole process group):
// SIGTERM, then SIGKILL after 10 s. Calling it again does nothing.
func (p *OpenStackPlacement) Stop() { p.Process.Stop() }

// placementCount counts the resource providers of the Placement service at
// url that match q (GET /resource_providers?q, as noauth2 admin).
func placementCount(ctx context.Context, url string, q neturl.Values) (int, error) {
	ps, err := client.New(url, "admin", 30*time.Second).ListProviders(ctx, q)
	return len(ps), err
}

// WaitPlacementCapacity waits up to timeout until, for every resource
// class rc in want (a Placement name, e.g. CUSTOM_BENCH_0), exactly
// want[rc] providers of the Placement service at url can take one unit
// (GET /resource_providers?resources=rc:1): every node enrolled and made
// available has been mirrored and is no longer reserved.
func WaitPlacementCapacity(ctx context.Context, url string, want map[string]int, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		var short []string
		for rc, n := range want {
			have, err := placementCount(ctx, url, neturl.Values{"resources": {rc + ":1"}})
			if err != nil {
				short = append(short, fmt.Sprintf("%s: %v", rc, err))
			} else if have != n {
				short = append(short, fmt.Sprintf("%s: %d of %d providers free", rc, have, n))
			}
		}
		if len(short) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("placement at %s not mirrored after %s: %s", url, timeout, strings.Join(short, "; "))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
}
