package node

import (
	"context"
	"hash/fnv"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/metalloc/metalloc/web"
)

// apiField is one field of the node's API representation: the
// microversion (1.minor) that introduced it and how to read it.
type apiField struct {
	minor int
	get   func(r *renderer, n *Node) any
}

func str(p *string) any {
	if p == nil {
		return nil
	}
	return *p
}

// apiFields are all the node fields Ironic 21.4 shows, with the microversion
// that added each (api/controllers/v1/utils.py VERSIONED_FIELDS). Clean
// and deploy steps, inspection times and boot mode are not stored by
// metalloc and show as Ironic shows them unset.
var apiFields = map[string]apiField{
	"uuid":                 {1, func(_ *renderer, n *Node) any { return n.UUID.String() }},
	"created_at":           {1, func(_ *renderer, n *Node) any { return isoTime(&n.CreatedAt) }},
	"updated_at":           {1, func(_ *renderer, n *Node) any { return isoTime(n.UpdatedAt) }},
	"chassis_uuid":         {1, func(_ *renderer, n *Node) any { return uuidOrNil(n.ChassisUUID) }},
	"console_enabled":      {1, func(_ *renderer, n *Node) any { return n.ConsoleEnabled }},
	"driver":               {1, func(_ *renderer, n *Node) any { return n.Driver }},
	"driver_info":          {1, func(_ *renderer, n *Node) any { return maskSecrets(n.DriverInfo) }},
	"extra":                {1, func(_ *renderer, n *Node) any { return orEmpty(n.Extra) }},
	"instance_info":        {1, func(_ *renderer, n *Node) any { return maskInstanceInfo(n.InstanceInfo) }},
	"instance_uuid":        {1, func(_ *renderer, n *Node) any { return uuidOrNil(n.InstanceUUID) }},
	"last_error":           {1, func(_ *renderer, n *Node) any { return str(n.LastError) }},
	"maintenance":          {1, func(_ *renderer, n *Node) any { return n.Maintenance }},
	"maintenance_reason":   {1, func(_ *renderer, n *Node) any { return str(n.MaintenanceReason) }},
	"power_state":          {1, func(_ *renderer, n *Node) any { return str(n.PowerState) }},
	"properties":           {1, func(_ *renderer, n *Node) any { return orEmpty(n.Properties) }},
	"provision_state":      {1, func(r *renderer, n *Node) any { return r.provisionState(n.ProvisionState) }},
	"provision_updated_at": {1, func(_ *renderer, n *Node) any { return isoTime(n.ProvisionUpdatedAt) }},
	"reservation":          {1, func(_ *renderer, n *Node) any { return str(n.Reservation) }},
	"target_power_state":   {1, func(_ *renderer, n *Node) any { return str(n.TargetPowerState) }},
	"target_provision_state": {1, func(_ *renderer, n *Node) any {
		return str(n.TargetProvisionState)
	}},
	"driver_internal_info":   {3, func(_ *renderer, n *Node) any { return maskInternal(n.DriverInternalInfo) }},
	"name":                   {5, func(_ *renderer, n *Node) any { return str(n.Name) }},
	"inspection_finished_at": {6, func(*renderer, *Node) any { return nil }},
	"inspection_started_at":  {6, func(*renderer, *Node) any { return nil }},
	"clean_step":             {7, func(*renderer, *Node) any { return map[string]any{} }},
	"raid_config":            {12, func(_ *renderer, n *Node) any { return orEmpty(n.RaidConfig) }},
	"target_raid_config":     {12, func(_ *renderer, n *Node) any { return orEmpty(n.TargetRaidConfig) }},
	"network_interface":      {20, iface("network_interface")},
	"resource_class":         {21, func(_ *renderer, n *Node) any { return str(n.ResourceClass) }},
	"boot_interface":         {31, iface("boot_interface")},
	"console_interface":      {31, iface("console_interface")},
	"deploy_interface":       {31, iface("deploy_interface")},
	"inspect_interface":      {31, iface("inspect_interface")},
	"management_interface":   {31, iface("management_interface")},
	"power_interface":        {31, iface("power_interface")},
	"raid_interface":         {31, iface("raid_interface")},
	"vendor_interface":       {31, iface("vendor_interface")},
	"storage_interface":      {33, iface("storage_interface")},
	"traits": {37, func(_ *renderer, n *Node) any {
		if n.Traits == nil {
			return []string{}
		}
		return n.Traits
	}},
	"rescue_interface": {38, iface("rescue_interface")},
	"bios_interface":   {40, iface("bios_interface")},
	"fault":            {42, func(_ *renderer, n *Node) any { return str(n.Fault) }},
	"deploy_step":      {44, func(*renderer, *Node) any { return map[string]any{} }},
	"conductor_group":  {46, func(_ *renderer, n *Node) any { return n.ConductorGroup }},
	"automated_clean":  {47, func(_ *renderer, n *Node) any { return boolOrNil(n.AutomatedClean) }},
	"protected":        {48, func(_ *renderer, n *Node) any { return n.Protected }},
	"protected_reason": {48, func(_ *renderer, n *Node) any { return str(n.ProtectedReason) }},
	"conductor":        {49, func(r *renderer, n *Node) any { return r.conductorFor(n) }},
	"owner":            {50, func(_ *renderer, n *Node) any { return str(n.Owner) }},
	"description":      {51, func(_ *renderer, n *Node) any { return str(n.Description) }},
	"allocation_uuid":  {52, func(_ *renderer, n *Node) any { return uuidOrNil(n.AllocationUUID) }},
	"retired":          {61, func(_ *renderer, n *Node) any { return n.Retired }},
	"retired_reason":   {61, func(_ *renderer, n *Node) any { return str(n.RetiredReason) }},
	"lessee":           {65, func(_ *renderer, n *Node) any { return str(n.Lessee) }},
	"network_data":     {66, func(_ *renderer, n *Node) any { return orEmpty(n.NetworkData) }},
	"boot_mode":        {75, func(*renderer, *Node) any { return nil }},
	"secure_boot":      {75, func(*renderer, *Node) any { return nil }},
	"shard":            {82, func(_ *renderer, n *Node) any { return str(n.Shard) }},
	// metalloc's (leases, issue 43): at every microversion, as Ironic
	// clients ignore fields they do not know.
	"reservable": {1, func(_ *renderer, n *Node) any { return n.Reservable }},
}

