package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/metalloc/metalloc/auth"
	"github.com/metalloc/metalloc/config"
	"github.com/metalloc/metalloc/db/dbtest"
	"github.com/metalloc/metalloc/devstack"
	"github.com/metalloc/metalloc/internal/keystonetest"
)

// startIronic starts an Ironic for the test (logs shown if it fails).
func startIronic(t *testing.T, opts devstack.IronicOptions) *devstack.Ironic {
	t.Helper()
	opts.DatabaseURL, opts.Dir, opts.Log = os.Getenv("DATABASE_URL"), t.TempDir(), zap.NewNop()
	ir, err := devstack.StartIronic(context.Background(), opts)
	require.NoError(t, err, "this test needs Ironic 21.4: apt-get install -y %s", devstack.IronicPackages)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("Ironic logs:\n%s", ir.LogTail(40))
		}
		ir.Stop()
	})
	return ir
}

// frontAPI serves metalloc-api in front of endpoint on a fresh database,
// authenticating with authn.
func frontAPI(t *testing.T, cfg config.Config, endpoint string, authn auth.Authenticator, rules auth.Rules) (*httptest.Server, *pgxpool.Pool) {
	t.Helper()
	pool := dbtest.New(t)
	cfg.Ironic.Endpoint = endpoint
	log := zaptest.NewLogger(t)
	front, err := newFront(cfg, pool, nil, log)
	require.NoError(t, err)
	e, err := newAPIWith(cfg, pool, authn, rules, nil, front, log)
	require.NoError(t, err)
	srv := httptest.NewServer(e)
	t.Cleanup(func() { srv.Close(); front.Close() })
	return srv, pool
}

// call sends one request with headers (name, value pairs) and returns the
// status, the answer's headers and body.
func call(t *testing.T, method, url string, body any, headers ...string) (int, http.Header, []byte) {
	t.Helper()
	var rd io.Reader
	if body != nil {
		raw, err := json.Marshal(body)
		require.NoError(t, err)
		rd = bytes.NewReader(raw)
	}
	req, err := http.NewRequest(method, url, rd)
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, resp.Header, raw
}

// mirrored reads a node's mirrored columns ("" provision state: absent).
func mirrored(t *testing.T, pool *pgxpool.Pool, u string) (name, provision string, maintenance bool) {
	t.Helper()
	rows, err := pool.Query(context.Background(), `SELECT coalesce(name, ''), provision_state, maintenance FROM nodes WHERE uuid = $1`, u)
	require.NoError(t, err)
	defer rows.Close()
	for rows.Next() {
		require.NoError(t, rows.Scan(&name, &provision, &maintenance))
	}
	return name, provision, maintenance
}

