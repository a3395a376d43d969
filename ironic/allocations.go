package ironic

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/gophercloud/gophercloud/v2"
	"github.com/gophercloud/gophercloud/v2/openstack/baremetal/v1/allocations"
)

// Allocation states in Ironic (and in metalloc).
const (
	AllocationAllocating = "allocating"
	AllocationActive     = "active"
	AllocationError      = "error"
)

// Allocation is an allocation as Ironic shows it, the fields metalloc
// reads (GET /v1/allocations/{uuid}, list pages).
type Allocation struct {
	UUID           string   `json:"uuid"`
	Name           *string  `json:"name"`
	NodeUUID       *string  `json:"node_uuid"`
	State          string   `json:"state"`
	LastError      *string  `json:"last_error"`
	CandidateNodes []string `json:"candidate_nodes"`
	// CreatedAt and UpdatedAt are Ironic's timestamps as it writes them
	// (ISO 8601, UTC; nil when absent): the API's insert of the
	// allocation, and its last change (for a settled allocation, its
	// conductor's save of the outcome). InIronic reads them.
	CreatedAt *string `json:"created_at"`
	UpdatedAt *string `json:"updated_at"`
}

// InIronic is how long Ironic took from creating a to its last change
// (UpdatedAt - CreatedAt: for a settled allocation, the time it spent in
// Ironic's queue and conductor, without the API's round trips nor the
// reads' pauses), and whether Ironic's clock gave a finer resolution than
// the second (fine: a fractional second in either; Ironic on MySQL keeps
// whole seconds, on PostgreSQL microseconds). ok is false when a
// timestamp is missing or unreadable, or the difference is not positive
// (the API's and the conductor's hosts' clocks apart).
func (a Allocation) InIronic() (took time.Duration, fine, ok bool) {
	if a.CreatedAt == nil || a.UpdatedAt == nil {
		return 0, false, false
	}
	c, err1 := parseIronicTime(*a.CreatedAt)
	u, err2 := parseIronicTime(*a.UpdatedAt)
	if err1 != nil || err2 != nil || !u.After(c) {
		return 0, false, false
	}
	return u.Sub(c), c.Nanosecond() != 0 || u.Nanosecond() != 0, true
}

// parseIronicTime reads a timestamp as Ironic writes it: RFC 3339 with or
// without fractional seconds ("2026-12-03T08:40:00.123456+00:00"), or
// without an offset (UTC).
func parseIronicTime(s string) (time.Time, error) {
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t, nil
	}
	return time.Parse("2006-01-02T15:04:05.999999999", s)
}

// Node is the allocation's node uuid, "" when it has none.
func (a Allocation) Node() string {
	if a.NodeUUID == nil {
		return ""
	}
	return *a.NodeUUID
}

// Reason is the allocation's last_error, "" when it has none.
func (a Allocation) Reason() string {
	if a.LastError == nil {
		return ""
	}
	return *a.LastError
}

// AllocationRequest is the body of POST /v1/allocations as metalloc sends
// it: the allocation as metalloc has it (same uuid, name, resource class,
// traits, owner, extra) with the node metalloc chose as the only
// candidate. It implements gophercloud's allocations.CreateOptsBuilder
// (whose own CreateOpts has no owner and takes extra as strings only).
type AllocationRequest struct {
	UUID           string          `json:"uuid"`
	Name           *string         `json:"name,omitempty"`
	ResourceClass  string          `json:"resource_class"`
	Traits         []string        `json:"traits,omitempty"`
	Owner          *string         `json:"owner,omitempty"`
	Extra          json.RawMessage `json:"extra,omitempty"`
	CandidateNodes []string        `json:"candidate_nodes"`
}

// ToAllocationCreateMap is the request body (allocations.CreateOptsBuilder).
func (r AllocationRequest) ToAllocationCreateMap() (map[string]any, error) {
	if len(r.Extra) == 0 || string(r.Extra) == "{}" || string(r.Extra) == "null" {
		r.Extra = nil
	}
	raw, err := json.Marshal(r)
	if err != nil {
		return nil, err
	}
	var m map[string]any
	return m, json.Unmarshal(raw, &m)
}

// allocationFields are the fields metalloc reads of an allocation.
const allocationFields = "uuid,name,node_uuid,state,last_error,candidate_nodes,created_at,updated_at"

