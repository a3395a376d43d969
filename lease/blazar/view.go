package blazar

import (
	"strconv"
	"time"

	"github.com/google/uuid"

	"github.com/metalloc/metalloc/lease"
	"github.com/metalloc/metalloc/node"
)

// Time formats of Blazar's API. DateIn is how requests give start_date,
// end_date and before_end_date (its manager's LEASE_DATE_FORMAT, UTC, to
// the minute, or "now" for start_date); DateOut is how answers give every
// time (oslo's to_primitive of a naive UTC datetime, microseconds
// included: blazarclient parses end_date so for --prolong-for).
const (
	DateIn  = "2006-01-02 15:04"
	DateOut = "2006-01-02T15:04:05.000000"
)

// Lease statuses of Blazar (its status.LeaseStatus) that metalloc's
// states map onto (Status).
const (
	StatusPending     = "PENDING"
	StatusStarting    = "STARTING"
	StatusActive      = "ACTIVE"
	StatusTerminating = "TERMINATING"
	StatusTerminated  = "TERMINATED"
	StatusError       = "ERROR"
)

// ResourceType is the only reservation type served: bare-metal nodes as
// Blazar's physical hosts.
const ResourceType = "physical:host"

// Status maps a lease's state onto Blazar's lease status at time now:
// pending is PENDING, or STARTING once its start_time passed (a conductor
// is about to start it); active is ACTIVE, or TERMINATING once its
// end_time passed; ended and cancelled are TERMINATED (their nodes block
// nothing); error is ERROR.
func Status(l lease.Lease, now time.Time) string {
	switch l.State {
	case lease.StatePending:
		if !now.Before(l.StartTime) {
			return StatusStarting
		}
		return StatusPending
	case lease.StateActive:
		if !now.Before(l.EndTime) {
			return StatusTerminating
		}
		return StatusActive
	case lease.StateEnded, lease.StateCancelled:
		return StatusTerminated
	}
	return StatusError
}

// reservationStatus is a reservation's status in Blazar (its
// status.ReservationStatus): pending, active, deleted (the lease ended or
// was cancelled), error.
func reservationStatus(state string) string {
	switch state {
	case lease.StatePending, lease.StateActive:
		return state
	case lease.StateEnded, lease.StateCancelled:
		return "deleted"
	}
	return "error"
}

// eventNamespace makes the events' ids: uuid v5 of the lease's uuid and
// the event type, the same at every read.
var eventNamespace = uuid.MustParse("0f6c1f2e-8d1b-4c35-9a53-3b7f4c1d2a10")

func date(t time.Time) string { return t.UTC().Format(DateOut) }

func optDate(t *time.Time) any {
	if t == nil {
		return nil
	}
	return date(*t)
}

// Doc renders v as Blazar's lease object at time now, with notice the
// conductors' lease.ending notice (conductor.lease_ending_notice):
// id (the lease's uuid), name ("" for none), project_id, user_id (null: metalloc does
// not record who made it), start_date, end_date, before_end_date (end -
// notice), status (Status), degraded (a failed node not replaced yet:
// degraded_reason, or a status_reason while pending or active: a node
// missing at the start), trust_id (null), created_at,
// updated_at, reservations (one per reservation, resource_type
// physical:host, min and max (countRange), resource_properties its
// resource class and traits in the filter language, hypervisor_properties
// "", before_end "default", status) and events (start_lease, end_lease,
// before_end_lease, with their time and status UNDONE or DONE).
func Doc(v lease.View, now time.Time, notice time.Duration) map[string]any {
	id := v.Uuid.String()
	name := "" // a lease made through /v1/leases may have none; blazarclient sorts by name
	if v.Name != nil {
		name = *v.Name
	}
	rs := make([]map[string]any, 0, len(v.Reservations))
	for _, r := range v.Reservations {
		lo, hi := countRange(r.LeaseReservation)
		rs = append(rs, map[string]any{
			"id":                    reservationID(v.Uuid, r.ID).String(),
			"lease_id":              id,
			"resource_id":           nil,
			"resource_type":         ResourceType,
			"status":                reservationStatus(v.State),
			"min":                   lo,
			"max":                   hi,
			"hypervisor_properties": "",
			"resource_properties":   Text(r.ResourceClass, r.Traits, r.ForbiddenTraits),
			"before_end":            "default",
			"missing_resources":     v.StatusReason != nil && v.State == lease.StateActive,
			"resources_changed":     false,
			"created_at":            date(v.CreatedAt),
			"updated_at":            optDate(v.UpdatedAt),
		})
	}
	started := v.State != lease.StatePending
	ended := v.State == lease.StateEnded || v.State == lease.StateCancelled
	beforeEnd := v.EndTime.Add(-notice)
	if beforeEnd.Before(v.StartTime) {
		beforeEnd = v.StartTime
	}
	events := []map[string]any{
		event(v, "start_lease", v.StartTime, started),
		event(v, "end_lease", v.EndTime, ended),
		event(v, "before_end_lease", beforeEnd, v.EndingNoticedAt != nil || ended),
	}
	return map[string]any{
		"id":              id,
		"name":            name,
		"project_id":      v.ProjectID,
		"user_id":         nil,
		"trust_id":        nil,
		"start_date":      date(v.StartTime),
		"end_date":        date(v.EndTime),
		"before_end_date": date(beforeEnd),
		"status":          Status(v.Lease, now),
		"status_reason":   v.StatusReason,
		"degraded":        v.DegradedReason != nil || (v.StatusReason != nil && (v.State == lease.StatePending || v.State == lease.StateActive)),
		"created_at":      date(v.CreatedAt),
		"updated_at":      optDate(v.UpdatedAt),
		"reservations":    rs,
		"events":          events,
	}
}