// TestFront: metalloc-api in front of the real Ironic (noauth). / and /v1
// are Ironic's documents with the pair's range and links naming metalloc;
// a microversion outside it is 406; node writes and reads, ports and the
// rest go to Ironic unchanged (its answers, its microversion header, its
// request id); after a change proxied for a node the mirror has it by the
// time the client has the answer (creation, maintenance, a rename by the
// old name, deletion), and a node Ironic is still moving is followed until
// it arrives. metalloc's own routes stay metalloc's. With Ironic's API
// stopped, proxied requests are 503 in Ironic's error format (with
// Retry-After), metalloc's own routes and version documents still answer,
// and all is back once Ironic is.
func TestFront(t *testing.T) {
	t.Parallel()
	ir := startIronic(t, devstack.IronicOptions{})
	cfg, err := config.Load("", nil)
	require.NoError(t, err)
	srv, pool := frontAPI(t, cfg, ir.URL, auth.IronicNoAuth{}, auth.Rules{})
	v := func(mv string) []string { return []string{"X-OpenStack-Ironic-API-Version", mv} }

	st, _, body := call(t, "GET", srv.URL+"/", nil)
	require.Equal(t, http.StatusOK, st, "%s", body)
	var root struct {
		Default struct {
			Version string `json:"version"`
			Links   []struct {
				Href string `json:"href"`
			} `json:"links"`
		} `json:"default_version"`
	}
	require.NoError(t, json.Unmarshal(body, &root))
	require.Equal(t, "1.82", root.Default.Version)
	require.True(t, strings.HasPrefix(root.Default.Links[0].Href, srv.URL), "links name metalloc: %s", body)
	st, h, body := call(t, "GET", srv.URL+"/v1", nil, v("latest")...)
	require.Equal(t, http.StatusOK, st)
	require.Contains(t, string(body), `"chassis"`, "/v1 is Ironic's document")
	require.Equal(t, "1.82", h.Get("X-OpenStack-Ironic-API-Maximum-Version"))
	st, h, body = call(t, "GET", srv.URL+"/v1/nodes", nil, v("1.99")...)
	require.Equal(t, http.StatusNotAcceptable, st)
	require.Contains(t, string(body), "The supported version range is: [1.1, 1.82].")
	require.Equal(t, "1.82", h.Get("X-OpenStack-Ironic-API-Maximum-Version"))

	// A node created through metalloc is Ironic's, and mirrored at once.
	name := "front-" + uuid.NewString()[:8]
	st, h, body = call(t, "POST", srv.URL+"/v1/nodes", map[string]any{"driver": "fake-hardware", "name": name,
		"resource_class": "gold"}, v("1.82")...)
	require.Equal(t, http.StatusCreated, st, "%s", body)
	require.Len(t, h.Values("X-OpenStack-Request-Id"), 1)
	var created struct {
		UUID  string `json:"uuid"`
		Links []struct {
			Href string `json:"href"`
		} `json:"links"`
	}
	require.NoError(t, json.Unmarshal(body, &created))
	require.True(t, strings.HasPrefix(created.Links[0].Href, srv.URL), "links name metalloc: %s", body)
	_, prov, _ := mirrored(t, pool, created.UUID)
	require.Equal(t, "enroll", prov)
	_, err = ir.Do(context.Background(), "GET", "/v1/nodes/"+name, nil, nil)
	require.NoError(t, err, "the node is not in Ironic")

	// The client's microversion reaches Ironic: 1.50 has no lessee.
	st, h, body = call(t, "GET", srv.URL+"/v1/nodes/"+name, nil, v("1.50")...)
	require.Equal(t, http.StatusOK, st)
	require.Equal(t, "1.50", h.Get("X-OpenStack-Ironic-API-Version"))
	require.NotContains(t, string(body), `"lessee"`)
	require.Contains(t, string(body), `"owner"`)

	// A move Ironic finishes after answering is followed until it lands.
	st, _, body = call(t, "PUT", srv.URL+"/v1/nodes/"+name+"/states/provision", map[string]any{"target": "manage"}, v("1.82")...)
	require.Equal(t, http.StatusAccepted, st, "%s", body)
	dbtest.WaitFor(t, time.Minute, "the mirror to see the node manageable", func() bool {
		_, prov, _ := mirrored(t, pool, created.UUID)
		return prov == "manageable"
	})

	// Maintenance, and a rename addressed by the old name.
	st, _, body = call(t, "PUT", srv.URL+"/v1/nodes/"+name+"/maintenance", map[string]any{"reason": "x"}, v("1.82")...)
	require.Equal(t, http.StatusAccepted, st, "%s", body)
	_, _, maint := mirrored(t, pool, created.UUID)
	require.True(t, maint)
	st, _, body = call(t, "PATCH", srv.URL+"/v1/nodes/"+name, []map[string]any{
		{"op": "replace", "path": "/name", "value": name + "-b"}}, v("1.82")...)
	require.Equal(t, http.StatusOK, st, "%s", body)
	got, _, _ := mirrored(t, pool, created.UUID)
	require.Equal(t, name+"-b", got)

	// Ironic's other resources, and errors, unchanged.
	st, _, body = call(t, "GET", srv.URL+"/v1/ports", nil, v("1.82")...)
	require.Equal(t, http.StatusOK, st)
	require.JSONEq(t, `{"ports": []}`, string(body))
	st, _, body = call(t, "GET", srv.URL+"/v1/nodes/nope-"+name, nil, v("1.82")...)
	require.Equal(t, http.StatusNotFound, st)
	require.Contains(t, string(body), `Node nope-`+name+` could not be found.`)

	// metalloc's own routes.
	st, _, body = call(t, "POST", srv.URL+"/v1/allocations", map[string]any{"resource_class": "gold"}, v("1.82")...)
	require.Equal(t, http.StatusCreated, st, "%s", body)
	require.Equal(t, 1, dbtest.Count(t, pool, "SELECT count(*) FROM allocations"))

	// Deleted through metalloc: gone from the mirror at once.
	st, _, body = call(t, "DELETE", srv.URL+"/v1/nodes/"+name+"-b", nil, v("1.82")...)
	require.Equal(t, http.StatusNoContent, st, "%s", body)
	_, prov, _ = mirrored(t, pool, created.UUID)
	require.Empty(t, prov)

	// Ironic down: 503 in Ironic's format for proxied requests only.
	ir.StopAPI()
	st, hdr, body := call(t, "GET", srv.URL+"/v1/nodes", nil, v("1.82")...)
	require.Equal(t, http.StatusServiceUnavailable, st)
	require.Equal(t, "2", hdr.Get("Retry-After"))
	var fault struct {
		ErrorMessage string `json:"error_message"`
	}
	require.NoError(t, json.Unmarshal(body, &fault))
	var inner struct {
		Faultstring, Faultcode string
	}
	require.NoError(t, json.Unmarshal([]byte(fault.ErrorMessage), &inner))
	require.Contains(t, inner.Faultstring, "Ironic")
	require.Equal(t, "Server", inner.Faultcode)
	st, _, _ = call(t, "GET", srv.URL+"/v1/allocations", nil, v("1.82")...)
	require.Equal(t, http.StatusOK, st)
	st, _, body = call(t, "GET", srv.URL+"/", nil)
	require.Equal(t, http.StatusOK, st)
	require.Contains(t, string(body), `"version":"1.82"`)
	require.NoError(t, ir.StartAPI(context.Background()))
	st, _, _ = call(t, "GET", srv.URL+"/v1/nodes", nil, v("1.82")...)
	require.Equal(t, http.StatusOK, st)
}

