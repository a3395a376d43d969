// Package cli holds the few helpers the metalloc commands share for wiring
// flags into configuration.
package cli

import (
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// ChangedFlags returns a flag set holding only the flags the user set on cmd,
// so that unset flags do not override the config file or environment.
func ChangedFlags(cmd *cobra.Command) *pflag.FlagSet {
	fs := pflag.NewFlagSet(cmd.Name(), pflag.ContinueOnError)
	cmd.Flags().Visit(func(f *pflag.Flag) {
		if f.Name != "config" {
			fs.AddFlag(f)
		}
	})
	return fs
}
