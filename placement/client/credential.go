package client

import (
	"context"
	"net/http"
)

// Credential authenticates the client's requests to Placement. The
// placement_backend section's auth_strategy picks one: Token ("token"),
// Basic ("http_basic") or Keystone ("keystone").
type Credential interface {
	// Apply sets the request's authentication header; an error (Keystone
	// unreachable) fails the request with Status 0, so it counts as
	// unreachable, to be retried later.
	Apply(ctx context.Context, req *http.Request) error
	// Rejected is told that Placement answered 401; it returns true when
	// the request is worth sending once more with fresh credentials.
	Rejected() bool
}

// Token sends a fixed X-Auth-Token ("admin" for Placement's noauth2, or a
// long-lived token); "" sends none.
type Token string

// Apply sets X-Auth-Token.
func (t Token) Apply(_ context.Context, req *http.Request) error {
	if t != "" {
		req.Header.Set("X-Auth-Token", string(t))
	}
	return nil
}

// Rejected is false: a fixed token does not get better by retrying.
func (Token) Rejected() bool { return false }

// Basic sends HTTP Basic credentials, for a Placement with auth_strategy
// http_basic (an htpasswd file, as Ironic's).
type Basic struct{ User, Password string }

// Apply sets the Authorization header.
func (b Basic) Apply(_ context.Context, req *http.Request) error {
	req.SetBasicAuth(b.User, b.Password)
	return nil
}

// Rejected is false: wrong basic credentials stay wrong.
func (Basic) Rejected() bool { return false }

// TokenSource issues the service's own Keystone token (auth.Keystone does:
// a password-authenticated, project-scoped token renewed before expiry).
type TokenSource interface {
	ServiceToken(ctx context.Context) (string, error)
	Invalidate()
}

// Keystone sends the service token of Source as X-Auth-Token, and after a
// 401 (token revoked) drops it so the retry gets a new one, as a keystoneauth
// session re-authenticates.
type Keystone struct{ Source TokenSource }

// Apply sets X-Auth-Token to the current service token.
func (k Keystone) Apply(ctx context.Context, req *http.Request) error {
	tok, err := k.Source.ServiceToken(ctx)
	if err != nil {
		return err
	}
	req.Header.Set("X-Auth-Token", tok)
	return nil
}

// Rejected invalidates the token and asks for one retry.
func (k Keystone) Rejected() bool {
	k.Source.Invalidate()
	return true
}