// countRange is a reservation's min and max as Blazar shows them: the range
// asked through Blazar's API (lease_reservations.min_count, max_count;
// Blazar keeps its count_range and shows it so, whatever it booked), or
// min = max = the count for one made through /v1/leases (an exact count).
// The count booked, between them, is the number of the reservation's
// nodes (GET /v1/leases/{id}).
func countRange(r lease.LeaseReservation) (lo, hi int32) {
	if r.MinCount != nil && r.MaxCount != nil {
		return *r.MinCount, *r.MaxCount
	}
	return r.Count, r.Count
}

// reservationID is a reservation's id in Blazar (a uuid; metalloc's are
// row ids): uuid v5 of the lease's uuid and the row id.
func reservationID(l uuid.UUID, id int64) uuid.UUID {
	return uuid.NewSHA1(eventNamespace, []byte(l.String()+"/reservation/"+strconv.FormatInt(id, 10)))
}

func event(v lease.View, kind string, at time.Time, done bool) map[string]any {
	status := "UNDONE"
	if done {
		status = "DONE"
	}
	return map[string]any{
		"id":         uuid.NewSHA1(eventNamespace, []byte(v.Uuid.String()+"/"+kind)).String(),
		"lease_id":   v.Uuid.String(),
		"event_type": kind,
		"time":       date(at),
		"status":     status,
		"created_at": date(v.CreatedAt),
		"updated_at": optDate(v.UpdatedAt),
	}
}

// HostDoc renders reservable node n as Blazar's host object: id (the
// node's internal id as text: blazarclient takes an all-digits argument
// for an id, anything else for a hypervisor_hostname), hypervisor_hostname
// (the node's name, else its uuid), service_name (its uuid), vcpus,
// memory_mb, local_gb (properties cpus, memory_mb, local_gb; 0 when
// unset), cpu_info (properties.cpu_arch), hypervisor_type "ironic",
// hypervisor_version 1, availability_zone "", status (the provision
// state), reservable (true; false for a node in maintenance), trust_id
// null, resource_class, traits, created_at, updated_at, and each
// capability of properties.capabilities as a key of its own (Blazar's
// extra capabilities).
func HostDoc(n node.Node) map[string]any {
	name := n.UUID.String()
	if n.Name != nil {
		name = *n.Name
	}
	num := func(k string) any {
		if s, ok := propertyText(n.Properties[k]); ok {
			if i, err := strconv.ParseInt(s, 10, 64); err == nil {
				return i
			}
			if f, err := strconv.ParseFloat(s, 64); err == nil {
				return f
			}
		}
		return 0
	}
	cpuArch, _ := propertyText(n.Properties["cpu_arch"])
	doc := map[string]any{}
	for k, v := range capabilities(n.Properties["capabilities"]) {
		doc[k] = v
	}
	for k, v := range map[string]any{
		"id":                  strconv.FormatInt(n.ID, 10),
		"hypervisor_hostname": name,
		"service_name":        n.UUID.String(),
		"vcpus":               num("cpus"),
		"memory_mb":           num("memory_mb"),
		"local_gb":            num("local_gb"),
		"cpu_info":            cpuArch,
		"hypervisor_type":     "ironic",
		"hypervisor_version":  1,
		"availability_zone":   "",
		"status":              n.ProvisionState,
		"reservable":          !n.Maintenance,
		"trust_id":            nil,
		"resource_class":      n.ResourceClass,
		"traits":              nonNil(n.Traits),
		"created_at":          date(n.CreatedAt),
		"updated_at":          optDate(n.UpdatedAt),
	} {
		doc[k] = v
	}
	return doc
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}