// TestFrontSlowIronic: an Ironic that does not answer within
// ironic.timeout gives 503 in Ironic's error format, with Retry-After;
// metalloc's own routes and its version documents (metalloc's range:
// Ironic's is not known) are served meanwhile.
func TestFrontSlowIronic(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	done := make(chan struct{})
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() { <-done; c.Close() }() // reads nothing, answers nothing
		}
	}()
	t.Cleanup(func() { close(done); l.Close() })
	cfg, err := config.Load("", nil)
	require.NoError(t, err)
	cfg.Ironic.Timeout = 300 * time.Millisecond
	srv, _ := frontAPI(t, cfg, "http://"+l.Addr().String(), auth.IronicNoAuth{}, auth.Rules{})
	st, hdr, body := call(t, "GET", srv.URL+"/v1/nodes", nil, "X-OpenStack-Ironic-API-Version", "1.82")
	require.Equal(t, http.StatusServiceUnavailable, st, "%s", body)
	require.Contains(t, string(body), "no answer within 300ms")
	require.Equal(t, "2", hdr.Get("Retry-After"), "web.UnavailableRetryAfter")
	// metalloc's own routes and version documents still answer.
	st, _, body = call(t, "GET", srv.URL+"/v1/allocations", nil, "X-OpenStack-Ironic-API-Version", "1.82")
	require.Equal(t, http.StatusOK, st, "%s", body)
	st, _, body = call(t, "GET", srv.URL+"/", nil)
	require.Equal(t, http.StatusOK, st, "%s", body)
	require.Contains(t, string(body), `"version":"1.82"`)
}

