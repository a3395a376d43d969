package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sort"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"

	"github.com/metalloc/metalloc/auth"
	"github.com/metalloc/metalloc/cmd/internal/cli"
	"github.com/metalloc/metalloc/config"
	"github.com/metalloc/metalloc/db/dbtest"
	"github.com/metalloc/metalloc/web"
)

// Projects of the route table: the node's owner, its lessee, and a third.
const (
	ownerProject  = "0wner000000000000000000000000000"
	lesseeProject = "1essee00000000000000000000000000"
	otherProject  = "0ther000000000000000000000000000"
)

// personas are the callers of the route table, in column order: what a
// Keystone token of each would carry (Keystone adds implied roles: admin
// implies member implies reader). anonymous sends no token.
var personas = []struct {
	name  string
	creds *auth.Credentials
}{
	{"system-admin", &auth.Credentials{UserID: "sa", Roles: []string{"admin", "member", "reader"}, SystemScope: "all"}},
	{"system-reader", &auth.Credentials{UserID: "sr", Roles: []string{"reader"}, SystemScope: "all"}},
	{"owner", &auth.Credentials{UserID: "ow", ProjectID: ownerProject, ProjectDomainID: "default", Roles: []string{"member", "reader"}}},
	{"lessee", &auth.Credentials{UserID: "le", ProjectID: lesseeProject, ProjectDomainID: "default", Roles: []string{"member", "reader"}}},
	{"other-project", &auth.Credentials{UserID: "ot", ProjectID: otherProject, ProjectDomainID: "default", Roles: []string{"member", "reader"}}},
	{"anonymous", nil},
}

// personaAuth authenticates X-Auth-Token as the persona of that name, as
// auth.Keystone would a token of such a user; no token is 401.
type personaAuth struct{}

func (personaAuth) Authenticate(_ context.Context, r *http.Request) (auth.Credentials, error) {
	for _, p := range personas {
		if p.creds != nil && r.Header.Get("X-Auth-Token") == p.name {
			return *p.creds, nil
		}
	}
	return auth.Credentials{}, &auth.Failure{Status: http.StatusUnauthorized,
		Message: "The request you have made requires authentication.", Challenge: `Keystone uri="http://keystone.test"`}
}

// route is one row of the table: a request, with {node} (a node owned by
// ownerProject, leased to lesseeProject, holding an active allocation owned
// by ownerProject), {alloc} (that allocation) and {rand} (a fresh name)
// filled in, and the status each persona gets, in personas' order.
type route struct {
	method, path, body string
	want               [6]int
}

