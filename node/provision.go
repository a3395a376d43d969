package node

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/metalloc/metalloc/web"
)

// Provision targets (verbs) of PUT /v1/nodes/{ident}/states/provision.
const (
	TargetActive   = "active"
	TargetDeploy   = "deploy"
	TargetDeleted  = "deleted"
	TargetUndeploy = "undeploy"
	TargetRebuild  = "rebuild"
	TargetManage   = "manage"
	TargetProvide  = "provide"
	TargetInspect  = "inspect"
	TargetClean    = "clean"
	TargetAbort    = "abort"
	TargetAdopt    = "adopt"
	TargetRescue   = "rescue"
	TargetUnrescue = "unrescue"
)

// verbs maps API targets to state machine events (states.VERBS); targets
// not listed are their own event ("rebuild").
var verbs = map[string]string{
	TargetActive: "deploy", TargetDeploy: "deploy", TargetDeleted: "delete", TargetUndeploy: "delete",
	TargetManage: "manage", TargetProvide: "provide", TargetInspect: "inspect", TargetAbort: "abort",
	TargetClean: "clean", TargetAdopt: "adopt", TargetRescue: "rescue", TargetUnrescue: "unrescue",
}

// events lists, per provision state, the user-triggered events Ironic's
// state machine accepts in it (ironic/common/states.py). Events the
// conductor itself fires (done, fail, wait, resume) are left out: a client
// cannot send them.
var events = map[string][]string{
	StateEnroll:       {"manage"},
	StateManageable:   {"provide", "clean", "inspect", "adopt"},
	StateAvailable:    {"deploy", "manage"},
	StateActive:       {"rebuild", "delete", "rescue"},
	StateDeployWait:   {"delete"},
	StateDeployFail:   {"rebuild", "deploy", "delete"},
	StateCleaning:     {"manage"},
	StateCleanWait:    {"abort"},
	StateCleanFail:    {"manage"},
	StateError:        {"rebuild", "delete"},
	StateInspectWait:  {"abort"},
	StateInspectFail:  {"manage", "inspect"},
	StateAdoptFail:    {"adopt", "manage"},
	StateRescueWait:   {"abort", "delete"},
	StateRescue:       {"rescue", "delete", "unrescue"},
	StateRescueFail:   {"rescue", "unrescue", "delete"},
	StateUnrescueFail: {"rescue", "unrescue", "delete"},
}

// States lists every provision state Ironic's state machine knows; the
// provision_state list filter accepts only these.
var States = []string{
	StateEnroll, StateVerifying, StateManageable, StateAvailable, StateActive, StateDeploying,
	StateDeployWait, StateDeployFail, StateDeleting, StateCleaning, StateCleanWait, StateCleanFail,
	StateError, StateInspecting, StateInspectFail, StateInspectWait, StateAdopting, StateAdoptFail,
	StateRescue, StateRescueFail, StateRescueWait, StateRescuing, StateUnrescueFail, StateUnrescuing,
}

// Actionable reports whether target may be requested of a node in state,
// as Ironic's state machine decides before it does anything else.
func Actionable(state, target string) bool {
	ev, ok := verbs[target]
	if !ok {
		ev = target
	}
	return slices.Contains(events[state], ev)
}

// ProvisionRequest is a provision state change (PUT
// /v1/nodes/{ident}/states/provision). Microversion gates are the caller's
// business; Provision applies everything else.
type ProvisionRequest struct {
	// Target is the API target or verb (TargetActive, TargetManage, ...).
	Target string
	// ConfigDrive, for active/rebuild, is stored in
	// instance_info["configdrive"] as Ironic does (nil = none).
	ConfigDrive any
	// CleanSteps are required for (and only valid with) "clean".
	CleanSteps []any
	// DeploySteps are only valid with active/rebuild.
	DeploySteps []any
	// RescuePassword is required for (and only valid with) "rescue".
	RescuePassword *string
	// DisableRamdisk is only valid with "clean".
	DisableRamdisk *bool
}