// queryableFields are the names `fields` may ask for (Ironic's
// _get_fields_for_node_query plus the API-computed ones); created_at,
// updated_at and links are not among them, as in Ironic.
var queryableFields = func() map[string]bool {
	m := map[string]bool{}
	for k := range apiFields {
		if k != "created_at" && k != "updated_at" {
			m[k] = true
		}
	}
	return m
}()

// listDefaultFields are what GET /v1/nodes (without detail) shows.
var listDefaultFields = []string{"instance_uuid", "maintenance", "power_state", "provision_state", "uuid", "name"}

func iface(name string) func(*renderer, *Node) any {
	return func(_ *renderer, n *Node) any {
		if v, ok := n.Interfaces[name]; ok && v != "" {
			return v
		}
		return nil
	}
}

// fieldAllowed reports whether field exists at microversion v.
func fieldAllowed(field string, v web.Version) bool {
	f, ok := apiFields[field]
	return ok && v.AtLeast(1, f.minor)
}

// renderer builds node representations for one request.
type renderer struct {
	v          web.Version
	base       string
	conductors []conductorInfo
}

type conductorInfo struct {
	hostname string
	group    string
	drivers  []string
}

// newRenderer prepares rendering at version v with links under base; when
// the conductor field may be shown it loads the online conductors once.
func (s *Store) newRenderer(ctx context.Context, v web.Version, base string, fields []string) (*renderer, error) {
	r := &renderer{v: v, base: base}
	if v.AtLeast(1, apiFields["conductor"].minor) && (fields == nil || slices.Contains(fields, "conductor")) {
		rows, err := s.q.ListOnlineConductors(ctx)
		if err != nil {
			return nil, err
		}
		for _, c := range rows {
			r.conductors = append(r.conductors, conductorInfo{c.Hostname, strings.ToLower(c.ConductorGroup), c.Drivers})
		}
	}
	return r, nil
}

// conductorFor picks the conductor serving n the way a hash ring would: the
// online conductors of the node's group supporting its driver (or declaring
// no drivers), chosen by a hash of the node uuid; nil when there is none.
func (r *renderer) conductorFor(n *Node) any {
	var cands []string
	for _, c := range r.conductors {
		if c.group != n.ConductorGroup {
			continue
		}
		if len(c.drivers) > 0 && !slices.Contains(c.drivers, n.Driver) {
			continue
		}
		cands = append(cands, c.hostname)
	}
	if len(cands) == 0 {
		return nil
	}
	h := fnv.New32a()
	_, _ = h.Write(n.UUID[:])
	return cands[int(h.Sum32()%uint32(len(cands)))]
}

func (r *renderer) provisionState(s string) any {
	if !r.v.AtLeast(1, 2) && s == StateAvailable {
		return nil
	}
	if !r.v.AtLeast(1, 39) && s == StateInspectWait {
		return StateInspecting
	}
	return s
}

func (r *renderer) link(rel, path string, bookmark bool) web.Link {
	if bookmark {
		return web.Link{Href: r.base + "/nodes/" + path, Rel: rel}
	}
	return web.Link{Href: r.base + "/v1/nodes/" + path, Rel: rel}
}

func (r *renderer) linkPair(path string) []web.Link {
	return []web.Link{r.link("self", path, false), r.link("bookmark", path, true)}
}

