// Package auth authenticates requests to metalloc's two APIs the way Ironic
// and Placement do (their auth_strategy option): noauth, http_basic (an
// Apache htpasswd file with bcrypt hashes, as Ironic's) and keystone (tokens
// validated against Keystone v3, as keystonemiddleware's auth_token does). An
// Authenticator turns a request into Credentials; Middleware stores them in
// the request's context for the access rules (package auth/policy) and the
// handlers that scope what a project sees (node owner/lessee).
package auth

import (
	"context"
	"slices"
	"strings"
)

// Credentials are who a request acts as, as Keystone describes a token: the
// user, the project the token is scoped to (empty for a system-scoped or
// unscoped token), the user's roles on that scope (lower-case names, e.g.
// "admin", "member", "reader", "service") and the system scope ("all" for a
// system-scoped token, else empty). They are what oslo.policy's checks read:
// role:<name>, project_id:<...>, user_id:<...>, system_scope:all.
type Credentials struct {
	UserID      string
	UserName    string
	ProjectID   string
	ProjectName string
	// ProjectDomainID is the domain of the project (Keystone's "default"
	// for the Default domain).
	ProjectDomainID string
	DomainID        string
	Roles           []string
	SystemScope     string
	// NotAdminProject is Keystone's is_admin_project=false: the token is
	// scoped to a project other than the cloud's admin project. Keystone
	// (and keystonemiddleware) report true unless an admin project is
	// configured, hence the negative field, whose zero value is
	// oslo.context's default. Old Ironic rules check is_admin_project:True.
	NotAdminProject bool
}

// HasRole reports whether the credentials carry role (case-insensitive, as
// oslo.policy compares roles).
func (c Credentials) HasRole(role string) bool {
	return slices.ContainsFunc(c.Roles, func(r string) bool { return strings.EqualFold(r, role) })
}

// System reports whether the token is system-scoped (system_scope:all).
func (c Credentials) System() bool { return c.SystemScope == "all" }

// ScopeType is the token's scope as oslo.policy's scope_types name it:
// "system", "project", "domain", or "" for an unscoped token.
func (c Credentials) ScopeType() string {
	switch {
	case c.System():
		return "system"
	case c.ProjectID != "":
		return "project"
	case c.DomainID != "":
		return "domain"
	}
	return ""
}

type credentialsKey struct{}

// WithCredentials returns ctx carrying c.
func WithCredentials(ctx context.Context, c Credentials) context.Context {
	return context.WithValue(ctx, credentialsKey{}, c)
}

// FromContext returns the credentials Middleware stored in ctx; ok is false
// when there are none (a route that needs no authentication, or a test
// calling a handler directly).
func FromContext(ctx context.Context) (c Credentials, ok bool) {
	c, ok = ctx.Value(credentialsKey{}).(Credentials)
	return c, ok
}