// Provision moves the node through Ironic's provision state machine as Ironic
// with the fake-hardware type would, except that the work completes before
// Provision returns (there is no deploying/cleaning phase to poll):
//
//	enroll     -manage->  manageable (verifying)
//	manageable -provide-> available  (cleaning; a retired node refuses)
//	available  -manage->  manageable
//	available  -active/deploy-> active (deploying; refused in maintenance)
//	active     -rebuild-> active     (refused when protected)
//	active     -deleted/undeploy-> available (tear down, cleaning; instance_uuid,
//	            instance_info and the allocation are cleared in the same
//	            transaction through remover; a retired node ends manageable)
//	manageable -inspect/clean-> manageable, -adopt-> active
//	active     -rescue-> rescue -unrescue-> active
//
// plus the recovery transitions out of the failure states. A request the
// state machine does not allow is Ironic's InvalidStateRequested (400); a
// driver failure leaves the node in the matching failure state with
// last_error set (the request itself still succeeds, as Ironic's 202 does).
func (s *Store) Provision(ctx context.Context, ident string, req ProvisionRequest, drv Driver,
	remover AllocationRemover) (Node, error) {
	if drv == nil {
		drv = FakeDriver{}
	}
	remover = removerOrDefault(remover)
	return s.change(ctx, ident, func(tx pgx.Tx, _ *Queries, n *Node) error {
		return s.applyProvision(ctx, tx, n, req, drv, remover)
	})
}

// applyProvision is Provision's change of n, in tx (which only a tear down
// uses: nil is fine for manage and provide).
func (s *Store) applyProvision(ctx context.Context, tx pgx.Tx, n *Node, req ProvisionRequest, drv Driver,
	remover AllocationRemover) error {
	before := n.ProvisionState
	if err := s.provision(ctx, tx, n, req, drv, remover); err != nil {
		return err
	}
	n.TargetProvisionState = nil
	if n.ProvisionState != before {
		n.ProvisionUpdatedAt = ptr(s.now().UTC())
	}
	return nil
}

