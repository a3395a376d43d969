package auth

import (
	"context"
	"net/http"
	"strings"
)

// IronicNoAuth is Ironic's noauth: every request acts as a system
// administrator, with or without a token.
type IronicNoAuth struct{}

// Authenticate returns SystemAdmin("admin").
func (IronicNoAuth) Authenticate(context.Context, *http.Request) (Credentials, error) {
	return SystemAdmin("admin"), nil
}

// PlacementNoAuth is Placement's noauth2, the mode its own functional tests
// use to drive every role: a request without X-Auth-Token gets 401; the
// token reads "user[:project]" (project defaults to the user); roles come
// from X-Roles (comma-separated, as Keystone would flatten them), else user
// "admin" has the admin role and anybody else none; a non-empty
// OpenStack-System-Scope header makes the token system-scoped (no project);
// an X-Project-Id header overrides the project.
// Nothing is verified: this mode is for loopback and tests (see
// config.API.AllowInsecureNoAuth).
type PlacementNoAuth struct{}

// Authenticate implements Authenticator.
func (PlacementNoAuth) Authenticate(_ context.Context, r *http.Request) (Credentials, error) {
	token := r.Header.Get("X-Auth-Token")
	if _, present := r.Header["X-Auth-Token"]; !present {
		return Credentials{}, unauthorized("", "This server could not verify that you are authorized to access the document you requested.")
	}
	user, project, _ := strings.Cut(token, ":")
	if project == "" {
		project = user
	}
	c := Credentials{UserID: user, UserName: user}
	if rh, ok := r.Header["X-Roles"]; ok {
		for _, role := range strings.Split(strings.Join(rh, ","), ",") {
			if role = strings.TrimSpace(role); role != "" {
				c.Roles = append(c.Roles, strings.ToLower(role))
			}
		}
	} else if user == "admin" {
		c.Roles = []string{"admin"}
	}
	if s := r.Header.Get("OpenStack-System-Scope"); s != "" {
		c.SystemScope = strings.ToLower(s)
	} else {
		c.ProjectID = project
	}
	// oslo.context reads X-Project-Id before the X-Tenant-Id noauth2 sets,
	// so a project sent by the client wins (Placement's tests rely on it).
	if p := r.Header.Get("X-Project-Id"); p != "" {
		c.ProjectID = p
	}
	return c, nil
}
