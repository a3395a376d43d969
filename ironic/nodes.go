package ironic

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"

	"github.com/gophercloud/gophercloud/v2"
	"github.com/gophercloud/gophercloud/v2/openstack/baremetal/v1/nodes"
)

// NodeState is what the conductors' lease moves read of one Ironic node
// (GET /v1/nodes/{ident} with the mirror's fields): Ironic's provision
// state machine (provision_state and its target while it moves, e.g.
// "deleting" then "cleaning" then "available" after an undeploy), the
// project the node is lent to (lessee, microversion 1.65), its
// maintenance flag and Ironic's last_error (why a deploy, clean or
// undeploy failed).
type NodeState struct {
	UUID                 string  `json:"uuid"`
	ProvisionState       string  `json:"provision_state"`
	TargetProvisionState *string `json:"target_provision_state"`
	Lessee               *string `json:"lessee"`
	Maintenance          bool    `json:"maintenance"`
	LastError            *string `json:"last_error"`
	InstanceUUID         *string `json:"instance_uuid"`
}

// LesseeIs reports whether the node is lent to project.
func (n NodeState) LesseeIs(project string) bool { return n.Lessee != nil && *n.Lessee == project }

// NodeState reads node ident (uuid or name) from Ironic; a missing node is
// an *Error with Status 404 (IsNotFound).
func (c *Client) NodeState(ctx context.Context, ident string) (NodeState, error) {
	raw, err := c.GetNode(ctx, ident)
	if err != nil {
		return NodeState{}, err
	}
	var n NodeState
	if err := json.Unmarshal(raw, &n); err != nil {
		return NodeState{}, fmt.Errorf("ironic: node %s: %w", ident, err)
	}
	return n, nil
}

// SetNodeLessee sends PATCH /v1/nodes/{ident} setting the node's lessee
// to project, or removing it when project is "" (Ironic's node field
// lessee, microversion 1.65: the project the node is lent to, whose
// allocations Ironic may put on it). Ironic answers 409 (IsConflict) while
// one of its conductors holds the node's lock, 404 for a node it no
// longer has.
func (c *Client) SetNodeLessee(ctx context.Context, ident, project string) error {
	op := nodes.UpdateOperation{Op: nodes.ReplaceOp, Path: "/lessee", Value: project}
	if project == "" {
		op = nodes.UpdateOperation{Op: nodes.RemoveOp, Path: "/lessee"}
	}
	return c.call(ctx, http.MethodPatch, "nodes/"+url.PathEscape(ident), func(ctx context.Context, sc *gophercloud.ServiceClient) error {
		return nodes.Update(ctx, sc, ident, nodes.UpdateOpts{op}).Err
	})
}

// Undeploy sends PUT /v1/nodes/{ident}/states/provision with target
// "deleted" (openstack baremetal node undeploy): Ironic tears the
// instance down (deleting), cleans the node when automated cleaning is on
// (cleaning, clean wait) and makes it available; its allocation is
// deleted on the way. Ironic answers 202 at once; 400 or 409 when it
// refuses (the node protected, locked, or in a state with no such
// transition), with the reason in the *Error's Message.
func (c *Client) Undeploy(ctx context.Context, ident string) error {
	return c.call(ctx, http.MethodPut, "nodes/"+url.PathEscape(ident)+"/states/provision", func(ctx context.Context, sc *gophercloud.ServiceClient) error {
		return nodes.ChangeProvisionState(ctx, sc, ident, nodes.ProvisionStateOpts{Target: nodes.TargetDeleted}).Err
	})
}
