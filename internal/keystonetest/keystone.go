// Package keystonetest starts the reference Keystone (OpenStack Identity,
// from Debian's python3-keystone) for the tests of keystone mode (package
// auth, e2e): test-only, so apart from devstack, which the commands link.
package keystonetest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/metalloc/metalloc/internal/freeport"
	"github.com/metalloc/metalloc/internal/wsgi"
)

// KeystonePackages are the Debian packages StartKeystone needs (Keystone 22,
// Zed, served by gunicorn).
const KeystonePackages = "python3-keystone gunicorn python3-gunicorn"

// KeystoneAdminPassword is the password of the bootstrap user "admin"
// (system admin, and admin of project "admin").
const KeystoneAdminPassword = "metalloc-test-admin"

// Keystone is a running OpenStack Keystone v3 on a private sqlite database,
// started from Debian's python3-keystone under gunicorn with Fernet tokens,
// bootstrapped (`keystone-manage bootstrap`: user, project and role
// "admin", roles "member" and "reader", the identity service in region
// RegionOne). Its methods call Keystone's REST API as the admin, as an
// operator (or the openstack CLI) would.
type Keystone struct {
	// URL is the identity endpoint, e.g. http://127.0.0.1:35000/v3.
	URL     string
	Dir     string
	LogPath string
	*wsgi.Process

	mu         sync.Mutex
	adminToken string
}

// wsgiShim loads Keystone's public WSGI application. oslo.config parses
// sys.argv when the application starts, where it would find gunicorn's own
// arguments; the shim clears them first.
const wsgiShim = `import sys
sys.argv = sys.argv[:1]
from keystone.server import wsgi
application = wsgi.initialize_public_application()
`