// TestRouteRoleTable sends every route of metalloc-api as each persona,
// with auth_strategy keystone and the default access rules (Ironic's with
// enforce_scope and enforce_new_defaults on), each cell on fresh objects,
// and checks the status against what Ironic's default rules give: system
// readers read everything and change nothing; project members read and
// change nodes their project owns or leases as the node rules allow (a
// lessee member may set power and maintenance only with the admin or
// manager role, traits are for the owner's admins), nodes of other
// projects are 404; ports and port groups follow their node (created, changed and deleted
// by system admins and the owner's admins or managers); allocations are
// their owner's; conductors are for
// system readers, as is the topology (replaced by system admins); /, /v1 and /metrics need no token. Every registered route
// must have a row.
func TestRouteRoleTable(t *testing.T) {
	t.Parallel()
	pool := dbtest.New(t)
	cfg, rules := keystoneDefaults(t)
	e, err := newAPI(cfg, pool, personaAuth{}, rules, nil, zap.NewNop())
	require.NoError(t, err)
	srv := httptest.NewServer(e)
	t.Cleanup(srv.Close)
	dbtest.Conductor(t, pool, "conductor-1", 0, true)

	const (
		ok, created, accepted, none      = 200, 201, 202, 204
		bad, forbidden, notFound, unauth = 400, 403, 404, 401
	)
	table := []route{
		{"GET", "/", "", [6]int{ok, ok, ok, ok, ok, ok}},
		{"GET", "/v1", "", [6]int{ok, ok, ok, ok, ok, ok}},
		{"GET", "/metrics", "", [6]int{ok, ok, ok, ok, ok, ok}},

		{"POST", "/v1/nodes", `{"driver":"fake-hardware","name":"{rand}"}`, [6]int{created, forbidden, forbidden, forbidden, forbidden, unauth}},
		{"GET", "/v1/nodes", "", [6]int{ok, ok, ok, ok, ok, unauth}},
		{"GET", "/v1/nodes/detail", "", [6]int{ok, ok, ok, ok, ok, unauth}},
		{"GET", "/v1/nodes/{node}", "", [6]int{ok, ok, ok, ok, notFound, unauth}},
		{"PATCH", "/v1/nodes/{node}", `[{"op":"add","path":"/extra/x","value":"y"}]`, [6]int{ok, forbidden, ok, ok, notFound, unauth}},
		{"PATCH", "/v1/nodes/{node}", `[{"op":"replace","path":"/name","value":"{rand}"}]`, [6]int{ok, forbidden, ok, forbidden, notFound, unauth}},
		{"PATCH", "/v1/nodes/{node}", `[{"op":"replace","path":"/lessee","value":"` + otherProject + `"}]`, [6]int{ok, forbidden, ok, forbidden, notFound, unauth}},
		{"PATCH", "/v1/nodes/{node}", `[{"op":"replace","path":"/owner","value":"` + otherProject + `"}]`, [6]int{409, forbidden, forbidden, forbidden, notFound, unauth}},
		{"DELETE", "/v1/nodes/{node}", "", [6]int{409, forbidden, forbidden, forbidden, notFound, unauth}},
		{"PUT", "/v1/nodes/{node}/maintenance", `{"reason":"x"}`, [6]int{accepted, forbidden, accepted, forbidden, notFound, unauth}},
		{"DELETE", "/v1/nodes/{node}/maintenance", "", [6]int{accepted, forbidden, accepted, forbidden, notFound, unauth}},
		{"GET", "/v1/nodes/{node}/states", "", [6]int{ok, ok, ok, ok, notFound, unauth}},
		{"PUT", "/v1/nodes/{node}/states/power", `{"target":"power off"}`, [6]int{accepted, forbidden, accepted, accepted, notFound, unauth}},
		{"PUT", "/v1/nodes/{node}/states/provision", `{"target":"manage"}`, [6]int{accepted, forbidden, accepted, forbidden, notFound, unauth}},
		{"GET", "/v1/nodes/{node}/traits", "", [6]int{ok, ok, ok, ok, notFound, unauth}},
		{"PUT", "/v1/nodes/{node}/traits", `{"traits":["CUSTOM_X"]}`, [6]int{none, forbidden, forbidden, forbidden, notFound, unauth}},
		{"DELETE", "/v1/nodes/{node}/traits", "", [6]int{none, forbidden, forbidden, forbidden, notFound, unauth}},
		{"PUT", "/v1/nodes/{node}/traits/CUSTOM_X", "", [6]int{none, forbidden, forbidden, forbidden, notFound, unauth}},
		{"DELETE", "/v1/nodes/{node}/traits/CUSTOM_T", "", [6]int{none, forbidden, forbidden, forbidden, notFound, unauth}},
		{"GET", "/v1/nodes/{node}/allocation", "", [6]int{ok, ok, ok, notFound, notFound, unauth}},
		{"DELETE", "/v1/nodes/{node}/allocation", "", [6]int{none, forbidden, none, forbidden, notFound, unauth}},
		// Interfaces metalloc does not drive: Ironic's answers for a
		// hardware type without them, behind Ironic's rules.
		{"PUT", "/v1/nodes/{node}/states/raid", `{}`, [6]int{none, forbidden, none, forbidden, notFound, unauth}},
		{"GET", "/v1/nodes/{node}/states/console", "", [6]int{ok, forbidden, ok, forbidden, notFound, unauth}},
		{"PUT", "/v1/nodes/{node}/states/console", `{"enabled":true}`, [6]int{bad, forbidden, bad, forbidden, notFound, unauth}},
		{"PUT", "/v1/nodes/{node}/states/boot_mode", `{"target":"uefi"}`, [6]int{bad, forbidden, bad, bad, notFound, unauth}},
		{"PUT", "/v1/nodes/{node}/states/secure_boot", `{"target":true}`, [6]int{bad, forbidden, bad, bad, notFound, unauth}},
		{"GET", "/v1/nodes/{node}/management/boot_device", "", [6]int{bad, forbidden, forbidden, forbidden, notFound, unauth}},
		{"PUT", "/v1/nodes/{node}/management/boot_device", `{"boot_device":"pxe"}`, [6]int{bad, forbidden, forbidden, forbidden, notFound, unauth}},
		{"GET", "/v1/nodes/{node}/management/boot_device/supported", "", [6]int{bad, forbidden, forbidden, forbidden, notFound, unauth}},
		{"PUT", "/v1/nodes/{node}/management/inject_nmi", `{}`, [6]int{bad, forbidden, forbidden, forbidden, notFound, unauth}},
		{"GET", "/v1/nodes/{node}/management/indicators", "", [6]int{bad, bad, bad, bad, notFound, unauth}},
		{"GET", "/v1/nodes/{node}/management/indicators/led@system", "", [6]int{bad, bad, bad, bad, notFound, unauth}},
		{"PUT", "/v1/nodes/{node}/management/indicators/led@system", `{"state":"ON"}`, [6]int{bad, forbidden, bad, forbidden, notFound, unauth}},
		{"GET", "/v1/nodes/{node}/vendor_passthru/methods", "", [6]int{ok, forbidden, forbidden, forbidden, notFound, unauth}},
		{"GET", "/v1/nodes/{node}/vifs", "", [6]int{ok, ok, ok, ok, notFound, unauth}},
		{"GET", "/v1/nodes/{node}/bios", "", [6]int{ok, ok, ok, ok, notFound, unauth}},
		{"GET", "/v1/nodes/{node}/bios/virtualization", "", [6]int{notFound, notFound, notFound, notFound, notFound, unauth}},
		{"GET", "/v1/nodes/{node}/history", "", [6]int{ok, ok, ok, forbidden, notFound, unauth}},
		{"GET", "/v1/nodes/{node}/history/e1", "", [6]int{notFound, notFound, notFound, forbidden, notFound, unauth}},
		{"GET", "/v1/nodes/{node}/inventory", "", [6]int{notFound, notFound, notFound, forbidden, notFound, unauth}},
		{"GET", "/v1/nodes/{node}/name", "", [6]int{ok, ok, ok, ok, notFound, unauth}}, // show with fields=name, as Ironic routes it
		{"GET", "/v1/nodes/{node}/validate", "", [6]int{ok, forbidden, ok, forbidden, notFound, unauth}},
		{"GET", "/v1/nodes/validate?node={node}", "", [6]int{ok, forbidden, ok, forbidden, notFound, unauth}},
		{"POST", "/v1/nodes/{node}/vifs", `{"id":"vif-1"}`, [6]int{none, forbidden, none, forbidden, notFound, unauth}},
		{"DELETE", "/v1/nodes/{node}/vifs/vif-1", "", [6]int{none, forbidden, none, forbidden, notFound, unauth}},

		// Chassis, deploy templates and drivers are the system's: read by
		// system readers, changed by system admins (chassis by system
		// members too). The nodes of a chassis are listed as nodes are.
		{"GET", "/v1/chassis", "", [6]int{ok, ok, forbidden, forbidden, forbidden, unauth}},
		{"GET", "/v1/chassis/detail", "", [6]int{ok, ok, forbidden, forbidden, forbidden, unauth}},
		{"POST", "/v1/chassis", `{"description":"x"}`, [6]int{created, forbidden, forbidden, forbidden, forbidden, unauth}},
		{"GET", "/v1/chassis/{chassis}", "", [6]int{ok, ok, forbidden, forbidden, forbidden, unauth}},
		{"PATCH", "/v1/chassis/{chassis}", `[{"op":"add","path":"/extra/x","value":"y"}]`, [6]int{ok, forbidden, forbidden, forbidden, forbidden, unauth}},
		{"DELETE", "/v1/chassis/{chassis}", "", [6]int{none, forbidden, forbidden, forbidden, forbidden, unauth}},
		{"GET", "/v1/chassis/{chassis}/nodes", "", [6]int{ok, ok, ok, ok, ok, unauth}},
		{"GET", "/v1/chassis/{chassis}/nodes/detail", "", [6]int{ok, ok, ok, ok, ok, unauth}},
		{"GET", "/v1/deploy_templates", "", [6]int{ok, ok, forbidden, forbidden, forbidden, unauth}},
		{"POST", "/v1/deploy_templates", `{"name":"CUSTOM_{RAND}","steps":[{"interface":"bios","step":"s","args":{},"priority":1}]}`,
			[6]int{created, forbidden, forbidden, forbidden, forbidden, unauth}},
		{"GET", "/v1/deploy_templates/{template}", "", [6]int{ok, ok, forbidden, forbidden, forbidden, unauth}},
		{"PATCH", "/v1/deploy_templates/{template}", `[{"op":"add","path":"/extra/x","value":"y"}]`, [6]int{ok, forbidden, forbidden, forbidden, forbidden, unauth}},
		{"DELETE", "/v1/deploy_templates/{template}", "", [6]int{none, forbidden, forbidden, forbidden, forbidden, unauth}},
		{"GET", "/v1/drivers", "", [6]int{ok, ok, forbidden, forbidden, forbidden, unauth}},
		{"GET", "/v1/shards", "", [6]int{ok, ok, forbidden, forbidden, forbidden, unauth}},
		{"GET", "/v1/shards/s1", "", [6]int{notFound, notFound, notFound, notFound, notFound, unauth}},
		{"GET", "/v1/drivers/fake-hardware", "", [6]int{ok, ok, forbidden, forbidden, forbidden, unauth}},
		{"GET", "/v1/drivers/fake-hardware/properties", "", [6]int{ok, ok, forbidden, forbidden, forbidden, unauth}},
		{"GET", "/v1/drivers/fake-hardware/raid/logical_disk_properties", "", [6]int{ok, ok, forbidden, forbidden, forbidden, unauth}},
		{"GET", "/v1/drivers/fake-hardware/vendor_passthru/methods", "", [6]int{ok, forbidden, forbidden, forbidden, forbidden, unauth}},

		{"POST", "/v1/ports", `{"node_uuid":"{node}","address":"{mac}"}`, [6]int{created, forbidden, forbidden, forbidden, forbidden, unauth}},
		{"GET", "/v1/ports", "", [6]int{ok, ok, ok, ok, ok, unauth}},
		{"GET", "/v1/ports/detail", "", [6]int{ok, ok, ok, ok, ok, unauth}},
		{"GET", "/v1/ports/{port}", "", [6]int{ok, ok, ok, ok, notFound, unauth}},
		{"PATCH", "/v1/ports/{port}", `[{"op":"add","path":"/extra/x","value":"y"}]`, [6]int{ok, forbidden, forbidden, forbidden, notFound, unauth}},
		{"DELETE", "/v1/ports/{port}", "", [6]int{none, forbidden, forbidden, forbidden, notFound, unauth}},
		{"GET", "/v1/nodes/{node}/ports", "", [6]int{ok, ok, ok, ok, notFound, unauth}},
		{"GET", "/v1/nodes/{node}/ports/detail", "", [6]int{ok, ok, ok, ok, notFound, unauth}},
		{"POST", "/v1/portgroups", `{"node_uuid":"{node}","name":"{rand}"}`, [6]int{created, forbidden, forbidden, forbidden, forbidden, unauth}},
		{"GET", "/v1/portgroups", "", [6]int{ok, ok, ok, ok, ok, unauth}},
		{"GET", "/v1/portgroups/detail", "", [6]int{ok, ok, ok, ok, ok, unauth}},
		{"GET", "/v1/portgroups/{pg}", "", [6]int{ok, ok, ok, ok, notFound, unauth}},
		{"PATCH", "/v1/portgroups/{pg}", `[{"op":"add","path":"/extra/x","value":"y"}]`, [6]int{ok, forbidden, forbidden, forbidden, notFound, unauth}},
		{"DELETE", "/v1/portgroups/{pg}", "", [6]int{none, forbidden, forbidden, forbidden, notFound, unauth}},
		{"GET", "/v1/portgroups/{pg}/ports", "", [6]int{ok, ok, ok, ok, notFound, unauth}},
		{"GET", "/v1/portgroups/{pg}/ports/detail", "", [6]int{ok, ok, ok, ok, notFound, unauth}},
		{"GET", "/v1/nodes/{node}/portgroups", "", [6]int{ok, ok, ok, ok, notFound, unauth}},
		{"GET", "/v1/nodes/{node}/portgroups/detail", "", [6]int{ok, ok, ok, ok, notFound, unauth}},

		{"POST", "/v1/allocations", `{"resource_class":"gold"}`, [6]int{created, forbidden, created, created, created, unauth}},
		{"POST", "/v1/allocations", `{"resource_class":"gold","owner":"` + otherProject + `"}`, [6]int{created, forbidden, forbidden, forbidden, created, unauth}},
		{"GET", "/v1/allocations", "", [6]int{ok, ok, ok, ok, ok, unauth}},
		{"GET", "/v1/allocations/{alloc}", "", [6]int{ok, ok, ok, notFound, notFound, unauth}},
		// Without Accept: text/event-stream, the allocation named "events".
		{"GET", "/v1/allocations/events", "", [6]int{notFound, notFound, notFound, notFound, notFound, unauth}},
		{"PATCH", "/v1/allocations/{alloc}", `[{"op":"add","path":"/extra/x","value":"y"}]`, [6]int{ok, forbidden, ok, notFound, notFound, unauth}},
		{"DELETE", "/v1/allocations/{alloc}", "", [6]int{none, forbidden, none, notFound, notFound, unauth}},
		// Allocation groups (a metalloc extension) follow the allocation
		// rules, {group} owned by ownerProject.
		{"POST", "/v1/allocation_groups", `{"count":2,"resource_class":"gold"}`, [6]int{created, forbidden, created, created, created, unauth}},
		{"GET", "/v1/allocation_groups", "", [6]int{ok, ok, ok, ok, ok, unauth}},
		{"GET", "/v1/allocation_groups/{group}", "", [6]int{ok, ok, ok, notFound, notFound, unauth}},
		{"PATCH", "/v1/allocation_groups/{group}", `[{"op":"add","path":"/extra/x","value":"y"}]`, [6]int{ok, forbidden, ok, notFound, notFound, unauth}},
		{"DELETE", "/v1/allocation_groups/{group}", "", [6]int{none, forbidden, none, notFound, notFound, unauth}},
		// Leases (metalloc's) follow the allocation rules too, {lease}
		// pending and owned by ownerProject; no node is reservable here,
		// so an admission is refused (409) once allowed; a system admin
		// has no project to book for (400 without project_id).
		{"POST", "/v1/leases", `{"end_time":"2099-01-01T00:00:00Z","reservations":[{"resource_class":"gold","count":1}]}`, [6]int{bad, forbidden, 409, 409, 409, unauth}},
		{"GET", "/v1/leases", "", [6]int{ok, ok, ok, ok, ok, unauth}},
		{"GET", "/v1/leases/availability?resource_class=gold&duration=1h", "", [6]int{ok, ok, ok, ok, ok, unauth}},
		{"GET", "/v1/leases/{lease}", "", [6]int{ok, ok, ok, notFound, notFound, unauth}},
		{"PATCH", "/v1/leases/{lease}", `[{"op":"add","path":"/name","value":"{rand}"}]`, [6]int{ok, forbidden, ok, notFound, notFound, unauth}},
		{"POST", "/v1/leases/{lease}/cancel", "", [6]int{ok, forbidden, ok, notFound, notFound, unauth}},
		{"DELETE", "/v1/leases/{lease}", "", [6]int{none, forbidden, none, notFound, notFound, unauth}},
		// Blazar's view of the same leases (lease/blazar) follows the same
		// rules; a caller without a project books for project admin (409
		// here too: nothing is reservable). Its hosts follow the node
		// rules ({host}: {node}, not reservable, so 404 to everyone but a
		// create, which needs baremetal:node:update:owner, as a PATCH of
		// /reservable).
		{"POST", "/reservation/v1/leases", `{"name":"{rand}","start_date":"2099-01-01 00:00","end_date":"2099-01-02 00:00","reservations":[{"resource_type":"physical:host","min":1,"max":1,"resource_properties":"[\"=\", \"$resource_class\", \"gold\"]"}]}`,
			[6]int{409, forbidden, 409, 409, 409, unauth}},
		{"GET", "/reservation/v1/leases", "", [6]int{ok, ok, ok, ok, ok, unauth}},
		{"GET", "/reservation/v1/leases/{lease}", "", [6]int{ok, ok, ok, notFound, notFound, unauth}},
		{"PUT", "/reservation/v1/leases/{lease}", `{"name":"{rand}"}`, [6]int{ok, forbidden, ok, notFound, notFound, unauth}},
		{"DELETE", "/reservation/v1/leases/{lease}", "", [6]int{none, forbidden, none, notFound, notFound, unauth}},
		{"GET", "/reservation/v1/os-hosts", "", [6]int{ok, ok, ok, ok, ok, unauth}},
		{"POST", "/reservation/v1/os-hosts", `{"name":"{node}"}`, [6]int{created, forbidden, forbidden, forbidden, notFound, unauth}},
		{"GET", "/reservation/v1/os-hosts/{host}", "", [6]int{notFound, notFound, notFound, notFound, notFound, unauth}},
		{"PUT", "/reservation/v1/os-hosts/{host}", `{"values":{"x":"y"}}`, [6]int{notFound, notFound, notFound, notFound, notFound, unauth}},
		{"DELETE", "/reservation/v1/os-hosts/{host}", "", [6]int{notFound, notFound, notFound, notFound, notFound, unauth}},

		{"GET", "/v1/conductors", "", [6]int{ok, ok, forbidden, forbidden, forbidden, unauth}},
		{"GET", "/v1/conductors/conductor-1", "", [6]int{ok, ok, forbidden, forbidden, forbidden, unauth}},

		// The topology (metalloc's): read by system readers, replaced by
		// system admins.
		{"GET", "/v1/topology", "", [6]int{ok, ok, forbidden, forbidden, forbidden, unauth}},
		{"PUT", "/v1/topology", `{"levels":[{"name":"rack","source":"extra.rack"}]}`, [6]int{ok, forbidden, forbidden, forbidden, forbidden, unauth}},

		// The operator page: its files for whoever is authenticated, its
		// fleet summary scoped as the node list.
		{"GET", "/ui", "", [6]int{ok, ok, ok, ok, ok, unauth}},
		{"GET", "/ui/app.js", "", [6]int{ok, ok, ok, ok, ok, unauth}},
		{"GET", "/v1/ui/fleet", "", [6]int{ok, ok, ok, ok, ok, unauth}},
		{"GET", "/v1/ui/conductors", "", [6]int{ok, ok, forbidden, forbidden, forbidden, unauth}},
		// The lease calendar: counts for everyone, the leases a caller
		// may list named (lease.Calendar).
		{"GET", "/v1/ui/leases", "", [6]int{ok, ok, ok, ok, ok, unauth}},
	}
	// Vendor passthru takes every method (no ?method= here: 400).
	for _, m := range []string{"GET", "POST", "PUT", "PATCH", "DELETE"} {
		table = append(table, route{m, "/v1/nodes/{node}/vendor_passthru", "", [6]int{bad, forbidden, forbidden, forbidden, notFound, unauth}})
		table = append(table, route{m, "/v1/nodes/{node}/vendor_passthru/reset", "", [6]int{bad, forbidden, forbidden, forbidden, notFound, unauth}})
		table = append(table, route{m, "/v1/drivers/fake-hardware/vendor_passthru", "", [6]int{bad, forbidden, forbidden, forbidden, forbidden, unauth}})
		table = append(table, route{m, "/v1/drivers/fake-hardware/vendor_passthru/reset", "", [6]int{bad, forbidden, forbidden, forbidden, forbidden, unauth}})
	}
	// Conductors are read-only: other methods are 405 to whoever is
	// authenticated.
	for _, m := range []string{"POST", "PUT", "PATCH", "DELETE"} {
		for _, path := range []string{"/v1/conductors", "/v1/conductors/conductor-1"} {
			table = append(table, route{m, path, "", [6]int{405, 405, 405, 405, 405, unauth}})
		}
	}

	for _, m := range []string{"POST", "PATCH", "DELETE"} {
		table = append(table, route{m, "/v1/topology", "", [6]int{405, 405, 405, 405, 405, unauth}})
	}
	for _, m := range []string{"POST", "PUT", "PATCH", "DELETE"} {
		table = append(table, route{m, "/v1/shards", "", [6]int{405, 405, 405, 405, 405, unauth}})
	}

	// Every registered route has a row.
	covered := map[string]bool{}
	for _, r := range table {
		covered[r.method+" "+routePattern(r.path)] = true
	}
	var missing []string
	for _, r := range e.Routes() {
		if k := r.Method + " " + r.Path; !covered[k] && r.Path != "/v1/" && r.Method != "echo_route_not_found" {
			missing = append(missing, k)
		}
	}
	sort.Strings(missing)
	require.Empty(t, missing, "routes without a row in the table")

	var diffs []string
	for _, r := range table {
		for i, p := range personas {
			nodeID, nodeUUID := dbtest.Node(t, pool, dbtest.NodeSpec{
				ProvisionState: "available", Owner: ptr(ownerProject), Lessee: ptr(lesseeProject), Traits: []string{"CUSTOM_T"},
			})
			_, allocUUID := dbtest.Allocation(t, pool, dbtest.AllocationSpec{Owner: ptr(ownerProject), Node: nodeID})
			rnd := "n-" + uuid.NewString()[:8]
			portUUID, pgUUID := uuid.New(), uuid.New()
			var pgID int64
			require.NoError(t, pool.QueryRow(t.Context(), `INSERT INTO portgroups (uuid, node_id) VALUES ($1, $2) RETURNING id`,
				pgUUID, nodeID).Scan(&pgID))
			_, err := pool.Exec(t.Context(), `INSERT INTO ports (uuid, address, node_id) VALUES ($1, $2, $3)`,
				portUUID, mac(), nodeID)
			require.NoError(t, err)
			chassisUUID, templateUUID := uuid.New(), uuid.New()
			_, err = pool.Exec(t.Context(), `INSERT INTO chassis (uuid) VALUES ($1)`, chassisUUID)
			require.NoError(t, err)
			_, err = pool.Exec(t.Context(), `INSERT INTO deploy_templates (uuid, name, steps) VALUES ($1, $2, '[{"interface":"bios","step":"s","args":{},"priority":1}]')`,
				templateUUID, "CUSTOM_"+strings.ToUpper(strings.ReplaceAll(templateUUID.String(), "-", "_")))
			require.NoError(t, err)
			groupUUID := uuid.New()
			_, err = pool.Exec(t.Context(), `INSERT INTO allocation_groups (uuid, count, resource_class, owner, state, last_error)
				VALUES ($1, 1, 'gold', $2, 'error', 'no room')`, groupUUID, ownerProject)
			require.NoError(t, err)
			leaseUUID := uuid.New()
			_, err = pool.Exec(t.Context(), `INSERT INTO leases (uuid, project_id, start_time, end_time)
				VALUES ($1, $2, '2099-01-01T00:00:00Z', '2099-01-02T00:00:00Z')`, leaseUUID, ownerProject)
			require.NoError(t, err)
			repl := strings.NewReplacer("{lease}", leaseUUID.String(), "{node}", nodeUUID.String(), "{host}", nodeUUID.String(), "{alloc}", allocUUID.String(), "{rand}", rnd, "{group}", groupUUID.String(),
				"{port}", portUUID.String(), "{pg}", pgUUID.String(), "{mac}", mac(), "{chassis}", chassisUUID.String(),
				"{template}", templateUUID.String(), "{RAND}", strings.ToUpper(strings.ReplaceAll(rnd, "-", "_")))
			req, err := http.NewRequest(r.method, srv.URL+repl.Replace(r.path), strings.NewReader(repl.Replace(r.body)))
			require.NoError(t, err)
			req.Header.Set("X-OpenStack-Ironic-API-Version", "1.82")
			if r.body != "" {
				req.Header.Set("Content-Type", "application/json")
			}
			if p.creds != nil {
				req.Header.Set("X-Auth-Token", p.name)
			}
			resp, err := http.DefaultClient.Do(req)
			require.NoError(t, err)
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != r.want[i] {
				diffs = append(diffs, fmt.Sprintf("%s %s %s as %s: got %d, want %d: %.200s",
					r.method, r.path, r.body, p.name, resp.StatusCode, r.want[i], body))
			}
			if resp.StatusCode == unauth {
				require.Equal(t, `Keystone uri="http://keystone.test"`, resp.Header.Get("WWW-Authenticate"))
			}
		}
	}
	require.Empty(t, diffs, "\n%s", strings.Join(diffs, "\n"))
}

