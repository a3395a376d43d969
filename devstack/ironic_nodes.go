package devstack

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"sync"
	"time"
)

// IronicNode is a node to enrol in Ironic (IronicOptions' fake-hardware).
type IronicNode struct {
	Name          string         `json:"name,omitempty"`
	ResourceClass string         `json:"resource_class,omitempty"`
	Owner         string         `json:"-"`
	Properties    map[string]any `json:"properties,omitempty"`
	Extra         map[string]any `json:"extra,omitempty"`
	// Traits are set after creation (PUT /v1/nodes/{uuid}/traits).
	Traits []string `json:"-"`
}

// EnrollAvailable creates nodes in Ironic and drives each to available
// (manage, then provide; fake-hardware makes both quick), concurrency at a
// time, and returns their uuids in the order given.
func (i *Ironic) EnrollAvailable(ctx context.Context, nodes []IronicNode, concurrency int) ([]string, error) {
	if concurrency <= 0 {
		concurrency = 8
	}
	uuids := make([]string, len(nodes))
	errs := make([]error, len(nodes))
	sem := make(chan struct{}, concurrency)
	var wg sync.WaitGroup
	for k, n := range nodes {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			uuids[k], errs[k] = i.enrollOne(ctx, n)
		}()
	}
	wg.Wait()
	for k, err := range errs {
		if err != nil {
			return uuids, fmt.Errorf("enrolling node %d (%s): %w", k, nodes[k].Name, err)
		}
	}
	return uuids, nil
}

func (i *Ironic) enrollOne(ctx context.Context, n IronicNode) (string, error) {
	body := map[string]any{"driver": "fake-hardware"}
	for k, v := range map[string]any{"name": n.Name, "resource_class": n.ResourceClass} {
		if v != "" {
			body[k] = v
		}
	}
	if n.Properties != nil {
		body["properties"] = n.Properties
	}
	if n.Extra != nil {
		body["extra"] = n.Extra
	}
	var created struct {
		UUID string `json:"uuid"`
	}
	if _, err := i.Do(ctx, http.MethodPost, "/v1/nodes", body, &created); err != nil {
		return "", err
	}
	if n.Owner != "" {
		// Ironic 21.4 refuses an owner in the creation request of a caller
		// without a project (noauth); a change afterwards is fine.
		if _, err := i.Do(ctx, http.MethodPatch, "/v1/nodes/"+created.UUID, []map[string]any{
			{"op": "add", "path": "/owner", "value": n.Owner}}, nil); err != nil {
			return created.UUID, err
		}
	}
	if len(n.Traits) > 0 {
		if _, err := i.Do(ctx, http.MethodPut, "/v1/nodes/"+created.UUID+"/traits", map[string]any{"traits": n.Traits}, nil); err != nil {
			return created.UUID, err
		}
	}
	for _, step := range []struct{ target, state string }{{"manage", "manageable"}, {"provide", "available"}} {
		if err := i.SetProvisionState(ctx, created.UUID, step.target, step.state, 2*time.Minute); err != nil {
			return created.UUID, err
		}
	}
	// fake-hardware nodes have no power state until Ironic's power sync
	// (every 60 s) or a power action; allocation needs one.
	return created.UUID, i.SetPowerState(ctx, created.UUID, "power off", 2*time.Minute)
}

// SetPowerState asks Ironic to power node ident to target ("power on",
// "power off") and waits up to timeout until its power_state is target.
func (i *Ironic) SetPowerState(ctx context.Context, ident, target string, timeout time.Duration) error {
	if _, err := i.Do(ctx, http.MethodPut, "/v1/nodes/"+url.PathEscape(ident)+"/states/power",
		map[string]any{"target": target}, nil); err != nil {
		return err
	}
	deadline := time.Now().Add(timeout)
	for {
		var n struct {
			PowerState *string `json:"power_state"`
			Target     *string `json:"target_power_state"`
		}
		if _, err := i.Do(ctx, http.MethodGet, "/v1/nodes/"+url.PathEscape(ident)+"?fields=power_state,target_power_state", nil, &n); err != nil {
			return err
		}
		if n.PowerState != nil && *n.PowerState == target && n.Target == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("node %s not %q after %s", ident, target, timeout)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// SetProvisionState asks Ironic to move node ident to target (PUT
// /v1/nodes/{ident}/states/provision) and waits up to timeout until its
// provision_state is want.
func (i *Ironic) SetProvisionState(ctx context.Context, ident, target, want string, timeout time.Duration) error {
	if _, err := i.Do(ctx, http.MethodPut, "/v1/nodes/"+url.PathEscape(ident)+"/states/provision",
		map[string]any{"target": target}, nil); err != nil {
		return err
	}
	return i.WaitProvisionState(ctx, ident, want, timeout)
}

// WaitProvisionState waits up to timeout until node ident's
// provision_state is want; a node that lands in a failure state or
// reports last_error on the way fails it at once.
func (i *Ironic) WaitProvisionState(ctx context.Context, ident, want string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		var n struct {
			ProvisionState string  `json:"provision_state"`
			Target         *string `json:"target_provision_state"`
			LastError      *string `json:"last_error"`
		}
		if _, err := i.Do(ctx, http.MethodGet, "/v1/nodes/"+url.PathEscape(ident)+
			"?fields=provision_state,target_provision_state,last_error", nil, &n); err != nil {
			return err
		}
		if n.ProvisionState == want && n.Target == nil {
			return nil
		}
		if n.Target == nil && n.LastError != nil && *n.LastError != "" {
			return fmt.Errorf("node %s is %s, not %s: %s", ident, n.ProvisionState, want, *n.LastError)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("node %s still %s after %s, not %s", ident, n.ProvisionState, timeout, want)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}