// StartKeystone sets up and starts a Keystone in dir (its configuration,
// sqlite database, Fernet and credential keys and log) on a free loopback
// port, and waits until it issues the admin a token (about 10 s on this
// machine). The packages in KeystonePackages must be installed; when they
// are not, the error says how to install them. Stop ends it.
func StartKeystone(ctx context.Context, dir string, log *zap.Logger) (*Keystone, error) {
	if log == nil {
		log = zap.NewNop()
	}
	manage, err := exec.LookPath("keystone-manage")
	if err != nil {
		return nil, fmt.Errorf("Keystone is not installed (keystone-manage not found): apt-get install -y %s", KeystonePackages)
	}
	if dir, err = filepath.Abs(dir); err != nil {
		return nil, err
	}
	etc := filepath.Join(dir, "etc")
	if err := os.MkdirAll(etc, 0o755); err != nil {
		return nil, err
	}
	port, err := freeport.Pick()
	if err != nil {
		return nil, err
	}
	listen := "127.0.0.1:" + strconv.Itoa(port)
	url := "http://" + listen + "/v3"
	logPath := filepath.Join(dir, "keystone.log")
	conf := fmt.Sprintf(`[DEFAULT]
log_file = %[1]s
[database]
connection = sqlite:///%[2]s/keystone.sqlite
[token]
provider = fernet
expiration = 3600
[fernet_tokens]
key_repository = %[2]s/fernet-keys
[fernet_receipts]
key_repository = %[2]s/fernet-keys
[credential]
key_repository = %[2]s/credential-keys
`, logPath, dir)
	confPath := filepath.Join(etc, "keystone.conf")
	if err := os.WriteFile(confPath, []byte(conf), 0o644); err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(dir, "metalloc_keystone_wsgi.py"), []byte(wsgiShim), 0o644); err != nil {
		return nil, err
	}
	u, err := user.Current()
	if err != nil {
		return nil, err
	}
	g, err := user.LookupGroupId(u.Gid)
	if err != nil {
		return nil, err
	}
	env := append(os.Environ(), "OS_KEYSTONE_CONFIG_DIR="+etc)
	// Each keystone-manage run is a Python start of about 10 s here and
	// of up to a minute on a loaded CI machine; only the bootstrap depends
	// on this instance (its URL goes into the catalog), so the database
	// schema and the keys come from a template made once per test process.
	setupCtx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	defer cancel()
	tmpl, err := keystoneTemplate(setupCtx, manage, u.Username, g.Name, log)
	if err != nil {
		return nil, err
	}
	if err := copyTree(tmpl, dir); err != nil {
		return nil, fmt.Errorf("copying Keystone's template %s: %w", tmpl, err)
	}
	log.Info("keystone-manage", zap.String("step", "bootstrap"))
	c := exec.CommandContext(setupCtx, manage, "--config-file", confPath, "bootstrap",
		"--bootstrap-password", KeystoneAdminPassword, "--bootstrap-region-id", "RegionOne",
		"--bootstrap-admin-url", url, "--bootstrap-internal-url", url, "--bootstrap-public-url", url)
	c.Env = env
	if out, err := c.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("keystone-manage bootstrap: %w\n%s", err, out)
	}

	// In sqlite's default rollback journal a reader blocks writers, and
	// Keystone's requests overlap (a token check reads while a grant
	// writes): write-ahead logging lets them.
	wal := exec.CommandContext(setupCtx, "/usr/bin/python3", "-c",
		"import sqlite3,sys; sqlite3.connect(sys.argv[1]).execute('PRAGMA journal_mode=WAL')",
		filepath.Join(dir, "keystone.sqlite"))
	if out, err := wal.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("keystone.sqlite journal_mode=WAL: %w\n%s", err, out)
	}

	gp, err := wsgi.Start("Keystone", dir, listen, "metalloc_keystone_wsgi:application", logPath, env, log)
	if err != nil {
		return nil, err
	}
	k := &Keystone{URL: url, Dir: dir, LogPath: logPath, Process: gp}

	deadline := time.Now().Add(5 * time.Minute)
	for {
		if err := k.Exited(); err != nil {
			return nil, fmt.Errorf("%w; see %s", err, logPath)
		}
		if _, err := k.admin(ctx); err == nil {
			break
		}
		if time.Now().After(deadline) {
			k.Stop()
			return nil, fmt.Errorf("Keystone did not issue a token on %s within 5 minutes; see %s", url, logPath)
		}
		select {
		case <-ctx.Done():
			k.Stop()
			return nil, ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
	log.Info("Keystone up", zap.String("url", url), zap.String("log", logPath))
	return k, nil
}

// Stop ends Keystone (SIGTERM to its process group, SIGKILL after 10 s).
// Calling it again does nothing.
func (k *Keystone) Stop() { k.Process.Stop() }

// Endpoint is the identity endpoint (URL; devstack.IronicIdentity).
func (k *Keystone) Endpoint() string { return k.URL }

// AdminToken is the bootstrap admin's system-scoped token, got once
// (devstack.IronicIdentity).
func (k *Keystone) AdminToken(ctx context.Context) (string, error) { return k.admin(ctx) }

// Scope is what a token is scoped to: a project (by name, in domain
// Default), the whole system, or nothing (an unscoped token).
type Scope struct {
	Project string
	System  bool
}

// Token authenticates user (domain Default) with password and returns a
// token scoped as scope.
func (k *Keystone) Token(ctx context.Context, user, password string, scope Scope) (string, error) {
	auth := map[string]any{"identity": map[string]any{
		"methods": []string{"password"},
		"password": map[string]any{"user": map[string]any{
			"name": user, "password": password, "domain": map[string]string{"name": "Default"},
		}},
	}}
	switch {
	case scope.System:
		auth["scope"] = map[string]any{"system": map[string]bool{"all": true}}
	case scope.Project != "":
		auth["scope"] = map[string]any{"project": map[string]any{
			"name": scope.Project, "domain": map[string]string{"name": "Default"},
		}}
	}
	raw, _ := json.Marshal(map[string]any{"auth": auth})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, k.URL+"/auth/tokens", bytes.NewReader(raw))
	if err != nil {
		return "", err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	if resp.StatusCode != http.StatusCreated {
		return "", fmt.Errorf("keystone: token for %s: %s", user, resp.Status)
	}
	return resp.Header.Get("X-Subject-Token"), nil
}

// admin returns the admin's system-scoped token (got once).
func (k *Keystone) admin(ctx context.Context) (string, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.adminToken != "" {
		return k.adminToken, nil
	}
	tok, err := k.Token(ctx, "admin", KeystoneAdminPassword, Scope{System: true})
	if err != nil {
		return "", err
	}
	k.adminToken = tok
	return tok, nil
}

// call sends one admin request to Keystone's API (path under /v3) and
// decodes a JSON answer into out; extra holds additional headers.
func (k *Keystone) call(ctx context.Context, method, path string, body, out any, extra ...string) error {
	tok, err := k.admin(ctx)
	if err != nil {
		return err
	}
	var rd io.Reader
	if body != nil {
		raw, _ := json.Marshal(body)
		rd = bytes.NewReader(raw)
	}
	req, err := http.NewRequestWithContext(ctx, method, k.URL+path, rd)
	if err != nil {
		return err
	}
	req.Header.Set("X-Auth-Token", tok)
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(extra); i += 2 {
		req.Header.Set(extra[i], extra[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("keystone %s %s: %s: %s", method, path, resp.Status, bytes.TrimSpace(data))
	}
	if out != nil {
		return json.Unmarshal(data, out)
	}
	return nil
}

// CreateProject creates a project in domain Default and returns its id.
func (k *Keystone) CreateProject(ctx context.Context, name string) (string, error) {
	var out struct {
		Project struct {
			ID string `json:"id"`
		} `json:"project"`
	}
	err := k.call(ctx, http.MethodPost, "/projects", map[string]any{"project": map[string]any{
		"name": name, "domain_id": "default",
	}}, &out)
	return out.Project.ID, err
}

// CreateUser creates a user in domain Default and returns its id.
func (k *Keystone) CreateUser(ctx context.Context, name, password string) (string, error) {
	var out struct {
		User struct {
			ID string `json:"id"`
		} `json:"user"`
	}
	err := k.call(ctx, http.MethodPost, "/users", map[string]any{"user": map[string]any{
		"name": name, "password": password, "domain_id": "default",
	}}, &out)
	return out.User.ID, err
}

// RoleID returns the id of the role named name, creating it if missing.
func (k *Keystone) RoleID(ctx context.Context, name string) (string, error) {
	var list struct {
		Roles []struct {
			ID string `json:"id"`
		} `json:"roles"`
	}
	if err := k.call(ctx, http.MethodGet, "/roles?name="+name, nil, &list); err != nil {
		return "", err
	}
	if len(list.Roles) > 0 {
		return list.Roles[0].ID, nil
	}
	var out struct {
		Role struct {
			ID string `json:"id"`
		} `json:"role"`
	}
	err := k.call(ctx, http.MethodPost, "/roles", map[string]any{"role": map[string]string{"name": name}}, &out)
	return out.Role.ID, err
}

// GrantProjectRole gives userID the role named role on projectID.
func (k *Keystone) GrantProjectRole(ctx context.Context, userID, projectID, role string) error {
	rid, err := k.RoleID(ctx, role)
	if err != nil {
		return err
	}
	return k.call(ctx, http.MethodPut, "/projects/"+projectID+"/users/"+userID+"/roles/"+rid, nil, nil)
}

// GrantSystemRole gives userID the role named role on the whole system.
func (k *Keystone) GrantSystemRole(ctx context.Context, userID, role string) error {
	rid, err := k.RoleID(ctx, role)
	if err != nil {
		return err
	}
	return k.call(ctx, http.MethodPut, "/system/users/"+userID+"/roles/"+rid, nil, nil)
}

// AddEndpoint registers a service of type typ (e.g. "baremetal",
// "placement") named name with public, internal and admin endpoints at url
// in region RegionOne, so clients find it in their token's catalog.
func (k *Keystone) AddEndpoint(ctx context.Context, typ, name, url string) error {
	var svc struct {
		Service struct {
			ID string `json:"id"`
		} `json:"service"`
	}
	if err := k.call(ctx, http.MethodPost, "/services", map[string]any{"service": map[string]any{
		"type": typ, "name": name, "enabled": true,
	}}, &svc); err != nil {
		return err
	}
	for _, iface := range []string{"public", "internal", "admin"} {
		if err := k.call(ctx, http.MethodPost, "/endpoints", map[string]any{"endpoint": map[string]any{
			"service_id": svc.Service.ID, "interface": iface, "url": url, "region_id": "RegionOne",
		}}, nil); err != nil {
			return err
		}
	}
	return nil
}

// RevokeToken revokes token (DELETE /v3/auth/tokens), as `openstack token
// revoke` does.
func (k *Keystone) RevokeToken(ctx context.Context, token string) error {
	return k.call(ctx, http.MethodDelete, "/auth/tokens", nil, nil, "X-Subject-Token", token)
}

var (
	templateOnce sync.Once
	templateDir  string
	templateErr  error
)

// keystoneTemplate returns a directory, made once per process (under the
// system's temporary directory, removed by nothing: a few hundred KiB),
// holding keystone.sqlite with Keystone's schema (`keystone-manage
// db_sync`) and the Fernet and credential key repositories (fernet-keys,
// credential-keys), i.e. what StartKeystone's setup makes before the
// instance-specific bootstrap. Concurrent callers wait for the first.
func keystoneTemplate(ctx context.Context, manage, user, group string, log *zap.Logger) (string, error) {
	templateOnce.Do(func() {
		templateDir, templateErr = makeKeystoneTemplate(ctx, manage, user, group, log)
	})
	return templateDir, templateErr
}

func makeKeystoneTemplate(ctx context.Context, manage, user, group string, log *zap.Logger) (string, error) {
	dir, err := os.MkdirTemp("", "metalloc-keystone-template-")
	if err != nil {
		return "", err
	}
	etc := filepath.Join(dir, "etc")
	if err := os.MkdirAll(etc, 0o755); err != nil {
		return "", err
	}
	conf := fmt.Sprintf(`[DEFAULT]
use_stderr = true
[database]
connection = sqlite:///%[1]s/keystone.sqlite
[fernet_tokens]
key_repository = %[1]s/fernet-keys
[fernet_receipts]
key_repository = %[1]s/fernet-keys
[credential]
key_repository = %[1]s/credential-keys
`, dir)
	confPath := filepath.Join(etc, "keystone.conf")
	if err := os.WriteFile(confPath, []byte(conf), 0o644); err != nil {
		return "", err
	}
	env := append(os.Environ(), "OS_KEYSTONE_CONFIG_DIR="+etc)
	for _, args := range [][]string{
		{"db_sync"},
		{"fernet_setup", "--keystone-user", user, "--keystone-group", group},
		{"credential_setup", "--keystone-user", user, "--keystone-group", group},
	} {
		log.Info("keystone-manage (template)", zap.String("step", args[0]), zap.String("dir", dir))
		c := exec.CommandContext(ctx, manage, append([]string{"--config-file", confPath}, args...)...)
		c.Env = env
		if out, err := c.CombinedOutput(); err != nil {
			return "", fmt.Errorf("keystone-manage %s: %w\n%s", args[0], err, out)
		}
	}
	return dir, os.RemoveAll(etc)
}

// copyTree copies the regular files and directories under src into dst,
// keeping their permission bits (Keystone refuses key repositories that
// others can read).
func copyTree(src, dst string) error {
	return filepath.WalkDir(src, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, p)
		if err != nil {
			return err
		}
		to := filepath.Join(dst, rel)
		info, err := d.Info()
		if err != nil {
			return err
		}
		if d.IsDir() {
			return os.MkdirAll(to, info.Mode().Perm())
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(to, b, info.Mode().Perm())
	})
}
