package auth

import (
	"fmt"
	"net"
	"net/http"

	"go.uber.org/zap"
)

// Options selects an Authenticator (New).
type Options struct {
	// Strategy is StrategyNoAuth, StrategyHTTPBasic or StrategyKeystone.
	Strategy string
	// HTTPBasicAuthUserFile is http_basic's htpasswd file.
	HTTPBasicAuthUserFile string
	// Keystone configures StrategyKeystone.
	Keystone KeystoneConfig
	// NoAuth is what noauth means for this API: IronicNoAuth{} or
	// PlacementNoAuth{}.
	NoAuth Authenticator
	// Client talks to Keystone (nil: one built from Keystone.CAFile).
	Client *http.Client
}

// New returns the Authenticator opts.Strategy names; an unknown strategy
// or missing settings are errors naming the key to set.
func New(opts Options, log *zap.Logger) (Authenticator, error) {
	switch opts.Strategy {
	case StrategyNoAuth, "":
		return opts.NoAuth, nil
	case StrategyHTTPBasic:
		return NewHTTPBasic(opts.HTTPBasicAuthUserFile, log)
	case StrategyKeystone:
		return NewKeystone(opts.Keystone, opts.Client, log)
	}
	return nil, fmt.Errorf("auth_strategy %q: must be %s, %s or %s", opts.Strategy, StrategyNoAuth, StrategyHTTPBasic, StrategyKeystone)
}

// CheckNoAuthListen refuses noauth on a listen address that is not
// loopback unless allowInsecure (api.allow_insecure_noauth or the
// --insecure-noauth flag): noauth trusts whatever the client says, so it
// must not be reachable from the network by accident.
func CheckNoAuthListen(strategy, listen string, allowInsecure bool) error {
	if (strategy != StrategyNoAuth && strategy != "") || allowInsecure {
		return nil
	}
	host, _, err := net.SplitHostPort(listen)
	if err != nil {
		return fmt.Errorf("listen %q: %w", listen, err)
	}
	if host == "localhost" {
		return nil
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsLoopback() {
		return nil
	}
	return fmt.Errorf("auth_strategy noauth lets anybody who can reach %s act as an administrator: "+
		"listen on a loopback address, set auth_strategy to http_basic or keystone, "+
		"or accept the risk with --insecure-noauth (allow_insecure_noauth: true)", listen)
}
