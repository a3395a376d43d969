package ironic

import (
	"context"
	"encoding/json"
	"encoding/pem"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"

	"github.com/metalloc/metalloc/auth"
	"github.com/metalloc/metalloc/devstack"
	"github.com/metalloc/metalloc/internal/keystonetest"
	"github.com/metalloc/metalloc/web"
)

// TestClient: against the real Ironic, the client negotiates 1.82 (or
// uses the pinned microversion, which decides the fields it reads), pages
// through nodes, and maps Ironic's errors to *Error with Ironic's
// faultstring; an unreachable Ironic is IsUnavailable. Options it cannot
// work with are refused before any request.
func TestClient(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ir := shared(t)
	p := "cl-" + uuid.NewString()[:8] + "-"
	_, err := ir.EnrollAvailable(ctx, []devstack.IronicNode{{Name: p + "a"}, {Name: p + "b"}, {Name: p + "c"}}, 3)
	require.NoError(t, err)

	c, err := NewClient(Options{Endpoint: ir.URL + "/v1/"})
	require.NoError(t, err)
	require.Equal(t, ir.URL, c.Root())
	mv, err := c.Microversion(ctx)
	require.NoError(t, err)
	require.Equal(t, web.Version{Major: 1, Minor: 82}, mv)
	lo, hi, err := c.Versions(ctx)
	require.NoError(t, err)
	require.Equal(t, "1.1", lo.String())
	require.Equal(t, "1.82", hi.String())

	seen := map[string]bool{}
	marker := ""
	for pages := 0; ; pages++ {
		require.Less(t, pages, 1000)
		page, err := c.ListNodes(ctx, marker, 2)
		require.NoError(t, err)
		require.LessOrEqual(t, len(page.Nodes), 2)
		for _, u := range page.UUIDs {
			require.False(t, seen[u], "node %s listed twice", u)
			seen[u] = true
		}
		if !page.More {
			break
		}
		marker = page.UUIDs[len(page.UUIDs)-1]
	}
	require.GreaterOrEqual(t, len(seen), 3)

	raw, err := c.GetNode(ctx, p+"a")
	require.NoError(t, err)
	var doc map[string]any
	require.NoError(t, json.Unmarshal(raw, &doc))
	require.Contains(t, doc, "shard")
	require.Contains(t, doc, "lessee")

	_, err = c.GetNode(ctx, p+"missing")
	require.True(t, IsNotFound(err), "%v", err)
	var ie *Error
	require.ErrorAs(t, err, &ie)
	require.Equal(t, "Node "+p+"missing could not be found.", ie.Message)
	require.False(t, IsUnavailable(err))

	// Pinned: 1.70 has no shard field.
	pinned, err := NewClient(Options{Endpoint: ir.URL, Microversion: "1.70"})
	require.NoError(t, err)
	raw, err = pinned.GetNode(ctx, p+"a")
	require.NoError(t, err)
	doc = nil
	require.NoError(t, json.Unmarshal(raw, &doc))
	require.NotContains(t, doc, "shard")
	require.Contains(t, doc, "lessee")

	// Nobody listens there.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	dead := "http://" + l.Addr().String()
	l.Close()
	down, err := NewClient(Options{Endpoint: dead, Timeout: 5 * time.Second})
	require.NoError(t, err)
	_, err = down.GetNode(ctx, "x")
	require.True(t, IsUnavailable(err), "%v", err)

	for _, bad := range []Options{
		{},
		{Endpoint: "ironic:6385"},
		{Endpoint: ir.URL, AuthStrategy: "token"},
		{Endpoint: ir.URL, AuthStrategy: AuthHTTPBasic},
		{Endpoint: ir.URL, AuthStrategy: AuthKeystone},
		{Endpoint: ir.URL, Microversion: "1.64"},
		{Endpoint: ir.URL, Microversion: "1.99"},
		{Endpoint: ir.URL, Microversion: "one"},
		{Endpoint: ir.URL, CAFile: filepath.Join(t.TempDir(), "missing.pem")},
	} {
		_, err := NewClient(bad)
		require.Error(t, err, "%+v", bad)
	}
}

