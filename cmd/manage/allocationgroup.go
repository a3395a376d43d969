package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"time"

	"github.com/spf13/cobra"
)

// allocationGroupCmd is `metalloc-manage allocation-group
// create|show|list|delete`: a client of /v1/allocation_groups (gang
// allocation), waiting with Prefer: wait instead of polling.
func allocationGroupCmd() *cobra.Command {
	c := &cobra.Command{
		Use:   "allocation-group",
		Short: "create, show, list and delete allocation groups (N nodes all or nothing) through metalloc-api",
		Long: "Talks HTTP to metalloc-api as `metalloc-manage allocation` does (same flags and credentials).\n" +
			"create and show print the group as a Field/Value table, list as a table (-f json|yaml|value\n" +
			"for others, -c COLUMN for some columns). With --wait, create and show exit 0 once it is active,\n" +
			"3 if it ended in error, 4 if it was still allocating when the wait ran out.",
	}
	newClient := apiClientFlags(c)
	var waitSec int
	addWait := func(cmd *cobra.Command) {
		cmd.Flags().IntVar(&waitSec, "wait", 0, "wait up to SECONDS (default 60 with a bare --wait; capped by the server's api.max_wait) for the group to leave allocating")
		cmd.Flags().Lookup("wait").NoOptDefVal = "60"
	}

	var req struct {
		Name           string   `json:"name,omitempty"`
		Count          int      `json:"count"`
		ResourceClass  string   `json:"resource_class"`
		Traits         []string `json:"traits,omitempty"`
		CandidateNodes []string `json:"candidate_nodes,omitempty"`
		Owner          string   `json:"owner,omitempty"`
		Required       string   `json:"required,omitempty"`
		Preferred      string   `json:"preferred,omitempty"`
	}
	var createOut, showOut, listOut *output
	create := &cobra.Command{
		Use:   "create --count N --resource-class CLASS [--required LEVEL | --preferred LEVEL] [--trait T]... [--name N] [--candidate-node NODE]... [--owner P] [--wait [SECONDS]]",
		Short: "create an allocation group, optionally waiting until all its nodes are reserved",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if req.Required != "" && req.Preferred != "" {
				return errors.New("give --required or --preferred, not both")
			}
			if err := createOut.check(); err != nil {
				return err
			}
			cl, err := newClient(cmd)
			if err != nil {
				return err
			}
			body, _ := json.Marshal(req)
			doc, err := cl.Do(cmd.Context(), http.MethodPost, "/v1/allocation_groups", body, time.Duration(waitSec)*time.Second)
			if err != nil {
				return err
			}
			return report(cmd.OutOrStdout(), createOut, doc, waitSec > 0, groupFields...)
		},
	}
	createOut = addOutputFlags(create)
	f := create.Flags()
	f.IntVar(&req.Count, "count", 0, "how many nodes (required)")
	f.StringVar(&req.ResourceClass, "resource-class", "", "resource class of the nodes (required)")
	f.StringVar(&req.Required, "required", "", "topology level (e.g. rack) all nodes must share one domain of")
	f.StringVar(&req.Preferred, "preferred", "", "topology level to keep the nodes in one domain of if any has room")
	f.StringArrayVar(&req.Traits, "trait", nil, "trait every node must have (repeatable)")
	f.StringVar(&req.Name, "name", "", "group name")
	f.StringArrayVar(&req.CandidateNodes, "candidate-node", nil, "node (name or uuid) the group may take (repeatable)")
	f.StringVar(&req.Owner, "owner", "", "owning project")
	_ = create.MarkFlagRequired("count")
	_ = create.MarkFlagRequired("resource-class")
	addWait(create)

	show := &cobra.Command{
		Use:   "show IDENT [--wait [SECONDS]]",
		Short: "show an allocation group (uuid or name), optionally waiting for it to leave allocating",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := showOut.check(); err != nil {
				return err
			}
			cl, err := newClient(cmd)
			if err != nil {
				return err
			}
			doc, err := cl.Do(cmd.Context(), http.MethodGet, "/v1/allocation_groups/"+url.PathEscape(args[0]), nil,
				time.Duration(waitSec)*time.Second)
			if err != nil {
				return err
			}
			return report(cmd.OutOrStdout(), showOut, doc, waitSec > 0, groupFields...)
		},
	}
	showOut = addOutputFlags(show)
	addWait(show)

	var state string
	var long bool
	list := &cobra.Command{
		Use:   "list [--state S] [--long] [-f table|json|yaml|value] [-c COLUMN]...",
		Short: "list allocation groups (the first page of api.max_limit)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := listOut.check(); err != nil {
				return err
			}
			cl, err := newClient(cmd)
			if err != nil {
				return err
			}
			path := "/v1/allocation_groups"
			if state != "" {
				path += "?state=" + url.QueryEscape(state)
			}
			doc, err := cl.Do(cmd.Context(), http.MethodGet, path, nil, 0)
			if err != nil {
				return err
			}
			cols := groupColumns
			if long || len(listOut.columns) > 0 {
				cols = append(slices.Clone(groupColumns), groupLongColumns...)
			}
			return listOut.list(cmd.OutOrStdout(), cols, docsOf(doc, "allocation_groups"))
		},
	}
	list.Flags().StringVar(&state, "state", "", "only groups in this state (allocating, active, error)")
	list.Flags().BoolVar(&long, "long", false, "also the traits, owner, members, last error and creation time")
	listOut = addOutputFlags(list)

	del := &cobra.Command{
		Use:   "delete IDENT",
		Short: "delete an allocation group (uuid or name), releasing every member's node; prints what it deleted",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := newClient(cmd)
			if err != nil {
				return err
			}
			doc, err := cl.Do(cmd.Context(), http.MethodGet, "/v1/allocation_groups/"+url.PathEscape(args[0]), nil, 0)
			if err != nil {
				return err
			}
			id, _ := doc["uuid"].(string)
			if _, err = cl.Do(cmd.Context(), http.MethodDelete, "/v1/allocation_groups/"+id, nil, 0); err != nil {
				return err
			}
			members, _ := doc["members"].([]any)
			fmt.Fprintf(cmd.OutOrStdout(), "Deleted allocation group %s, %s, released %d members\n",
				describe(doc), doc["state"], len(members))
			return nil
		},
	}
	c.AddCommand(create, show, list, del)
	return c
}

