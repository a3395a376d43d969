package main

import (
	"bufio"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"
	"golang.org/x/crypto/bcrypt"

	"github.com/metalloc/metalloc/auth"
	"github.com/metalloc/metalloc/config"
	"github.com/metalloc/metalloc/devstack"
	"github.com/metalloc/metalloc/ironic"
)

// recorder is a reverse proxy in front of Ironic that remembers what
// reached it: the request line as sent (method and raw target) and the
// credentials it carried.
type recorder struct {
	mu   sync.Mutex
	seen []recorded
}

type recorded struct {
	method, target, authorization, token string
}

func (r *recorder) all() []recorded {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]recorded(nil), r.seen...)
}

// clients is what reached Ironic on clients' behalf: every request but
// metalloc's own reads (the version documents, and the mirror's reads of
// a node, which follow a proxied change in the background).
func (r *recorder) clients() []recorded {
	var out []recorded
	for _, s := range r.all() {
		if s.target == "/" || s.target == "/v1" || (s.method == "GET" && strings.Contains(s.target, "?fields=")) {
			continue
		}
		out = append(out, s)
	}
	return out
}

// startRecorder serves a recording proxy to Ironic at ironicURL. The
// proxy passes the Host header on, so that Ironic's own links name the
// proxy's address: metalloc's ironic.endpoint.
func startRecorder(t *testing.T, ironicURL string) (*recorder, string) {
	t.Helper()
	target, err := url.Parse(ironicURL)
	require.NoError(t, err)
	rec := &recorder{}
	rp := httputil.NewSingleHostReverseProxy(target)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rec.mu.Lock()
		rec.seen = append(rec.seen, recorded{r.Method, r.RequestURI, r.Header.Get("Authorization"), r.Header.Get("X-Auth-Token")})
		rec.mu.Unlock()
		rp.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return rec, srv.URL
}

// rawCall sends one HTTP/1.1 request exactly as given (the target is not
// cleaned or re-encoded, as Go's client would) and returns the final
// answer's status and body. A zero contentLength with a body sends the
// body's length; shortBy sends that many bytes fewer than announced and
// then closes the writing side.
func rawCall(t *testing.T, addr, method, target string, body string, headers ...string) (int, string) {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	defer conn.Close()
	require.NoError(t, conn.SetDeadline(time.Now().Add(30*time.Second)))
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n", method, target, addr)
	for i := 0; i+1 < len(headers); i += 2 {
		fmt.Fprintf(&b, "%s: %s\r\n", headers[i], headers[i+1])
	}
	if body != "" {
		fmt.Fprintf(&b, "Content-Type: application/json\r\nContent-Length: %d\r\n", len(body))
	}
	b.WriteString("\r\n")
	_, err = io.WriteString(conn, b.String()+body)
	require.NoError(t, err)
	br := bufio.NewReader(conn)
	for {
		resp, err := http.ReadResponse(br, nil)
		require.NoError(t, err)
		raw, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		require.NoError(t, err)
		if resp.StatusCode/100 != 1 { // 100 Continue comes first when Expect asked for it
			return resp.StatusCode, string(raw)
		}
	}
}

// writeHtpasswd writes an htpasswd file of users (name → password).
func writeHtpasswd(t *testing.T, users map[string]string) string {
	t.Helper()
	var b strings.Builder
	for u, p := range users {
		h, err := bcrypt.GenerateFromPassword([]byte(p), bcrypt.MinCost)
		require.NoError(t, err)
		fmt.Fprintf(&b, "%s:%s\n", u, h)
	}
	path := filepath.Join(t.TempDir(), "htpasswd")
	require.NoError(t, os.WriteFile(path, []byte(b.String()), 0o600))
	return path
}

