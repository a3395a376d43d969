package auth_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"

	"github.com/metalloc/metalloc/auth"
	"github.com/metalloc/metalloc/internal/keystonetest"
)

// TestKeystoneAgainstRealKeystone validates tokens issued by a real
// Keystone 22 (Debian's python3-keystone, started here): a project member's
// and a system reader's tokens give their user, project, roles and scope;
// client-sent identity headers are ignored; a garbage or revoked token is
// 401 with a Keystone challenge (the revoked one once its cache entry
// expires); Keystone gone is 503.
func TestKeystoneAgainstRealKeystone(t *testing.T) {
	ctx := context.Background()
	ks, err := keystonetest.StartKeystone(ctx, t.TempDir(), zaptest.NewLogger(t))
	require.NoError(t, err)
	stopped := false
	defer func() {
		if !stopped {
			ks.Stop()
		}
	}()

	// The service user validates tokens: Keystone lets the "service" role
	// (or a system reader) do that.
	svcProject, err := ks.CreateProject(ctx, "service")
	require.NoError(t, err)
	svcUser, err := ks.CreateUser(ctx, "metalloc", "svc-pw")
	require.NoError(t, err)
	require.NoError(t, ks.GrantProjectRole(ctx, svcUser, svcProject, "service"))

	tenant, err := ks.CreateProject(ctx, "tenant-a")
	require.NoError(t, err)
	alice, err := ks.CreateUser(ctx, "alice", "alice-pw")
	require.NoError(t, err)
	require.NoError(t, ks.GrantProjectRole(ctx, alice, tenant, "member"))
	auditor, err := ks.CreateUser(ctx, "auditor", "auditor-pw")
	require.NoError(t, err)
	require.NoError(t, ks.GrantSystemRole(ctx, auditor, "reader"))

	k, err := auth.NewKeystone(auth.KeystoneConfig{
		AuthURL: ks.URL, Username: "metalloc", Password: "svc-pw", ProjectName: "service",
		TokenCacheTime: 500 * time.Millisecond,
	}, nil, zaptest.NewLogger(t))
	require.NoError(t, err)
	authn := func(token string, hdr ...string) (auth.Credentials, error) {
		r := httptest.NewRequest(http.MethodGet, "/v1/nodes", nil)
		if token != "" {
			r.Header.Set("X-Auth-Token", token)
		}
		for i := 0; i+1 < len(hdr); i += 2 {
			r.Header.Set(hdr[i], hdr[i+1])
		}
		return k.Authenticate(ctx, r)
	}
	status := func(err error) int {
		f, ok := auth.AsFailure(err)
		require.True(t, ok, "%v", err)
		return f.Status
	}

	aliceTok, err := ks.Token(ctx, "alice", "alice-pw", keystonetest.Scope{Project: "tenant-a"})
	require.NoError(t, err)
	c, err := authn(aliceTok, "X-Roles", "admin", "X-Project-Id", "other", "OpenStack-System-Scope", "all")
	require.NoError(t, err)
	require.Equal(t, alice, c.UserID)
	require.Equal(t, "alice", c.UserName)
	require.Equal(t, tenant, c.ProjectID)
	require.True(t, c.HasRole("member"))
	require.True(t, c.HasRole("reader"), "Keystone adds implied roles")
	require.False(t, c.HasRole("admin"), "X-Roles from the client is ignored")
	require.False(t, c.System())

	audTok, err := ks.Token(ctx, "auditor", "auditor-pw", keystonetest.Scope{System: true})
	require.NoError(t, err)
	c, err = authn(audTok)
	require.NoError(t, err)
	require.True(t, c.System())
	require.Equal(t, "system", c.ScopeType())
	require.True(t, c.HasRole("reader"))

	_, err = authn("")
	require.Equal(t, http.StatusUnauthorized, status(err))
	_, err = authn("gAAAAAbogus")
	require.Equal(t, http.StatusUnauthorized, status(err))
	f, _ := auth.AsFailure(err)
	require.Contains(t, f.Challenge, `Keystone uri="`)

	require.NoError(t, ks.RevokeToken(ctx, aliceTok))
	require.Eventually(t, func() bool {
		_, err := authn(aliceTok)
		return err != nil && status(err) == http.StatusUnauthorized
	}, 10*time.Second, 100*time.Millisecond, "a revoked token is refused once its cache entry expires")

	ks.Stop()
	stopped = true
	time.Sleep(600 * time.Millisecond) // past token_cache_time
	_, err = authn(audTok)
	require.Equal(t, http.StatusServiceUnavailable, status(err), "Keystone down is 503, never a pass")
}