// groupFields is the order `allocation-group show` prints a group's fields
// in (the rest follow, sorted).
var groupFields = []string{"uuid", "name", "state", "count", "resource_class", "traits", "required", "preferred",
	"domain", "members", "nodes", "candidate_nodes", "owner", "last_error", "extra", "created_at", "updated_at"}

// groupColumns are the columns of `allocation-group list`; groupLongColumns
// follow them with --long (or when -c picks columns).
var (
	groupColumns = []column{
		{heading: "UUID", field: "uuid"},
		{heading: "Name", field: "name"},
		{heading: "State", field: "state"},
		{heading: "Count", field: "count"},
		{heading: "Resource Class", field: "resource_class"},
		{heading: "Placement", field: "placement", value: func(d map[string]any) any {
			for _, rule := range []string{"required", "preferred"} {
				if level, _ := d[rule].(string); level != "" {
					return rule + " " + level
				}
			}
			return ""
		}},
		{heading: "Domain", field: "domain"},
	}
	groupLongColumns = []column{
		{heading: "Traits", field: "traits"},
		{heading: "Owner", field: "owner"},
		{heading: "Members", field: "members"},
		{heading: "Last Error", field: "last_error"},
		{heading: "Created At", field: "created_at"},
	}
)

// docsOf is the list under key of a list answer.
func docsOf(doc map[string]any, key string) []map[string]any {
	items, _ := doc[key].([]any)
	out := make([]map[string]any, 0, len(items))
	for _, it := range items {
		if m, ok := it.(map[string]any); ok {
			out = append(out, m)
		}
	}
	return out
}