// keystoneDefaults is the default configuration with auth_strategy
// keystone, and its access rules (Ironic's defaults).
func keystoneDefaults(t *testing.T) (config.Config, auth.Rules) {
	t.Helper()
	cfg, err := config.Load("", nil)
	require.NoError(t, err)
	cfg.API.AuthStrategy = auth.StrategyKeystone
	rules, err := cli.Rules(cfg.API.Access, accessDefaults(), true)
	require.NoError(t, err)
	return cfg, rules
}

// routePattern turns a table path into echo's route pattern.
func routePattern(path string) string {
	path = strings.NewReplacer("{node}", ":ident", "{alloc}", ":ident", "{port}", ":ident", "{pg}", ":ident", "{group}", ":ident",
		"{lease}", ":ident", "{chassis}", ":ident", "{template}", ":ident", "{host}", ":ident").Replace(path)
	path, _, _ = strings.Cut(path, "?")
	switch {
	case strings.HasPrefix(path, "/v1/drivers/fake-hardware"):
		path = strings.Replace(path, "fake-hardware", ":name", 1)
		if path == "/v1/drivers/:name/vendor_passthru/reset" {
			return "/v1/drivers/:name/vendor_passthru/:method"
		}
		return path
	case path == "/v1/shards/s1":
		return "/v1/shards/:name"
	case strings.HasPrefix(path, "/v1/nodes/:ident/vifs/"):
		return "/v1/nodes/:ident/vifs/:vif"
	case strings.HasPrefix(path, "/v1/conductors/"):
		return "/v1/conductors/:hostname"
	case strings.HasPrefix(path, "/ui/"):
		return "/ui/*"
	case strings.HasPrefix(path, "/v1/nodes/:ident/traits/"):
		return "/v1/nodes/:ident/traits/:trait"
	case path == "/v1/nodes/:ident/name":
		return "/v1/nodes/:ident/:field"
	case path == "/v1/nodes/:ident/vendor_passthru/reset":
		return "/v1/nodes/:ident/vendor_passthru/:method"
	case strings.HasPrefix(path, "/v1/nodes/:ident/bios/"):
		return "/v1/nodes/:ident/bios/:setting"
	case strings.HasPrefix(path, "/v1/nodes/:ident/history/"):
		return "/v1/nodes/:ident/history/:event"
	case strings.HasPrefix(path, "/v1/nodes/:ident/management/indicators/"):
		return "/v1/nodes/:ident/management/indicators/:indicator"
	}
	return path
}

