package cli

import (
	"github.com/metalloc/metalloc/config"
	"github.com/metalloc/metalloc/ironic"
)

// IronicClient builds metalloc's client for Ironic from the ironic
// section (and the keystone section, for auth_strategy keystone); nil and
// no error when ironic.endpoint is empty (standalone metalloc). It checks
// the settings without contacting Ironic.
func IronicClient(cfg config.Config) (*ironic.Client, error) {
	ic := cfg.Ironic
	if ic.Endpoint == "" {
		return nil, nil
	}
	if _, err := ironic.ParseSchedule(ic.SyncSchedule); err != nil {
		return nil, err
	}
	return ironic.NewClient(ironic.Options{
		Endpoint: ic.Endpoint, AuthStrategy: ic.AuthStrategy, Username: ic.Username, Password: ic.Password,
		Keystone: cfg.Keystone, KeystoneScope: ic.KeystoneScope, CAFile: ic.CAFile, Timeout: ic.Timeout,
		Microversion: ic.Microversion,
	})
}