// CreateAllocation sends POST /v1/allocations (Ironic answers 201 with the
// allocation, usually still allocating: its conductor processes it in the
// background). Errors are *Error: 409 when the uuid or the name is taken,
// 400 when a candidate node does not exist, Status 0 or 5xx when Ironic is
// unavailable (IsUnavailable; the request may or may not have been
// processed).
func (c *Client) CreateAllocation(ctx context.Context, r AllocationRequest) (Allocation, error) {
	var out Allocation
	err := c.call(ctx, http.MethodPost, "allocations", func(ctx context.Context, sc *gophercloud.ServiceClient) error {
		return allocations.Create(ctx, sc, r).ExtractInto(&out)
	})
	return out, err
}

// GetAllocation reads allocation ident (a uuid or a name): 404 (IsNotFound)
// when Ironic has none.
func (c *Client) GetAllocation(ctx context.Context, ident string) (Allocation, error) {
	var out Allocation
	err := c.get(ctx, "allocations/"+url.PathEscape(ident)+"?fields="+allocationFields, &out)
	return out, err
}

// DeleteAllocation sends DELETE /v1/allocations/{ident}; a 404 is
// IsNotFound, a 409 (IsConflict) says the node is in a state where
// Ironic refuses (active, or moving, outside maintenance).
func (c *Client) DeleteAllocation(ctx context.Context, ident string) error {
	return c.call(ctx, http.MethodDelete, "allocations/"+url.PathEscape(ident), func(ctx context.Context, sc *gophercloud.ServiceClient) error {
		return allocations.Delete(ctx, sc, ident).ExtractErr()
	})
}

// ListAllocations reads every allocation of Ironic, limit per request,
// in Ironic's order. An allocation deleted while it pages, the one the
// next page starts after (Ironic answers 404 for an unknown marker), is
// dropped from the list, which goes on after the allocation before it
// (from the first again when there is none).
func (c *Client) ListAllocations(ctx context.Context, limit int) ([]Allocation, error) {
	var out []Allocation
	marker := ""
	for {
		q := url.Values{"fields": {allocationFields}, "limit": {strconv.Itoa(limit)}}
		if marker != "" {
			q.Set("marker", marker)
		}
		var page struct {
			Allocations []Allocation `json:"allocations"`
			Next        string       `json:"next"`
		}
		if err := c.get(ctx, "allocations?"+q.Encode(), &page); err != nil {
			if marker == "" || !IsNotFound(err) {
				return nil, err
			}
			out = out[:len(out)-1] // the marker, deleted
			marker = ""
			if len(out) > 0 {
				marker = out[len(out)-1].UUID
			}
			continue
		}
		out = append(out, page.Allocations...)
		if page.Next == "" || len(page.Allocations) == 0 {
			return out, nil
		}
		marker = page.Allocations[len(page.Allocations)-1].UUID
	}
}

// AllocationsByNode is allocs's uuids by node uuid (those with a node).
func AllocationsByNode(allocs []Allocation) map[string]string {
	out := make(map[string]string, len(allocs))
	for _, a := range allocs {
		if n := a.Node(); n != "" {
			out[n] = a.UUID
		}
	}
	return out
}

// Probe reports whether Ironic answers at all: GET / (no credentials),
// within the client's timeout; nil when it does, an *Error (Status 0 or
// 5xx) when it does not.
func (c *Client) Probe(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, c.opts.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.root+"/", nil)
	if err != nil {
		return err
	}
	resp, err := (&http.Client{Transport: c.transport}).Do(req)
	if err != nil {
		return mapError(context.Background(), http.MethodGet, c.root+"/", err)
	}
	resp.Body.Close()
	if resp.StatusCode >= 500 {
		return &Error{Method: http.MethodGet, URL: c.root + "/", Status: resp.StatusCode, Message: resp.Status}
	}
	return nil
}

// call runs fn with the service client, bounded by the client's timeout;
// its errors are *Error (a timeout of that bound is Ironic not answering,
// Status 0) or ctx's own end.
func (c *Client) call(ctx context.Context, method, path string, fn func(context.Context, *gophercloud.ServiceClient) error) error {
	sc, err := c.ServiceClient(ctx)
	if err != nil {
		return err
	}
	u := sc.Endpoint + path
	if i := strings.IndexByte(u, '?'); i >= 0 {
		u = u[:i]
	}
	tctx, cancel := context.WithTimeout(ctx, c.opts.Timeout)
	defer cancel()
	if err := fn(tctx, sc); err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return mapError(context.Background(), method, u, err)
	}
	return nil
}
