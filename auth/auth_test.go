package auth_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"golang.org/x/crypto/bcrypt"

	"github.com/metalloc/metalloc/auth"
)

func status(t *testing.T, err error) int {
	t.Helper()
	f, ok := auth.AsFailure(err)
	require.True(t, ok, "%v", err)
	return f.Status
}

// TestCheckNoAuthListen: noauth only on loopback unless allowed; other
// strategies anywhere.
func TestCheckNoAuthListen(t *testing.T) {
	for listen, ok := range map[string]bool{
		"127.0.0.1:6385": true, "[::1]:6385": true, "localhost:6385": true, "127.0.0.2:1": true,
		"0.0.0.0:6385": false, ":6385": false, "10.0.0.5:6385": false, "[::]:8778": false, "api.example:6385": false,
	} {
		err := auth.CheckNoAuthListen(auth.StrategyNoAuth, listen, false)
		require.Equal(t, ok, err == nil, "%s: %v", listen, err)
		require.NoError(t, auth.CheckNoAuthListen(auth.StrategyNoAuth, listen, true), listen)
		require.NoError(t, auth.CheckNoAuthListen(auth.StrategyHTTPBasic, listen, false), listen)
	}
}

// TestPlacementNoAuth: noauth2's reading of the token and headers.
func TestPlacementNoAuth(t *testing.T) {
	authn := func(hdr ...string) (auth.Credentials, error) {
		r := httptest.NewRequest(http.MethodGet, "/resource_providers", nil)
		for i := 0; i+1 < len(hdr); i += 2 {
			r.Header.Set(hdr[i], hdr[i+1])
		}
		return auth.PlacementNoAuth{}.Authenticate(context.Background(), r)
	}
	_, err := authn()
	require.Equal(t, http.StatusUnauthorized, status(t, err))

	c, err := authn("X-Auth-Token", "admin")
	require.NoError(t, err)
	require.Equal(t, []string{"admin"}, c.Roles)
	require.Equal(t, "admin", c.ProjectID)

	c, err = authn("X-Auth-Token", "alice:proj", "X-Roles", "Member, reader")
	require.NoError(t, err)
	require.Equal(t, "alice", c.UserID)
	require.Equal(t, "proj", c.ProjectID)
	require.Equal(t, []string{"member", "reader"}, c.Roles)
	require.False(t, c.System())

	c, err = authn("X-Auth-Token", "bob", "OpenStack-System-Scope", "all", "X-Roles", "reader")
	require.NoError(t, err)
	require.True(t, c.System())
	require.Empty(t, c.ProjectID)

	c, err = authn("X-Auth-Token", "carol", "X-Project-Id", "p2")
	require.NoError(t, err)
	require.Equal(t, "p2", c.ProjectID)
	require.Empty(t, c.Roles, "nobody but admin has a role without X-Roles")
}

// TestHTTPBasic: bcrypt users from an htpasswd file; wrong or missing
// credentials are 401 with a Basic challenge, an undecodable header 400;
// non-bcrypt entries are refused at start; a changed file is re-read (a
// broken one keeps the last good users).
func TestHTTPBasic(t *testing.T) {
	path := filepath.Join(t.TempDir(), "htpasswd")
	write := func(lines ...string) {
		var s string
		for _, l := range lines {
			s += l + "\n"
		}
		require.NoError(t, os.WriteFile(path, []byte(s), 0o600))
	}
	hash := func(pw string) string {
		h, err := bcrypt.GenerateFromPassword([]byte(pw), bcrypt.MinCost)
		require.NoError(t, err)
		return string(h)
	}
	write("alice:$apr1$abc$def")
	_, err := auth.NewHTTPBasic(path, zap.NewNop())
	require.ErrorContains(t, err, "only bcrypt")

	write("", "# comment without colon", "alice:"+hash("a-pw"))
	b, err := auth.NewHTTPBasic(path, zap.NewNop())
	require.NoError(t, err)
	try := func(set func(*http.Request)) (auth.Credentials, error) {
		r := httptest.NewRequest(http.MethodGet, "/v1/nodes", nil)
		set(r)
		return b.Authenticate(context.Background(), r)
	}
	basic := func(u, p string) func(*http.Request) { return func(r *http.Request) { r.SetBasicAuth(u, p) } }
	header := func(v string) func(*http.Request) { return func(r *http.Request) { r.Header.Set("Authorization", v) } }

	c, err := try(basic("alice", "a-pw"))
	require.NoError(t, err)
	require.Equal(t, "alice", c.UserName)
	require.True(t, c.System(), "http_basic users are administrators, as in Ironic")

	for _, set := range []func(*http.Request){basic("alice", "wrong"), basic("mallory", "a-pw"), header("")} {
		_, err = try(set)
		require.Equal(t, http.StatusUnauthorized, status(t, err))
		f, _ := auth.AsFailure(err)
		require.Equal(t, `Basic realm="metalloc"`, f.Challenge)
	}
	for _, v := range []string{"Basic", "Basic !!!", "Basic bm9jb2xvbg==", "Bearer abc"} {
		_, err = try(header(v))
		require.Equal(t, http.StatusBadRequest, status(t, err), v)
	}

	// A new user is let in once the file changes (checked at most once a
	// second); a broken file keeps the users read before.
	write("alice:"+hash("a-pw"), "bob:"+hash("b-pw"))
	require.Eventually(t, func() bool { _, err := try(basic("bob", "b-pw")); return err == nil }, 5*time.Second, 100*time.Millisecond)
	write("alice:{SHA}xyz")
	time.Sleep(1100 * time.Millisecond)
	_, err = try(basic("bob", "b-pw"))
	require.NoError(t, err, "an invalid file keeps the last good users")
}