// TestClientHTTPBasic: with http_basic the client sends ironic.username
// and ironic.password; wrong ones are Ironic's 401.
func TestClientHTTPBasic(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ir := startIronic(t, devstack.IronicOptions{AuthStrategy: devstack.IronicHTTPBasic, Conductors: 1,
		BasicUsers: map[string]string{"metalloc": "s3cret"}})
	c, err := NewClient(Options{Endpoint: ir.URL, AuthStrategy: AuthHTTPBasic, Username: "metalloc", Password: "s3cret"})
	require.NoError(t, err)
	_, err = c.ListNodes(ctx, "", 10)
	require.NoError(t, err)
	bad, err := NewClient(Options{Endpoint: ir.URL, AuthStrategy: AuthHTTPBasic, Username: "metalloc", Password: "nope"})
	require.NoError(t, err)
	_, err = bad.ListNodes(ctx, "", 10)
	require.Equal(t, http.StatusUnauthorized, StatusOf(err), "%v", err)
}

// TestClientKeystone: with keystone the client authenticates as the
// keystone section's user, scoped to the system by default (Ironic's
// secure RBAC lists every node to a system reader), or to its project
// (Ironic then shows that project's nodes only).
func TestClientKeystone(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ks, err := keystonetest.StartKeystone(ctx, t.TempDir(), zaptest.NewLogger(t))
	require.NoError(t, err, "this test needs Keystone: apt-get install -y %s", keystonetest.KeystonePackages)
	t.Cleanup(ks.Stop)
	ir := startIronic(t, devstack.IronicOptions{AuthStrategy: devstack.IronicKeystone, Keystone: ks, Conductors: 1})

	pid, err := ks.CreateProject(ctx, "tenant")
	require.NoError(t, err)
	uid, err := ks.CreateUser(ctx, "metalloc", "metalloc-pw")
	require.NoError(t, err)
	require.NoError(t, ks.GrantSystemRole(ctx, uid, "reader"))
	require.NoError(t, ks.GrantProjectRole(ctx, uid, pid, "member"))
	_, err = ir.EnrollAvailable(ctx, []devstack.IronicNode{{Name: "ks-a", Owner: pid}, {Name: "ks-b"}}, 2)
	require.NoError(t, err)

	kc := auth.KeystoneConfig{AuthURL: ks.URL, Username: "metalloc", Password: "metalloc-pw", ProjectName: "tenant"}
	sys, err := NewClient(Options{Endpoint: ir.URL, AuthStrategy: AuthKeystone, Keystone: kc})
	require.NoError(t, err)
	page, err := sys.ListNodes(ctx, "", 10)
	require.NoError(t, err)
	require.Len(t, page.Nodes, 2)
	proj, err := NewClient(Options{Endpoint: ir.URL, AuthStrategy: AuthKeystone, Keystone: kc, KeystoneScope: "project"})
	require.NoError(t, err)
	page, err = proj.ListNodes(ctx, "", 10)
	require.NoError(t, err)
	require.Len(t, page.Nodes, 1, "Ironic's project scoping")

	wrong := kc
	wrong.Password = "nope"
	bad, err := NewClient(Options{Endpoint: ir.URL, AuthStrategy: AuthKeystone, Keystone: wrong})
	require.NoError(t, err)
	_, err = bad.ListNodes(ctx, "", 10)
	require.Equal(t, http.StatusUnauthorized, StatusOf(err), "%v", err)
}

// TestClientCAFile: an https Ironic is verified with ironic.ca_file, and
// refused (unreachable: the TLS handshake fails) without it.
func TestClientCAFile(t *testing.T) {
	t.Parallel()
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"default_version": {"min_version": "1.1", "version": "1.82"}}`))
	}))
	t.Cleanup(srv.Close)
	ca := filepath.Join(t.TempDir(), "ca.pem")
	require.NoError(t, os.WriteFile(ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}), 0o600))

	c, err := NewClient(Options{Endpoint: srv.URL, CAFile: ca})
	require.NoError(t, err)
	_, hi, err := c.Versions(context.Background())
	require.NoError(t, err)
	require.Equal(t, "1.82", hi.String())

	plain, err := NewClient(Options{Endpoint: srv.URL})
	require.NoError(t, err)
	_, _, err = plain.Versions(context.Background())
	require.True(t, IsUnavailable(err), "%v", err)
	require.Contains(t, err.Error(), "certificate")
}