func (s *Store) provision(ctx context.Context, tx pgx.Tx, n *Node, req ProvisionRequest, drv Driver,
	remover AllocationRemover) error {
	target := req.Target
	if (target == TargetActive || target == TargetRebuild) && n.Maintenance {
		return errNodeInMaintenance("provisioning", n.UUID)
	}
	if !Actionable(n.ProvisionState, target) {
		if n.Reservation != nil {
			return conflictf("Node %s is locked by host %s, please retry after the current operation is completed.",
				n.UUID, *n.Reservation)
		}
		return errInvalidStateRequested(target, n.UUID.String(), n.ProvisionState)
	}
	if req.ConfigDrive != nil && !isEmptyValue(req.ConfigDrive) && target != TargetActive && target != TargetRebuild {
		return invalidf("Adding a config drive is only supported when setting provision state to %s, %s",
			TargetActive, TargetRebuild)
	}
	if len(req.CleanSteps) > 0 && target != TargetClean {
		return invalidf("\"clean_steps\" is only valid when setting target provision state to %s", TargetClean)
	}
	if len(req.DeploySteps) > 0 && target != TargetActive && target != TargetRebuild {
		return invalidf("\"deploy_steps\" is only valid when setting target provision state to %s or %s",
			TargetActive, TargetRebuild)
	}
	if req.RescuePassword != nil && target != TargetRescue {
		return invalidf("\"rescue_password\" is only valid when setting target provision state to %s", TargetRescue)
	}
	if req.DisableRamdisk != nil && target != TargetClean {
		return invalidf("disable_ramdisk is supported only with manual cleaning")
	}

	switch target {
	case TargetActive, TargetDeploy, TargetRebuild:
		if err := checkSteps("deploy", req.DeploySteps, []string{"interface", "step", "args", "priority"}); err != nil {
			return err
		}
		return s.deploy(ctx, n, target == TargetRebuild, req.ConfigDrive, drv)
	case TargetDeleted, TargetUndeploy:
		return s.tearDown(ctx, tx, n, drv, remover)
	case TargetManage:
		// enroll goes through verifying; the fake power interface always
		// validates, so verification cannot fail.
		n.ProvisionState = StateManageable
		n.LastError = nil
		return nil
	case TargetProvide:
		if n.Retired {
			return invalidf("The providing operation can't be performed on node %s because it is retired.", n.UUID)
		}
		n.LastError = nil
		s.clean(ctx, n, drv, StateAvailable)
		return nil
	case TargetInspect:
		n.ProvisionState = StateManageable
		n.LastError = nil
		return nil
	case TargetClean:
		if len(req.CleanSteps) == 0 {
			return invalidf("\"clean_steps\" is required when setting target provision state to %s", TargetClean)
		}
		if err := checkSteps("clean", req.CleanSteps, []string{"interface", "step"}); err != nil {
			return err
		}
		n.LastError = nil
		s.clean(ctx, n, drv, StateManageable)
		return nil
	case TargetAdopt:
		n.ProvisionState = StateActive
		n.LastError = nil
		return nil
	case TargetRescue:
		if req.RescuePassword == nil || strings.TrimSpace(*req.RescuePassword) == "" {
			return invalidf("A non-empty \"rescue_password\" is required when setting target provision state to %s", TargetRescue)
		}
		if n.Maintenance {
			return errNodeInMaintenance("rescuing", n.UUID)
		}
		n.ProvisionState = StateRescue
		return nil
	case TargetUnrescue:
		if n.Maintenance {
			return errNodeInMaintenance("unrescuing", n.UUID)
		}
		n.ProvisionState = StateActive
		return nil
	case TargetAbort:
		switch n.ProvisionState {
		case StateCleanWait:
			n.ProvisionState = StateCleanFail
			n.LastError = ptr("By request, the clean operation was aborted")
		case StateInspectWait:
			n.ProvisionState = StateInspectFail
			n.fail(eventIntrospection, "Inspection was aborted by request.")
		case StateRescueWait:
			n.ProvisionState = StateRescueFail
			n.notice(eventRescue, "By request, the rescue operation was aborted.")
		}
		return nil
	}
	return invalidf("The requested action \"%s\" could not be understood.", target)
}

// deploy runs a deploy or rebuild (validate_node + start_deploy).
func (s *Store) deploy(ctx context.Context, n *Node, rebuild bool, configDrive any, drv Driver) error {
	if n.Maintenance {
		return errNodeInMaintenance("provisioning", n.UUID)
	}
	if rebuild && n.Protected {
		return errNodeProtected(n.UUID)
	}
	if n.InstanceInfo == nil {
		n.InstanceInfo = map[string]any{}
	}
	if err := checkInstanceTraits(n); err != nil {
		return invalidf("Failed to validate deploy or power info for node %s: %s", n.UUID, err.Message)
	}
	if configDrive != nil && !isEmptyValue(configDrive) {
		n.InstanceInfo["configdrive"] = configDrive
	}
	n.ProvisionState = StateDeploying
	n.LastError = nil
	if err := drv.Deploy(ctx, n); err != nil {
		n.ProvisionState = StateDeployFail
		n.fail(eventDeploying, fmt.Sprintf("Deploy failed: %v", err))
		return nil
	}
	n.ProvisionState = StateActive
	return nil
}

// checkInstanceTraits is validate_instance_info_traits: traits requested in
// instance_info["traits"] (the allocation's matched traits) must be a list
// of strings the node has.
func checkInstanceTraits(n *Node) *Error {
	raw, ok := n.InstanceInfo["traits"]
	if !ok || isEmptyValue(raw) {
		return nil
	}
	list, ok := raw.([]any)
	bad := invalidf("Error parsing traits from Node %s instance_info field. A list of strings is expected.", n.UUID)
	if !ok {
		return bad
	}
	var missing []string
	for _, t := range list {
		s, ok := t.(string)
		if !ok {
			return bad
		}
		if !slices.Contains(n.Traits, s) && !slices.Contains(missing, s) {
			missing = append(missing, s)
		}
	}
	if len(missing) > 0 {
		return invalidf("Cannot specify instance traits that are not also set on the node. Node %s is missing traits %s",
			n.UUID, strings.Join(missing, ", "))
	}
	return nil
}

