package cli

import (
	"fmt"

	"github.com/spf13/cobra"
	"go.uber.org/zap"

	"github.com/metalloc/metalloc/auth"
	"github.com/metalloc/metalloc/auth/policy"
	"github.com/metalloc/metalloc/config"
	"github.com/metalloc/metalloc/placement/client"
)

// AddAccessFlags adds the flags both APIs take for authentication:
// --insecure-noauth.
func AddAccessFlags(cmd *cobra.Command) {
	cmd.Flags().Bool("insecure-noauth", false, "allow auth_strategy noauth on a non-loopback listen address (anybody who reaches it is an administrator)")
}

// Authenticator builds an API's Authenticator from its access settings
// (noauth is what noauth means for that API), after refusing noauth on a
// non-loopback listen address unless allow_insecure_noauth or
// --insecure-noauth.
func Authenticator(cmd *cobra.Command, cfg config.Config, a config.Access, listen string, noauth auth.Authenticator, log *zap.Logger) (auth.Authenticator, error) {
	insecure, _ := cmd.Flags().GetBool("insecure-noauth")
	if err := auth.CheckNoAuthListen(a.AuthStrategy, listen, a.AllowInsecureNoAuth || insecure); err != nil {
		return nil, err
	}
	authn, err := auth.New(auth.Options{
		Strategy:              a.AuthStrategy,
		HTTPBasicAuthUserFile: a.HTTPBasicAuthUserFile,
		Keystone:              cfg.Keystone,
		NoAuth:                noauth,
	}, log)
	if err != nil {
		return nil, err
	}
	if a.AuthStrategy == auth.StrategyNoAuth && insecure {
		log.Warn("auth_strategy noauth on a non-loopback address: anybody who can reach it is an administrator", zap.String("listen", listen))
	}
	log.Info("authentication", zap.String("auth_strategy", a.AuthStrategy))
	return authn, nil
}

// Rules builds an API's access rules from defaults and its settings
// (policy_file, enforce_scope, enforce_new_defaults). ironic selects
// Ironic's behaviour: no rules at all outside keystone mode.
func Rules(a config.Access, defaults []policy.Default, ironic bool) (auth.Rules, error) {
	if ironic && a.AuthStrategy != auth.StrategyKeystone {
		return auth.Rules{}, nil
	}
	e, err := policy.New(defaults, policy.Options{
		EnforceScope: a.EnforceScope, EnforceNewDefaults: a.EnforceNewDefaults, File: a.PolicyFile,
	})
	if err != nil {
		return auth.Rules{}, err
	}
	return auth.Rules{Authorizer: e, EnforceNewDefaults: a.EnforceNewDefaults}, nil
}

// PlacementClient builds the conductor's Placement client from the
// placement_backend section: auth_strategy token (X-Auth-Token: token),
// http_basic (username, password) or keystone (a service token of the
// keystone section's user, renewed after a 401), verifying an https
// endpoint with ca_file, each request bounded by timeout.
func PlacementClient(cfg config.Config, log *zap.Logger) (*client.Client, error) {
	pb := cfg.PlacementBackend
	hc, err := auth.HTTPClient(pb.CAFile, pb.Timeout)
	if err != nil {
		return nil, fmt.Errorf("placement_backend.ca_file: %w", err)
	}
	var cred client.Credential
	switch pb.AuthStrategy {
	case "", "token":
		cred = client.Token(pb.Token)
	case auth.StrategyHTTPBasic:
		cred = client.Basic{User: pb.Username, Password: pb.Password}
	case auth.StrategyKeystone:
		ks, err := auth.NewKeystone(cfg.Keystone, nil, log)
		if err != nil {
			return nil, err
		}
		cred = client.Keystone{Source: ks}
	default:
		return nil, fmt.Errorf("placement_backend.auth_strategy %q: want token, http_basic or keystone", pb.AuthStrategy)
	}
	return client.NewWithCredential(pb.Endpoint, cred, hc), nil
}
