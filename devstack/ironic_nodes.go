package devstack

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
)

// IronicNode is a node to enrol in Ironic (IronicOptions' fake-hardware).
type IronicNode struct {
	Name string `json:"name,omitempty"`
	// UUID is the node's uuid; empty: Ironic picks one.
	UUID          string         `json:"uuid,omitempty"`
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
	for k, v := range map[string]any{"name": n.Name, "uuid": n.UUID, "resource_class": n.ResourceClass} {
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
	if _, err := i.doRetrying(ctx, http.MethodPost, "/v1/nodes", body, &created); err != nil {
		return "", err
	}
	if n.Owner != "" {
		// Ironic 21.4 refuses an owner in the creation request of a caller
		// without a project (noauth); a change afterwards is fine.
		if _, err := i.doRetrying(ctx, http.MethodPatch, "/v1/nodes/"+created.UUID, []map[string]any{
			{"op": "add", "path": "/owner", "value": n.Owner}}, nil); err != nil {
			return created.UUID, err
		}
	}
	if len(n.Traits) > 0 {
		if _, err := i.doRetrying(ctx, http.MethodPut, "/v1/nodes/"+created.UUID+"/traits", map[string]any{"traits": n.Traits}, nil); err != nil {
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

// ironicRetryFor bounds how long doRetrying sends a request again while
// Ironic answers 503.
const ironicRetryFor = time.Minute

// doRetrying is Do, sent again every second for up to ironicRetryFor while
// Ironic answers 503 ("Resource temporarily unavailable, please retry":
// a node's conductor is looked up in the API process's hash ring before
// anything is written, and a process that built its ring before the
// conductors registered has none until its ring is rebuilt; .ci/run saw it
// at the first node enrolled after the conductors were listed alive).
func (i *Ironic) doRetrying(ctx context.Context, method, path string, body, out any) (int, error) {
	deadline := time.Now().Add(ironicRetryFor)
	for {
		code, err := i.Do(ctx, method, path, body, out)
		if code != http.StatusServiceUnavailable || time.Now().After(deadline) {
			return code, err
		}
		select {
		case <-ctx.Done():
			return code, err
		case <-time.After(time.Second):
		}
	}
}

// SetPowerState asks Ironic to power node ident to target ("power on",
// "power off") and waits up to timeout until its power_state is target.
func (i *Ironic) SetPowerState(ctx context.Context, ident, target string, timeout time.Duration) error {
	if _, err := i.doRetrying(ctx, http.MethodPut, "/v1/nodes/"+url.PathEscape(ident)+"/states/power",
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
	if _, err := i.doRetrying(ctx, http.MethodPut, "/v1/nodes/"+url.PathEscape(ident)+"/states/provision",
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

// CloneNodes adds n nodes to Ironic's database directly, each a copy of
// node template (an available, powered node enrolled through the API:
// same driver, interfaces, resource class, properties, states and
// traits) with a new uuid and the name prefix-1 ... prefix-n, in one
// statement: thousands of nodes in a second, where the API's enrol,
// manage, provide and power steps take minutes. Ironic reads its database
// at every request, so they are there for its API and conductors at once.
// It returns the new uuids.
func (i *Ironic) CloneNodes(ctx context.Context, template string, n int, prefix string) ([]string, error) {
	var uuids []string
	err := i.inDB(ctx, func(tx pgx.Tx) error {
		cols, err := ironicNodeColumns(ctx, tx)
		if err != nil {
			return err
		}
		rows, err := tx.Query(ctx, `
			WITH tmpl AS (SELECT * FROM nodes WHERE uuid = $1 OR name = $1),
			     ins AS (
			INSERT INTO nodes (uuid, name, created_at, `+strings.Join(cols, ", ")+`)
			SELECT gen_random_uuid()::text, $2 || '-' || g, now(), `+strings.Join(cols, ", ")+`
			  FROM tmpl, generate_series(1, $3::int) g
			RETURNING id, uuid),
			     tr AS (
			INSERT INTO node_traits (node_id, trait, created_at, version)
			SELECT ins.id, t.trait, now(), t.version FROM ins, node_traits t JOIN tmpl ON t.node_id = tmpl.id)
			SELECT uuid FROM ins`, template, prefix, n)
		if err != nil {
			return err
		}
		uuids, err = pgx.CollectRows(rows, pgx.RowTo[string])
		if err == nil && len(uuids) != n {
			err = fmt.Errorf("template node %s not found in Ironic's database", template)
		}
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("cloning Ironic node %s: %w", template, err)
	}
	return uuids, nil
}

// ironicNodeColumns are the columns of Ironic's nodes table a clone copies
// from its template: all but the identity, name, timestamps and locks.
func ironicNodeColumns(ctx context.Context, tx pgx.Tx) ([]string, error) {
	rows, err := tx.Query(ctx, `SELECT column_name FROM information_schema.columns
		WHERE table_schema = current_schema() AND table_name = 'nodes'
		  AND column_name NOT IN ('id', 'uuid', 'name', 'created_at', 'updated_at', 'reservation',
		                          'conductor_affinity', 'instance_uuid', 'allocation_id')
		ORDER BY ordinal_position`)
	if err != nil {
		return nil, err
	}
	cols, err := pgx.CollectRows(rows, pgx.RowTo[string])
	for k, c := range cols {
		cols[k] = pgx.Identifier{c}.Sanitize()
	}
	return cols, err
}

// inDB runs fn in a transaction on Ironic's own database (Database on the
// server of IronicOptions.DatabaseURL), for writes Ironic's API would take
// minutes for.
func (i *Ironic) inDB(ctx context.Context, fn func(pgx.Tx) error) error {
	u, err := url.Parse(i.server)
	if err != nil {
		return err
	}
	u.Path = "/" + i.Database
	conn, err := pgx.Connect(ctx, u.String())
	if err != nil {
		return fmt.Errorf("connecting to Ironic's database: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	return pgx.BeginFunc(ctx, conn, fn)
}