// TestFrontKeystone: with Keystone on both sides, the client's own token
// reaches Ironic through metalloc, and Ironic's project scoping applies
// (a project member sees its project's nodes, a system reader all, no
// token is Ironic's 401), while metalloc's own routes check the same token
// themselves.
func TestFrontKeystone(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ks, err := keystonetest.StartKeystone(ctx, t.TempDir(), zaptest.NewLogger(t))
	require.NoError(t, err, "this test needs Keystone: apt-get install -y %s", keystonetest.KeystonePackages)
	t.Cleanup(ks.Stop)
	ir := startIronic(t, devstack.IronicOptions{AuthStrategy: devstack.IronicKeystone, Keystone: ks, Conductors: 1})

	pid, err := ks.CreateProject(ctx, "tenant")
	require.NoError(t, err)
	svc, err := ks.CreateProject(ctx, "service")
	require.NoError(t, err)
	member, err := ks.CreateUser(ctx, "member", "member-pw")
	require.NoError(t, err)
	require.NoError(t, ks.GrantProjectRole(ctx, member, pid, "member"))
	operator, err := ks.CreateUser(ctx, "operator", "operator-pw")
	require.NoError(t, err)
	require.NoError(t, ks.GrantSystemRole(ctx, operator, "reader"))
	// metalloc's service user: validates tokens (service role), reads
	// Ironic's nodes for the mirror (system reader).
	metalloc, err := ks.CreateUser(ctx, "metalloc", "metalloc-pw")
	require.NoError(t, err)
	require.NoError(t, ks.GrantProjectRole(ctx, metalloc, svc, "service"))
	require.NoError(t, ks.GrantProjectRole(ctx, metalloc, svc, "admin"))
	require.NoError(t, ks.GrantSystemRole(ctx, metalloc, "reader"))
	_, err = ir.EnrollAvailable(ctx, []devstack.IronicNode{{Name: "mine", Owner: pid}, {Name: "theirs"}}, 2)
	require.NoError(t, err)

	cfg, rules := keystoneDefaults(t)
	cfg.Keystone = auth.KeystoneConfig{AuthURL: ks.URL, Username: "metalloc", Password: "metalloc-pw",
		ProjectName: "service", UserDomainName: "Default", ProjectDomainName: "Default", Timeout: 10 * time.Second}
	cfg.Ironic.AuthStrategy = "keystone"
	authn, err := auth.NewKeystone(cfg.Keystone, nil, zaptest.NewLogger(t))
	require.NoError(t, err)
	srv, _ := frontAPI(t, cfg, ir.URL, authn, rules)

	names := func(tok string) (int, []string) {
		st, _, body := call(t, "GET", srv.URL+"/v1/nodes", nil, "X-Auth-Token", tok, "X-OpenStack-Ironic-API-Version", "1.82")
		var out struct {
			Nodes []struct {
				Name string `json:"name"`
			} `json:"nodes"`
		}
		_ = json.Unmarshal(body, &out)
		var ns []string
		for _, n := range out.Nodes {
			ns = append(ns, n.Name)
		}
		return st, ns
	}
	memberTok, err := ks.Token(ctx, "member", "member-pw", keystonetest.Scope{Project: "tenant"})
	require.NoError(t, err)
	operatorTok, err := ks.Token(ctx, "operator", "operator-pw", keystonetest.Scope{System: true})
	require.NoError(t, err)
	st, ns := names(memberTok)
	require.Equal(t, http.StatusOK, st)
	require.Equal(t, []string{"mine"}, ns, "Ironic's project scoping")
	st, ns = names(operatorTok)
	require.Equal(t, http.StatusOK, st)
	require.ElementsMatch(t, []string{"mine", "theirs"}, ns)
	st, h, _ := call(t, "GET", srv.URL+"/v1/nodes", nil, "X-OpenStack-Ironic-API-Version", "1.82")
	require.Equal(t, http.StatusUnauthorized, st)
	require.Contains(t, h.Get("WWW-Authenticate"), "Keystone uri=")
	st, _, _ = call(t, "GET", srv.URL+"/v1/allocations", nil, "X-Auth-Token", memberTok, "X-OpenStack-Ironic-API-Version", "1.82")
	require.Equal(t, http.StatusOK, st)
	st, _, _ = call(t, "GET", srv.URL+"/v1/allocations", nil, "X-OpenStack-Ironic-API-Version", "1.82")
	require.Equal(t, http.StatusUnauthorized, st)
}

// TestFrontKnownAllocation: in front of Ironic, a request for an
// allocation ironic.FrontOptions.Known says metalloc has is metalloc's
// handler's without the database lookup (here the allocation is in no
// database: metalloc's own 404), and one Known does not know is looked up
// and, not found, goes to Ironic.
func TestFrontKnownAllocation(t *testing.T) {
	t.Parallel()
	var proxied atomic.Int64
	ir := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, "/v1/allocations/") {
			proxied.Add(1)
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusNotFound)
		_, _ = w.Write([]byte(`{"error_message": "{\"faultstring\": \"from Ironic\"}"}`))
	}))
	t.Cleanup(ir.Close)
	cfg, err := config.Load("", nil)
	require.NoError(t, err)
	cfg.Ironic.Endpoint = ir.URL
	pool := dbtest.New(t)
	log := zaptest.NewLogger(t)
	mine := uuid.New()
	front, err := newFront(cfg, pool, func(u uuid.UUID) bool { return u == mine }, log)
	require.NoError(t, err)
	e, err := newAPIWith(cfg, pool, auth.IronicNoAuth{}, auth.Rules{}, nil, front, log)
	require.NoError(t, err)
	srv := httptest.NewServer(e)
	t.Cleanup(func() { srv.Close(); front.Close() })

	st, _, body := call(t, "GET", srv.URL+"/v1/allocations/"+mine.String(), nil, "X-OpenStack-Ironic-API-Version", "1.82")
	require.Equal(t, http.StatusNotFound, st, "%s", body)
	require.Contains(t, string(body), "Allocation "+mine.String()+" could not be found.")
	require.Zero(t, proxied.Load(), "a known allocation's request went to Ironic")

	other := uuid.New()
	st, _, body = call(t, "GET", srv.URL+"/v1/allocations/"+other.String(), nil, "X-OpenStack-Ironic-API-Version", "1.82")
	require.Equal(t, http.StatusNotFound, st, "%s", body)
	require.Contains(t, string(body), "from Ironic")
	require.EqualValues(t, 1, proxied.Load())
}