func ptr[T any](v T) *T { return &v }

// mac returns a random locally administered MAC address.
func mac() string {
	b := uuid.New()
	return fmt.Sprintf("02:%02x:%02x:%02x:%02x:%02x", b[0], b[1], b[2], b[3], b[4])
}

// TestOversizedBodyStoresNothing: a 50 MB extra in POST /v1/allocations
// (and a body just over api.max_request_body_size) is 413 in Ironic's error
// body, and no allocation is stored; a body within the limit is accepted.
func TestOversizedBodyStoresNothing(t *testing.T) {
	t.Parallel()
	pool, srv := noauthAPI(t, nil)

	post := func(extraLen int) (int, string) {
		body := `{"resource_class":"gold","extra":{"blob":"` + strings.Repeat("x", extraLen) + `"}}`
		req, err := http.NewRequest(http.MethodPost, srv.URL+"/v1/allocations", strings.NewReader(body))
		require.NoError(t, err)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-OpenStack-Ironic-API-Version", "1.82")
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		raw, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(raw)
	}
	st, body := post(50 << 20)
	require.Equal(t, http.StatusRequestEntityTooLarge, st, body)
	require.Contains(t, body, `"error_message"`)
	require.Contains(t, body, "Request is too large.")
	st, _ = post(web.DefaultMaxRequestBodySize)
	require.Equal(t, http.StatusRequestEntityTooLarge, st)
	require.Zero(t, dbtest.Count(t, pool, `SELECT count(*) FROM allocations`))
	st, body = post(60000)
	require.Equal(t, http.StatusCreated, st, body)
	require.Equal(t, 1, dbtest.Count(t, pool, `SELECT count(*) FROM allocations`))
}