// tearDown undeploys the node (do_node_tear_down): the instance fields and
// the allocation go whatever the driver says, then the node is cleaned.
func (s *Store) tearDown(ctx context.Context, tx pgx.Tx, n *Node, drv Driver, remover AllocationRemover) error {
	if n.Protected {
		return errNodeProtected(n.UUID)
	}
	n.ProvisionState = StateDeleting
	n.LastError = nil
	failed := drv.TearDown(ctx, n)
	n.InstanceInfo = map[string]any{}
	if n.AllocationID != nil {
		if err := remover.RemoveNodeAllocation(ctx, tx, n.ID, *n.AllocationID); err != nil {
			return fmt.Errorf("removing allocation of node %s: %w", n.UUID, err)
		}
		n.AllocationID, n.AllocationUUID = nil, nil
	}
	n.InstanceUUID = nil
	if failed != nil {
		n.ProvisionState = StateError
		n.fail(eventUnprovision, fmt.Sprintf("Failed to tear down: %v", failed))
		return nil
	}
	final := StateAvailable
	if n.Retired {
		final = StateManageable
	}
	s.clean(ctx, n, drv, final)
	return nil
}

// clean runs cleaning and leaves the node in final, or in "clean failed" in
// maintenance (fault "clean failure") when the driver fails, as Ironic does.
func (s *Store) clean(ctx context.Context, n *Node, drv Driver, final string) {
	n.ProvisionState = StateCleaning
	if err := drv.Clean(ctx, n); err != nil {
		n.ProvisionState = StateCleanFail
		n.fail(eventCleaning, fmt.Sprintf("Failed to clean node: %v", err))
		n.Maintenance = true
		n.Fault = ptr("clean failure")
		return
	}
	n.ProvisionState = final
}

// checkSteps validates clean or deploy steps: a list of objects with
// interface and step (and, for deploy steps, args and priority), as Ironic's
// step schemas require.
func checkSteps(kind string, steps []any, required []string) error {
	interfaces := []string{"power", "management", "deploy", "bios", "raid"}
	for _, st := range steps {
		m, ok := st.(map[string]any)
		if !ok {
			return invalidf("Invalid %s_steps: %s is not of type 'object'", kind, web.PyRepr(st))
		}
		for _, r := range required {
			if _, ok := m[r]; !ok {
				return invalidf("Invalid %s_steps: %s is a required property", kind, web.PyRepr(r))
			}
		}
		for k := range m {
			if !slices.Contains([]string{"args", "interface", "priority", "step"}, k) ||
				(kind == "clean" && k == "priority") {
				return invalidf("Invalid %s_steps: Additional properties are not allowed (%s was unexpected)", kind, web.PyRepr(k))
			}
		}
		if iface, _ := m["interface"].(string); !slices.Contains(interfaces, iface) {
			return invalidf("Invalid %s_steps: %s is not one of %s", kind, web.PyRepr(m["interface"]), web.PyRepr(anySlice(interfaces)))
		}
		if step, _ := m["step"].(string); step == "" {
			return invalidf("Invalid %s_steps: %s is not of type 'string'", kind, web.PyRepr(m["step"]))
		}
		if a, ok := m["args"]; ok {
			if _, isObj := a.(map[string]any); !isObj {
				return invalidf("Invalid %s_steps: %s is not of type 'object'", kind, web.PyRepr(a))
			}
		}
	}
	return nil
}

func anySlice(ss []string) []any {
	out := make([]any, len(ss))
	for i, s := range ss {
		out[i] = s
	}
	return out
}

// isEmptyValue reports whether v is JSON-falsy as Python sees it ("", {}, []).
func isEmptyValue(v any) bool {
	switch x := v.(type) {
	case nil:
		return true
	case string:
		return x == ""
	case map[string]any:
		return len(x) == 0
	case []any:
		return len(x) == 0
	case bool:
		return !x
	}
	return false
}
