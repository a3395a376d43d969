package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/metalloc/metalloc/allocation"
	"github.com/metalloc/metalloc/auth"
	"github.com/metalloc/metalloc/config"
	"github.com/metalloc/metalloc/placement/client"
)

// Exit statuses of `allocation create/show --wait`, for scripts.
const (
	exitAllocationError = 3 // the allocation ended in state error
	exitStillAllocating = 4 // the wait ran out while it was allocating
)

// allocationCmd is `metalloc-manage allocation create|show|delete`: a client
// of metalloc-api for scripts, waiting with Prefer: wait instead of
// polling.
func allocationCmd() *cobra.Command {
	c := &cobra.Command{
		Use:   "allocation",
		Short: "create, show and delete allocations through metalloc-api (waiting without polling)",
		Long: "Talks HTTP to metalloc-api (--endpoint, default the configured api.public_endpoint or\n" +
			"api.listen) with the configured api.auth_strategy: noauth sends no credentials (or --token),\n" +
			"http_basic --username/--password (or $METALLOC_API_USERNAME/$METALLOC_API_PASSWORD),\n" +
			"keystone --token (or $OS_TOKEN), else a token of the keystone section's user.\n" +
			"The allocation is printed as JSON. With --wait, create and show exit 0 once it is active,\n" +
			"3 if it ended in error, 4 if it was still allocating when the wait ran out.",
	}
	newClient := apiClientFlags(c)
	var waitSec int
	addWait := func(cmd *cobra.Command) {
		cmd.Flags().IntVar(&waitSec, "wait", 0, "wait up to SECONDS (default 60 with a bare --wait; capped by the server's api.max_wait) for the allocation to leave allocating")
		cmd.Flags().Lookup("wait").NoOptDefVal = "60"
	}

	var req allocation.CreateRequest
	create := &cobra.Command{
		Use:   "create --resource-class CLASS [--trait T]... [--name N] [--candidate-node NODE]... [--owner P] [--wait [SECONDS]]",
		Short: "create an allocation, optionally waiting for its node",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cl, err := newClient(cmd)
			if err != nil {
				return err
			}
			doc, err := cl.Create(cmd.Context(), req, time.Duration(waitSec)*time.Second)
			if err != nil {
				return err
			}
			return report(doc, waitSec > 0)
		},
	}
	create.Flags().StringVar(&req.ResourceClass, "resource-class", "", "resource class of the node wanted (required)")
	create.Flags().StringArrayVar(&req.Traits, "trait", nil, "trait the node must have (repeatable)")
	create.Flags().StringVar(&req.Name, "name", "", "allocation name")
	create.Flags().StringArrayVar(&req.CandidateNodes, "candidate-node", nil, "node (name or uuid) the allocation may take (repeatable)")
	create.Flags().StringVar(&req.Owner, "owner", "", "owning project")
	_ = create.MarkFlagRequired("resource-class")
	addWait(create)

	show := &cobra.Command{
		Use:   "show IDENT [--wait [SECONDS]]",
		Short: "show an allocation (uuid or name), optionally waiting for it to leave allocating",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := newClient(cmd)
			if err != nil {
				return err
			}
			doc, err := cl.Show(cmd.Context(), args[0], time.Duration(waitSec)*time.Second)
			if err != nil {
				return err
			}
			return report(doc, waitSec > 0)
		},
	}
	addWait(show)

	del := &cobra.Command{
		Use:   "delete IDENT",
		Short: "delete an allocation (uuid or name), releasing its node",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := newClient(cmd)
			if err != nil {
				return err
			}
			return cl.Delete(cmd.Context(), args[0])
		},
	}
	c.AddCommand(create, show, del)
	return c
}

// apiClientFlags adds the flags that reach metalloc-api (--endpoint,
// --token, --username, --password, --ca-file) to c and returns the
// function that builds the client from them and the configuration.
func apiClientFlags(c *cobra.Command) func(cmd *cobra.Command) (*allocation.Client, error) {
	var endpoint, token, user, password, caFile string
	pf := c.PersistentFlags()
	pf.StringVar(&endpoint, "endpoint", "", "metalloc-api base URL (default from api.public_endpoint or api.listen)")
	pf.StringVar(&token, "token", os.Getenv("OS_TOKEN"), "X-Auth-Token to send (keystone, or noauth)")
	pf.StringVar(&user, "username", os.Getenv("METALLOC_API_USERNAME"), "http_basic user")
	pf.StringVar(&password, "password", os.Getenv("METALLOC_API_PASSWORD"), "http_basic password")
	pf.StringVar(&caFile, "ca-file", "", "CA bundle to verify an https endpoint")

	return func(cmd *cobra.Command) (*allocation.Client, error) {
		cfg, log, err := load(cmd)
		if err != nil {
			return nil, err
		}
		hc, err := auth.HTTPClient(caFile, 0)
		if err != nil {
			return nil, err
		}
		cl := &allocation.Client{Endpoint: endpoint, HTTP: hc, RequestTimeout: cfg.API.RequestTimeout}
		if cl.Endpoint == "" {
			cl.Endpoint = apiEndpoint(cfg)
		}
		switch cfg.API.AuthStrategy {
		case "", auth.StrategyNoAuth:
			cl.Credential = client.Token(token)
		case auth.StrategyHTTPBasic:
			if user == "" {
				return nil, errors.New("api.auth_strategy is http_basic: give --username and --password")
			}
			cl.Credential = client.Basic{User: user, Password: password}
		case auth.StrategyKeystone:
			if token != "" {
				cl.Credential = client.Token(token)
				break
			}
			ks, err := auth.NewKeystone(cfg.Keystone, nil, log)
			if err != nil {
				return nil, err
			}
			cl.Credential = client.Keystone{Source: ks}
		default:
			return nil, fmt.Errorf("api.auth_strategy %q: want noauth, http_basic or keystone", cfg.API.AuthStrategy)
		}
		return cl, nil
	}
}

// report prints doc as indented JSON and, after a wait, turns its state
// into the exit status: exitAllocationError for error,
// exitStillAllocating for allocating.
func report(doc map[string]any, waited bool) error {
	out, _ := json.MarshalIndent(doc, "", "  ")
	fmt.Println(string(out))
	if !waited {
		return nil
	}
	st, _ := doc["state"].(string)
	switch allocation.State(st) {
	case allocation.StateError:
		return exitCode(exitAllocationError)
	case allocation.StateAllocating:
		return exitCode(exitStillAllocating)
	}
	return nil
}

// apiEndpoint is where metalloc-api is reached by default: its public
// endpoint, else its listen address (https when it serves TLS).
func apiEndpoint(cfg config.Config) string {
	if cfg.API.PublicEndpoint != "" {
		return cfg.API.PublicEndpoint
	}
	scheme := "http"
	if cfg.API.TLS() {
		scheme = "https"
	}
	return scheme + "://" + cfg.API.Listen
}
