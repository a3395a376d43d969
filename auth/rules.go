package auth

import "context"

// Rules is the access rules one API enforces: its Authorizer (nil allows
// everything, Ironic's behaviour outside keystone mode) and the oslo.policy
// switch Ironic's handlers read themselves (enforce_new_defaults changes
// how an allocation's owner is chosen).
type Rules struct {
	Authorizer         Authorizer
	EnforceNewDefaults bool
}

// Open reports whether every request is allowed (no Authorizer, or
// AllowAll), so that handlers can skip loading what a rule would need.
func (r Rules) Open() bool {
	_, all := r.Authorizer.(AllowAll)
	return r.Authorizer == nil || all
}

// Allowed reports whether creds may perform rule on target.
func (r Rules) Allowed(rule string, target map[string]string, creds Credentials) bool {
	if r.Open() {
		return true
	}
	return r.Authorizer.Allowed(rule, target, creds)
}

// Target is an oslo.policy target as Ironic builds it: the caller's own
// policy values (user_id, project_id, system_scope, domain_id) with the
// object's attributes kv ("node.owner", owner, "node.lessee", lessee, ...)
// on top. Empty values are left out, so that a check like
// project_id:%(node.owner)s never matches a node without an owner.
func Target(creds Credentials, kv ...string) map[string]string {
	t := make(map[string]string, 4+len(kv)/2)
	for k, v := range map[string]string{
		"user_id": creds.UserID, "project_id": creds.ProjectID,
		"system_scope": creds.SystemScope, "domain_id": creds.DomainID,
	} {
		if v != "" {
			t[k] = v
		}
	}
	for i := 0; i+1 < len(kv); i += 2 {
		if kv[i+1] != "" {
			t[kv[i]] = kv[i+1]
		} else {
			delete(t, kv[i])
		}
	}
	return t
}

// Caller returns the request's credentials, or SystemAdmin("admin") when
// there are none (a handler called without the middleware, as in unit
// tests): metalloc's APIs are open unless authentication is configured.
func Caller(ctx context.Context) Credentials {
	if c, ok := FromContext(ctx); ok {
		return c
	}
	return SystemAdmin("admin")
}