// node renders n as Ironic's node_convert_with_links does: every field the
// request's microversion has (or only fields, when given), links always,
// and the ports/states/portgroups/volume sub-resource links when all fields
// are shown. Secrets in driver_info and instance_info are masked.
func (r *renderer) node(n *Node, fields []string) map[string]any {
	doc := map[string]any{}
	if fields == nil {
		for name, f := range apiFields {
			if r.v.AtLeast(1, f.minor) {
				doc[name] = f.get(r, n)
			}
		}
	} else {
		for _, name := range fields {
			if f, ok := apiFields[name]; ok && r.v.AtLeast(1, f.minor) {
				doc[name] = f.get(r, n)
			}
		}
	}
	id := n.UUID.String()
	doc["links"] = r.linkPair(id)
	if fields == nil {
		doc["ports"] = r.linkPair(id + "/ports")
		if r.v.AtLeast(1, 14) {
			doc["states"] = r.linkPair(id + "/states")
		}
		if r.v.AtLeast(1, 24) {
			doc["portgroups"] = r.linkPair(id + "/portgroups")
		}
		if r.v.AtLeast(1, 32) {
			doc["volume"] = r.linkPair(id + "/volume")
		}
	}
	return doc
}

// states renders GET /v1/nodes/{ident}/states.
func (r *renderer) states(n *Node) map[string]any {
	doc := map[string]any{
		"console_enabled":        n.ConsoleEnabled,
		"last_error":             str(n.LastError),
		"power_state":            str(n.PowerState),
		"provision_state":        r.provisionState(n.ProvisionState),
		"target_power_state":     str(n.TargetPowerState),
		"target_provision_state": str(n.TargetProvisionState),
		"provision_updated_at":   isoTime(n.ProvisionUpdatedAt),
	}
	if r.v.AtLeast(1, 12) {
		doc["raid_config"] = orEmpty(n.RaidConfig)
		doc["target_raid_config"] = orEmpty(n.TargetRaidConfig)
	}
	if r.v.AtLeast(1, 75) {
		doc["boot_mode"] = nil
		doc["secure_boot"] = nil
	}
	return doc
}

// isoTime formats t as Python's datetime.isoformat() of an aware UTC time,
// which is how Ironic shows timestamps: microseconds only when non-zero.
func isoTime(t *time.Time) any {
	if t == nil {
		return nil
	}
	u := t.UTC().Truncate(time.Microsecond)
	if u.Nanosecond() == 0 {
		return u.Format("2006-01-02T15:04:05+00:00")
	}
	return u.Format("2006-01-02T15:04:05.000000+00:00")
}

func uuidOrNil(p *uuid.UUID) any {
	if p == nil {
		return nil
	}
	return p.String()
}

func boolOrNil(p *bool) any {
	if p == nil {
		return nil
	}
	return *p
}

func orEmpty(m map[string]any) map[string]any {
	if m == nil {
		return map[string]any{}
	}
	return m
}

// sanitizeKeys are the key fragments oslo.utils' mask_dict_password treats
// as secrets (Ironic masks driver_info and instance_info with it).
var sanitizeKeys = []string{"adminpass", "admin_pass", "password", "admin_password", "auth_token",
	"new_pass", "auth_password", "secret_uuid", "secret", "sys_pswd", "token", "configdrive",
	"chappassword", "encrypted_key", "private_key", "fernetkey", "sslkey", "passphrase",
	"cephclusterfsid", "octaviaheartbeatkey", "rabbitcookie", "cephmanilaclientkey",
	"pacemakerremoteauthkey", "designaterndckey", "cephadminkey", "heatauthencryptionkey",
	"cephclientkey", "keystonecredential", "barbicansimplecryptokek", "cephrgwkey",
	"swifthashsuffix", "migrationsshkey", "cephmdskey", "cephmonkey"}

const mask = "******"

// maskSecrets replaces values whose keys look secret, recursively, as
// Ironic shows driver_info to callers without the show_password policy.
func maskSecrets(m map[string]any) map[string]any {
	out := make(map[string]any, len(m))
	for k, v := range m {
		if sub, ok := v.(map[string]any); ok {
			out[k] = maskSecrets(sub)
			continue
		}
		lk := strings.ToLower(k)
		secret := false
		for _, s := range sanitizeKeys {
			if strings.Contains(lk, s) {
				secret = true
				break
			}
		}
		if secret {
			out[k] = mask
		} else {
			out[k] = v
		}
	}
	return out
}

// maskInstanceInfo masks instance_info as Ironic does: secret keys, a
// configdrive and an image_url.
func maskInstanceInfo(m map[string]any) map[string]any {
	out := maskSecrets(m)
	if v, ok := out["configdrive"]; ok && !isEmptyValue(v) {
		out["configdrive"] = mask
	}
	if v, ok := out["image_url"]; ok && !isEmptyValue(v) {
		out["image_url"] = mask
	}
	return out
}

// maskInternal hides the agent token in driver_internal_info.
func maskInternal(m map[string]any) map[string]any {
	out := orEmpty(m)
	if v, ok := out["agent_secret_token"]; ok && !isEmptyValue(v) {
		out = cloneObject(out)
		out["agent_secret_token"] = mask
	}
	return out
}
