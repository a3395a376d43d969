package auth

import (
	"context"
	"errors"
	"fmt"
	"net/http"
)

// Strategies are the values of api.auth_strategy and
// placement.auth_strategy, Ironic's option name and values.
const (
	StrategyNoAuth    = "noauth"
	StrategyHTTPBasic = "http_basic"
	StrategyKeystone  = "keystone"
)

// An Authenticator turns a request into the credentials it acts as. It
// returns a *Failure for a request it refuses (401, 400) or cannot judge
// (503: Keystone unreachable); any other error is a bug and renders as 500.
// Implementations are safe for concurrent use.
type Authenticator interface {
	Authenticate(ctx context.Context, r *http.Request) (Credentials, error)
}

// Failure is a refused or unjudgeable request: its status (401, 400 or
// 503), a message for the client (never a secret), for 401 the
// WWW-Authenticate challenge to send (`Basic realm="..."` or
// `Keystone uri="..."`), and for 503 when to retry (seconds, sent as
// Retry-After by Middleware; 0: no header). Each API renders it in its
// own error format.
type Failure struct {
	Status     int
	Message    string
	Challenge  string
	RetryAfter int
}

func (f *Failure) Error() string { return fmt.Sprintf("%d: %s", f.Status, f.Message) }

// AsFailure returns err's *Failure, if it has one.
func AsFailure(err error) (*Failure, bool) {
	var f *Failure
	ok := errors.As(err, &f)
	return f, ok
}

func unauthorized(challenge, msg string) *Failure {
	return &Failure{Status: http.StatusUnauthorized, Message: msg, Challenge: challenge}
}

// SystemAdmin is what Ironic's noauth and http_basic modes act as: Ironic
// does not check its access rules unless auth_strategy is keystone
// (ironic.common.policy.authorize), which is the same as a system-scoped
// administrator under the default rules.
func SystemAdmin(user string) Credentials {
	return Credentials{UserID: user, UserName: user, Roles: []string{"admin", "member", "reader"}, SystemScope: "all"}
}

// An Authorizer decides whether creds may perform the access rule named
// rule (an oslo.policy rule name such as "baremetal:node:get" or
// "placement:resource_providers:list") on target (the object's policy
// attributes, e.g. "node.owner", "project_id"). *policy.Enforcer is the
// real one; AllowAll is Ironic's behaviour outside keystone mode.
type Authorizer interface {
	Allowed(rule string, target map[string]string, creds Credentials) bool
}

// AllowAll allows everything: Ironic checks no access rules unless
// auth_strategy is keystone.
type AllowAll struct{}

// Allowed implements Authorizer.
func (AllowAll) Allowed(string, map[string]string, Credentials) bool { return true }
