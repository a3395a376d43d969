package auth_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
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
// credentials are 401 with a Basic challenge, an undecodable header 400,
// a password over 72 bytes 401 (bcrypt would ignore the rest); non-bcrypt
// entries are refused at start; a changed file is re-read and takes effect
// whole: a user it no longer has is out, even when another line is bad
// (skipped, and logged with its line number); a removed file lets nobody in.
func TestHTTPBasic(t *testing.T) {
	t.Parallel()
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

	long := strings.Repeat("p", auth.MaxBasicPasswordLen)
	write("", "# comment without colon", "alice:"+hash("a-pw"), "long:"+hash(long))
	logs, observed := observer.New(zap.InfoLevel)
	b, err := auth.NewHTTPBasic(path, zap.New(logs))
	require.NoError(t, err)
	try := func(set func(*http.Request)) (auth.Credentials, error) {
		r := httptest.NewRequest(http.MethodGet, "/v1/nodes", nil)
		set(r)
		return b.Authenticate(context.Background(), r)
	}
	basic := func(u, p string) func(*http.Request) { return func(r *http.Request) { r.SetBasicAuth(u, p) } }
	header := func(v string) func(*http.Request) { return func(r *http.Request) { r.Header.Set("Authorization", v) } }
	in := func(u, p string) bool { _, err := try(basic(u, p)); return err == nil }

	c, err := try(basic("alice", "a-pw"))
	require.NoError(t, err)
	require.Equal(t, "alice", c.UserName)
	require.True(t, c.System(), "http_basic users are administrators, as in Ironic")
	require.True(t, in("alice", "a-pw"), "a second time (remembered)")

	for _, set := range []func(*http.Request){basic("alice", "wrong"), basic("mallory", "a-pw"), header(""),
		basic("long", long+"x")} {
		_, err = try(set)
		require.Equal(t, http.StatusUnauthorized, status(t, err))
		f, _ := auth.AsFailure(err)
		require.Equal(t, `Basic realm="metalloc"`, f.Challenge)
	}
	require.True(t, in("long", long), "72 bytes are fine")
	for _, v := range []string{"Basic", "Basic !!!", "Basic bm9jb2xvbg==", "Bearer abc"} {
		_, err = try(header(v))
		require.Equal(t, http.StatusBadRequest, status(t, err), v)
	}

	// change edits the file and waits until the edit has taken effect
	// (the file is looked at on requests, at most once a second).
	change := func(edit func()) {
		t.Helper()
		before, done := b.Reloaded()
		edit()
		deadline := time.After(30 * time.Second)
		for {
			_, _ = try(basic("poke", "poke"))
			select {
			case <-done:
				n, _ := b.Reloaded()
				require.Equal(t, before+1, n)
				return
			case <-deadline:
				t.Fatal("the edited htpasswd file never took effect")
			case <-time.After(50 * time.Millisecond):
			}
		}
	}
	reload := func(lines ...string) { t.Helper(); change(func() { write(lines...) }) }
	reload("alice:"+hash("a-pw"), "bob:"+hash("b-pw"))
	require.True(t, in("bob", "b-pw"), "a new user is let in")
	require.True(t, in("alice", "a-pw"))

	// alice removed, carol added, one line htpasswd -m wrote: the bad
	// line is skipped (and logged with its number), the rest applies.
	reload("bob:"+hash("b-pw"), "dave:$apr1$abc$def", "carol:"+hash("c-pw"))
	require.False(t, in("alice", "a-pw"), "a user removed from the file keeps no access")
	require.True(t, in("carol", "c-pw"), "a user added next to a bad line is let in")
	require.True(t, in("bob", "b-pw"))
	require.False(t, in("dave", "x"))
	skipped := observed.FilterMessage("http_basic_auth_user_file: line skipped").All()
	require.Len(t, skipped, 1)
	require.Equal(t, int64(2), skipped[0].ContextMap()["line"])
	require.Equal(t, "dave", skipped[0].ContextMap()["user"])

	// The file removed: nobody.
	change(func() { require.NoError(t, os.Remove(path)) })
	require.False(t, in("bob", "b-pw"), "no file, no user")
}
