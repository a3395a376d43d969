package main

import (
	"errors"
	"fmt"
	"io"
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
			"keystone --token (or $OS_TOKEN), else a token of the keystone section's user. Credentials\n" +
			"given (--username, --token or their variables) are sent whatever the configuration says.\n" +
			"create and show print the allocation as a Field/Value table (-f json|yaml|value for others,\n" +
			"-c FIELD for some fields). With --wait, create and show exit 0 once it is active,\n" +
			"3 if it ended in error, 4 if it was still allocating when the wait ran out.",
	}
	newClient := apiClientFlags(c)
	var waitSec int
	addWait := func(cmd *cobra.Command) {
		cmd.Flags().IntVar(&waitSec, "wait", 0, "wait up to SECONDS (default 60 with a bare --wait; capped by the server's api.max_wait) for the allocation to leave allocating")
		cmd.Flags().Lookup("wait").NoOptDefVal = "60"
	}

	var req allocation.CreateRequest
	var createOut, showOut *output
	create := &cobra.Command{
		Use:   "create --resource-class CLASS [--trait T]... [--name N] [--candidate-node NODE]... [--owner P] [--wait [SECONDS]]",
		Short: "create an allocation, optionally waiting for its node",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := createOut.check(); err != nil {
				return err
			}
			cl, err := newClient(cmd)
			if err != nil {
				return err
			}
			doc, err := cl.Create(cmd.Context(), req, time.Duration(waitSec)*time.Second)
			if err != nil {
				return err
			}
			return report(cmd.OutOrStdout(), createOut, doc, waitSec > 0, allocationFields...)
		},
	}
	createOut = addOutputFlags(create)
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
			if err := showOut.check(); err != nil {
				return err
			}
			cl, err := newClient(cmd)
			if err != nil {
				return err
			}
			doc, err := cl.Show(cmd.Context(), args[0], time.Duration(waitSec)*time.Second)
			if err != nil {
				return err
			}
			return report(cmd.OutOrStdout(), showOut, doc, waitSec > 0, allocationFields...)
		},
	}
	showOut = addOutputFlags(show)
	addWait(show)

	del := &cobra.Command{
		Use:   "delete IDENT",
		Short: "delete an allocation (uuid or name), releasing its node; prints what it deleted",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := newClient(cmd)
			if err != nil {
				return err
			}
			doc, err := cl.Show(cmd.Context(), args[0], 0)
			if err != nil {
				return err
			}
			id, _ := doc["uuid"].(string)
			if err := cl.Delete(cmd.Context(), id); err != nil {
				return err
			}
			msg := "Deleted allocation " + describe(doc)
			if node, _ := doc["node_uuid"].(string); node != "" {
				msg += ", released node " + node
			}
			fmt.Fprintln(cmd.OutOrStdout(), msg)
			return nil
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
		// Credentials given on the command line or in the environment
		// are sent whatever api.auth_strategy says (this machine's
		// configuration need not be the API's); the strategy only says
		// what to do without any.
		switch {
		case user != "" && cmd.Flags().Changed("token") && token != "":
			return nil, errors.New("give --username/--password or --token, not both")
		case user != "":
			cl.Credential = client.Basic{User: user, Password: password}
		case token != "":
			cl.Credential = client.Token(token)
		case cfg.API.AuthStrategy == "" || cfg.API.AuthStrategy == auth.StrategyNoAuth:
		case cfg.API.AuthStrategy == auth.StrategyHTTPBasic:
			return nil, errors.New("api.auth_strategy is http_basic: give --username and --password")
		case cfg.API.AuthStrategy == auth.StrategyKeystone:
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

// allocationFields is the order `allocation show` prints an allocation's
// fields in (the rest follow, sorted).
var allocationFields = []string{"uuid", "name", "state", "node_uuid", "resource_class", "traits",
	"candidate_nodes", "owner", "allocation_group_uuid", "last_error", "extra", "created_at", "updated_at"}

// report prints doc as out says (fields first, in that order) and, after
// a wait, turns its state into the exit status: exitAllocationError for
// error, exitStillAllocating for allocating.
func report(w io.Writer, out *output, doc map[string]any, waited bool, fields ...string) error {
	if err := out.show(w, doc, fields...); err != nil {
		return err
	}
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

// describe names a document for a message: its name and uuid, or the uuid.
func describe(doc map[string]any) string {
	id, _ := doc["uuid"].(string)
	if name, _ := doc["name"].(string); name != "" {
		return name + " (" + id + ")"
	}
	return id
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