// TestFrontDoor is issue 40's front door, against the real Ironic
// (http_basic, enable_proxy_headers_parsing at its default, off), with a
// recording proxy between metalloc and Ironic and metalloc-api on
// http_basic with users of its own:
//
//   - every proxied request passes metalloc's authentication first: no
//     or wrong credentials are metalloc's 401 and reach nothing; Ironic
//     gets metalloc's own ironic.* credentials, never the caller's
//     password; Ironic's agent routes stay public;
//   - metalloc's routes under any other spelling (//, /./, .json, %2F,
//     %2e, case) are refused or answered by metalloc, never forwarded;
//   - Expect: 100-continue leaves Ironic's status as it is;
//   - proxied bodies have metalloc's size limit, and a body shorter than
//     its Content-Length is the client's 400, not Ironic's 503;
//   - links in Ironic's answers (next, self, Location) name metalloc.
func TestFrontDoor(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ir := startIronic(t, devstack.IronicOptions{AuthStrategy: devstack.IronicHTTPBasic, NoProxyHeaders: true,
		Conductors: 1, BasicUsers: map[string]string{"metalloc": "svc-pw"}})
	_, err := ir.EnrollAvailable(ctx, []devstack.IronicNode{{Name: "n01"}, {Name: "n02"}, {Name: "n03"}}, 3)
	require.NoError(t, err)
	rec, endpoint := startRecorder(t, ir.URL)

	cfg, err := config.Load("", nil)
	require.NoError(t, err)
	cfg.API.AuthStrategy = auth.StrategyHTTPBasic
	cfg.API.MaxRequestBodySize = 1 << 20
	cfg.Ironic.AuthStrategy, cfg.Ironic.Username, cfg.Ironic.Password = "http_basic", "metalloc", "svc-pw"
	authn, err := auth.NewHTTPBasic(writeHtpasswd(t, map[string]string{"alice": "alice-pw"}), zaptest.NewLogger(t))
	require.NoError(t, err)
	srv, _ := frontAPI(t, cfg, endpoint, authn, auth.Rules{})
	addr := strings.TrimPrefix(srv.URL, "http://")
	// The same API with a server read timeout (api.read_timeout, 60 s by
	// default), for clients that stop sending.
	slow := httptest.NewUnstartedServer(srv.Config.Handler)
	slow.Config.ReadTimeout = 2 * time.Second
	slow.Start()
	t.Cleanup(slow.Close)
	slowAddr := strings.TrimPrefix(slow.URL, "http://")
	v := "X-OpenStack-Ironic-API-Version"
	alice := []string{v, "1.82", "Authorization", "Basic " + basic("alice", "alice-pw")}
	wrong := []string{v, "1.82", "Authorization", "Basic " + basic("alice", "nope")}
	none := []string{v, "1.82"}
	patch := `[{"op":"add","path":"/extra/x","value":1}]`
	extraX := func() bool {
		var n struct {
			Extra map[string]any `json:"extra"`
		}
		_, err := ir.Do(ctx, "GET", "/v1/nodes/n01", nil, &n)
		require.NoError(t, err)
		_, ok := n.Extra["x"]
		return ok
	}

	t.Run("authentication", func(t *testing.T) {
		before := len(rec.clients())
		for _, h := range [][]string{none, wrong} {
			for _, r := range []struct{ method, path, body string }{
				{"GET", "/v1/nodes", ""}, {"GET", "/v1/drivers", ""}, {"GET", "/v1/ports", ""},
				{"PATCH", "/v1/nodes/n01", patch}, {"PUT", "/v1/nodes/n01/states/power", `{"target":"power on"}`},
				{"GET", "/v1/nodes/n01", ""}, {"DELETE", "/v1/nodes/n03", ""},
			} {
				st, body := rawCall(t, addr, r.method, r.path, r.body, h...)
				require.Equal(t, http.StatusUnauthorized, st, "%s %s: %s", r.method, r.path, body)
			}
		}
		require.Len(t, rec.clients(), before, "a request metalloc refused reached Ironic")
		require.False(t, extraX(), "an unauthenticated PATCH was applied")

		st, body := rawCall(t, addr, "PATCH", "/v1/nodes/n01", patch, alice...)
		require.Equal(t, http.StatusOK, st, body)
		require.True(t, extraX())
		st, body = rawCall(t, addr, "GET", "/v1/nodes", "", alice...)
		require.Equal(t, http.StatusOK, st, body)
		for _, r := range rec.clients()[before:] {
			require.Equal(t, "Basic "+basic("metalloc", "svc-pw"), r.authorization, "%s %s", r.method, r.target)
			require.NotContains(t, r.authorization, basic("alice", "alice-pw"))
		}
		// Ironic's agent routes need no credentials, in Ironic as here.
		st, body = rawCall(t, addr, "GET", "/v1/lookup?addresses=52:54:00:00:00:01", "", none...)
		require.NotEqual(t, http.StatusUnauthorized, st, body)
		require.Empty(t, rec.clients()[len(rec.clients())-1].authorization, "an agent route got metalloc's credentials")
	})

	t.Run("spellings", func(t *testing.T) {
		var ownedPaths = []string{"/v1/allocations", "/v1/allocations/a1", "/v1/allocations/events",
			"/v1/allocation_groups", "/v1/allocation_groups/g1", "/v1/topology", "/v1/ui/fleet",
			"/v1/nodes/n01/allocation", "/metrics", "/ui/"}
		spell := func(p string) []string {
			p = strings.TrimSuffix(p, "/")
			rest := strings.TrimPrefix(p, "/v1")
			seg := strings.Split(strings.Trim(p, "/"), "/")
			last := seg[len(seg)-1]
			out := []string{"/" + p, strings.Replace(p, "/", "//", 2), p + ".json", "/." + p, "/x/.." + p,
				strings.ToUpper(p), p[:len(p)-len(last)-1] + "/" + strings.ToUpper(last[:1]) + last[1:],
				p[:len(p)-len(last)] + "%" + fmt.Sprintf("%02X", last[0]) + last[1:],
				p + "%2ejson", p + "/./"}
			if rest != p {
				out = append(out, "/v1%2F"+strings.TrimPrefix(rest, "/"), "/v1/"+"%2e"+rest)
			}
			return out
		}
		before := len(rec.clients())
		for _, p := range ownedPaths {
			for _, s := range spell(p) {
				for _, m := range []string{"GET", "POST", "PUT", "PATCH", "DELETE"} {
					body := ""
					if m == "POST" || m == "PUT" || m == "PATCH" {
						body = `{"resource_class":"x"}`
					}
					st, out := rawCall(t, addr, m, s, body, none...)
					require.Contains(t, []int{http.StatusUnauthorized, http.StatusNotFound}, st, "%s %s: %s", m, s, out)
					st, out = rawCall(t, addr, m, s, body, alice...)
					require.Less(t, st, 500, "%s %s: %s", m, s, out)
					if st/100 == 2 {
						// Answered by metalloc's handler: a canonical spelling.
						owned, canonical := ironic.OwnedSpelling(s, "")
						require.True(t, owned && canonical, "%s %s answered %d: %s", m, s, st, out)
					}
				}
			}
		}
		for _, r := range rec.clients()[before:] {
			u, err := url.Parse(r.target)
			require.NoError(t, err)
			owned, canonical := ironic.OwnedSpelling(u.Path, u.RawPath)
			require.False(t, owned && !canonical, "forwarded to Ironic: %s %s", r.method, r.target)
			require.False(t, owned && u.Path != "/" && u.Path != "/v1" && !strings.HasPrefix(u.Path, "/v1/allocations/") &&
				!strings.HasPrefix(u.Path, "/v1/nodes/"), "forwarded to Ironic: %s %s", r.method, r.target)
		}
		// The examples: metalloc's 404, not Ironic's allocator or its 500.
		for _, s := range []string{"//v1/allocations", "/v1/allocations.json", "/v1//allocations"} {
			st, out := rawCall(t, addr, "POST", s, `{"resource_class":"x"}`, alice...)
			require.Equal(t, http.StatusNotFound, st, "%s: %s", s, out)
		}
	})

	t.Run("expect 100-continue", func(t *testing.T) {
		for _, r := range []struct {
			method, path, body string
			want               int
		}{
			{"PATCH", "/v1/nodes/n01", `{"x":1}`, http.StatusBadRequest},
			{"PATCH", "/v1/nodes/nope", patch, http.StatusNotFound},
			{"PUT", "/v1/nodes/n02/states/power", `{"target":"power off"}`, http.StatusAccepted},
		} {
			h := append([]string{"Expect", "100-continue"}, alice...)
			st, body := rawCall(t, addr, r.method, r.path, r.body, h...)
			require.Equal(t, r.want, st, "%s %s: %s", r.method, r.path, body)
		}
	})

	t.Run("bodies", func(t *testing.T) {
		before := len(rec.clients())
		big := `[{"op":"add","path":"/extra/big","value":"` + strings.Repeat("x", 2<<20) + `"}]`
		st, body := rawCall(t, addr, "PATCH", "/v1/nodes/n01", big, alice...)
		require.Equal(t, http.StatusRequestEntityTooLarge, st, body)
		require.Len(t, rec.clients(), before, "a body over the limit reached Ironic")

		// Fewer bytes than announced: the client waits (its body is
		// incomplete until the server's read timeout, 2 s here), or closes
		// its side. The client's fault: 4xx, never Ironic's 503.
		for _, closeWrite := range []bool{false, true} {
			conn, err := net.Dial("tcp", slowAddr)
			require.NoError(t, err)
			require.NoError(t, conn.SetDeadline(time.Now().Add(30*time.Second)))
			_, err = fmt.Fprintf(conn, "PATCH /v1/nodes/n01 HTTP/1.1\r\nHost: %s\r\nAuthorization: %s\r\n"+
				"Content-Type: application/json\r\nContent-Length: 100\r\n\r\n[{\"op\":", slowAddr, alice[3])
			require.NoError(t, err)
			if closeWrite {
				require.NoError(t, conn.(*net.TCPConn).CloseWrite())
				_, _ = io.ReadAll(conn) // the server may close without an answer: nobody is listening
			} else {
				resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
				require.NoError(t, err)
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				require.Equal(t, http.StatusBadRequest, resp.StatusCode, "%s", body)
			}
			conn.Close()
		}
		require.Len(t, rec.clients(), before, "a truncated body reached Ironic")
	})

	t.Run("links", func(t *testing.T) {
		st, body := rawCall(t, addr, "GET", "/v1/nodes?limit=1", "", alice...)
		require.Equal(t, http.StatusOK, st, body)
		var page struct {
			Nodes []struct {
				Links []struct {
					Href string `json:"href"`
				} `json:"links"`
			} `json:"nodes"`
			Next string `json:"next"`
		}
		require.NoError(t, json.Unmarshal([]byte(body), &page))
		require.True(t, strings.HasPrefix(page.Next, srv.URL+"/v1/nodes?"), "next names metalloc: %s", page.Next)
		require.NotEmpty(t, page.Nodes)
		for _, l := range page.Nodes[0].Links {
			require.True(t, strings.HasPrefix(l.Href, srv.URL+"/"), "links name metalloc: %s", body)
		}
		require.NotContains(t, body, endpoint)
		require.NotContains(t, body, ir.URL)
		// A created resource's Location too.
		req, err := http.NewRequest("POST", srv.URL+"/v1/chassis", strings.NewReader(`{"description":"c"}`))
		require.NoError(t, err)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set(v, "1.82")
		req.Header.Set("Authorization", alice[3])
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		raw, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		require.Equal(t, http.StatusCreated, resp.StatusCode, "%s", raw)
		require.True(t, strings.HasPrefix(resp.Header.Get("Location"), srv.URL+"/"), "Location: %s", resp.Header.Get("Location"))
		require.NotContains(t, string(raw), endpoint)
	})
}

// basic is the credentials part of an Authorization: Basic header.
func basic(user, password string) string {
	return base64.StdEncoding.EncodeToString([]byte(user + ":" + password))
}
