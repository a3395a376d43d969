// Package client is a typed HTTP client of the OpenStack Placement API, as
// the conductor's Placement backend uses it: resource providers, inventories,
// traits, resource classes, allocation candidates and allocations. It speaks
// microversion 1.39 (Placement 8.0, Zed, and metalloc-placement) and sends
// a Credential with each request: a fixed X-Auth-Token (noauth2's "admin"),
// HTTP Basic, or a Keystone service token renewed after a 401.
//
// Every method returns *Error for an answer outside 2xx, carrying the status
// and Placement's error code (placement.concurrent_update, …), so callers
// can tell a generation conflict (IsConflict) from a missing provider
// (IsNotFound).
package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"time"

	"github.com/google/uuid"
)

// Microversion is the Placement microversion every request asks for.
const Microversion = "1.39"

// ConsumerType is the consumer_type (required from 1.38) of the allocations
// the conductor writes: one consumer per Ironic allocation, as Nova writes
// one per instance.
const ConsumerType = "INSTANCE"

// Client talks to one Placement endpoint. It is safe for concurrent use.
type Client struct {
	endpoint string // without a trailing slash, e.g. http://127.0.0.1:8778
	cred     Credential
	http     *http.Client
}

// New returns a client of the Placement API at endpoint (its root, e.g.
// "http://127.0.0.1:8778" or "http://keystone-fronted/placement"), sending
// token as X-Auth-Token. timeout bounds each request (0: 30 s).
func New(endpoint, token string, timeout time.Duration) *Client {
	if timeout <= 0 {
		timeout = 30 * time.Second
	}
	return NewWithCredential(endpoint, Token(token), &http.Client{Timeout: timeout, Transport: &http.Transport{
		Proxy: http.ProxyFromEnvironment, MaxIdleConnsPerHost: 32, IdleConnTimeout: 90 * time.Second,
	}})
}

// NewWithCredential returns a client of the Placement API at endpoint that
// authenticates with cred and sends its requests through hc (its timeout,
// and TLS roots for an https endpoint: auth.HTTPClient).
func NewWithCredential(endpoint string, cred Credential, hc *http.Client) *Client {
	if cred == nil {
		cred = Token("")
	}
	return &Client{endpoint: strings.TrimRight(endpoint, "/"), cred: cred, http: hc}
}

// Endpoint is the API root the client talks to.
func (c *Client) Endpoint() string { return c.endpoint }

// Error is an answer outside 2xx, or a failure to reach Placement (Status 0).
type Error struct {
	Method, Path string
	Status       int    // HTTP status; 0 when no answer came
	Code         string // Placement's error code, e.g. "placement.concurrent_update" ("" before 1.23 or none)
	Detail       string // the error's detail (or the transport error)
	RequestID    string // x-openstack-request-id of the answer
	Err          error  // the transport error when Status is 0
}

func (e *Error) Error() string {
	if e.Status == 0 {
		return fmt.Sprintf("placement %s %s: %v", e.Method, e.Path, e.Err)
	}
	s := fmt.Sprintf("placement %s %s: %d", e.Method, e.Path, e.Status)
	if e.Code != "" {
		s += " " + e.Code
	}
	if e.Detail != "" {
		s += ": " + e.Detail
	}
	return s
}

func (e *Error) Unwrap() error { return e.Err }

// StatusOf is err's HTTP status when it is an *Error, else 0.
func StatusOf(err error) int {
	var e *Error
	if errors.As(err, &e) {
		return e.Status
	}
	return 0
}

// CodeConcurrentUpdate is Placement's error code for a stale provider or
// consumer generation (409; re-read and retry).
const CodeConcurrentUpdate = "placement.concurrent_update"

// IsConflict reports a 409 (a stale generation, a duplicate name, capacity
// exceeded, inventory in use…).
func IsConflict(err error) bool { return StatusOf(err) == http.StatusConflict }

// IsConcurrentUpdate reports a 409 placement.concurrent_update: a provider
// or consumer generation moved (or a new consumer's null
// consumer_generation met an existing one); re-read and retry.
func IsConcurrentUpdate(err error) bool {
	var e *Error
	return errors.As(err, &e) && e.Status == http.StatusConflict && e.Code == CodeConcurrentUpdate
}

// IsNotFound reports a 404.
func IsNotFound(err error) bool { return StatusOf(err) == http.StatusNotFound }

// IsUnreachable reports that no answer came (connection refused, timeout)
// or the service answered 5xx: worth retrying later, not a verdict.
func IsUnreachable(err error) bool {
	s := StatusOf(err)
	var e *Error
	return (errors.As(err, &e) && s == 0) || s >= 500
}

// do sends one request; body (if not nil) is JSON-encoded, and a 2xx answer
// is decoded into out (if not nil). A 404 on GET is an *Error too.
func (c *Client) do(ctx context.Context, method, path string, body, out any) error {
	var raw []byte
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return err
		}
		raw = b
	}
	resp, err := c.send(ctx, method, path, raw)
	if err == nil && resp.StatusCode == http.StatusUnauthorized && c.cred.Rejected() {
		resp.Body.Close()
		resp, err = c.send(ctx, method, path, raw)
	}
	if err != nil {
		return &Error{Method: method, Path: path, Err: err, Detail: err.Error()}
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 256<<20))
	if err != nil {
		return &Error{Method: method, Path: path, Err: err, Detail: err.Error()}
	}
	if resp.StatusCode/100 != 2 {
		e := &Error{Method: method, Path: path, Status: resp.StatusCode, RequestID: resp.Header.Get("X-Openstack-Request-Id")}
		var eb struct {
			Errors []struct {
				Code   string `json:"code"`
				Detail string `json:"detail"`
				Title  string `json:"title"`
			} `json:"errors"`
		}
		if json.Unmarshal(data, &eb) == nil && len(eb.Errors) > 0 {
			e.Code, e.Detail = eb.Errors[0].Code, eb.Errors[0].Detail
			if e.Detail == "" {
				e.Detail = eb.Errors[0].Title
			}
		} else {
			e.Detail = strings.TrimSpace(string(data))
		}
		return e
	}
	if out != nil && len(data) > 0 {
		if err := json.Unmarshal(data, out); err != nil {
			return &Error{Method: method, Path: path, Status: resp.StatusCode, Err: err,
				Detail: "decoding the answer: " + err.Error()}
		}
	}
	return nil
}

// send makes and sends one request with the client's credential.
func (c *Client) send(ctx context.Context, method, path string, raw []byte) (*http.Response, error) {
	var rd io.Reader
	if raw != nil {
		rd = bytes.NewReader(raw)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.endpoint+path, rd)
	if err != nil {
		return nil, err
	}
	req.Header.Set("OpenStack-API-Version", "placement "+Microversion)
	req.Header.Set("Accept", "application/json")
	if raw != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if err := c.cred.Apply(ctx, req); err != nil {
		return nil, err
	}
	return c.http.Do(req)
}

// Provider is a resource provider (GET /resource_providers/{uuid}).
type Provider struct {
	UUID               uuid.UUID  `json:"uuid"`
	Name               string     `json:"name"`
	Generation         int64      `json:"generation"`
	ParentProviderUUID *uuid.UUID `json:"parent_provider_uuid"`
	RootProviderUUID   uuid.UUID  `json:"root_provider_uuid"`
}

// GetProvider reads one provider (404: IsNotFound).
func (c *Client) GetProvider(ctx context.Context, id uuid.UUID) (*Provider, error) {
	var p Provider
	if err := c.do(ctx, http.MethodGet, "/resource_providers/"+id.String(), nil, &p); err != nil {
		return nil, err
	}
	return &p, nil
}

// CreateProvider creates a root provider with this uuid and name (409 when
// either is taken).
func (c *Client) CreateProvider(ctx context.Context, id uuid.UUID, name string) (*Provider, error) {
	var p Provider
	body := map[string]any{"uuid": id, "name": name}
	if err := c.do(ctx, http.MethodPost, "/resource_providers", body, &p); err != nil {
		return nil, err
	}
	return &p, nil
}

// RenameProvider sets a provider's name (PUT /resource_providers/{uuid};
// 409 when the name is taken by another provider).
func (c *Client) RenameProvider(ctx context.Context, id uuid.UUID, name string) (*Provider, error) {
	var p Provider
	if err := c.do(ctx, http.MethodPut, "/resource_providers/"+id.String(), map[string]any{"name": name}, &p); err != nil {
		return nil, err
	}
	return &p, nil
}

// DeleteProvider deletes a provider (409 while it has allocations or
// children; 404 when it is gone already).
func (c *Client) DeleteProvider(ctx context.Context, id uuid.UUID) error {
	return c.do(ctx, http.MethodDelete, "/resource_providers/"+id.String(), nil, nil)
}

// ListProviders lists providers matching q (name, uuid, member_of,
// resources, required, in_tree: as GET /resource_providers).
func (c *Client) ListProviders(ctx context.Context, q url.Values) ([]Provider, error) {
	var out struct {
		ResourceProviders []Provider `json:"resource_providers"`
	}
	path := "/resource_providers"
	if len(q) > 0 {
		path += "?" + q.Encode()
	}
	if err := c.do(ctx, http.MethodGet, path, nil, &out); err != nil {
		return nil, err
	}
	return out.ResourceProviders, nil
}

// Inventory is one resource class's inventory of a provider. Capacity for
// allocations is (Total − Reserved) × AllocationRatio.
type Inventory struct {
	Total           int64   `json:"total"`
	Reserved        int64   `json:"reserved"`
	MinUnit         int64   `json:"min_unit"`
	MaxUnit         int64   `json:"max_unit"`
	StepSize        int64   `json:"step_size"`
	AllocationRatio float64 `json:"allocation_ratio"`
}

// Inventories is a provider's whole inventory at a generation.
type Inventories struct {
	Generation  int64                `json:"resource_provider_generation"`
	Inventories map[string]Inventory `json:"inventories"`
}

// GetInventories reads a provider's inventories and generation.
func (c *Client) GetInventories(ctx context.Context, rp uuid.UUID) (*Inventories, error) {
	var out Inventories
	if err := c.do(ctx, http.MethodGet, "/resource_providers/"+rp.String()+"/inventories", nil, &out); err != nil {
		return nil, err
	}
	if out.Inventories == nil {
		out.Inventories = map[string]Inventory{}
	}
	return &out, nil
}

// PutInventories replaces a provider's inventories if its generation is
// still inv.Generation (else 409 placement.concurrent_update; re-read and
// retry). It returns the provider's new generation.
func (c *Client) PutInventories(ctx context.Context, rp uuid.UUID, inv Inventories) (int64, error) {
	if inv.Inventories == nil {
		inv.Inventories = map[string]Inventory{}
	}
	var out Inventories
	if err := c.do(ctx, http.MethodPut, "/resource_providers/"+rp.String()+"/inventories", inv, &out); err != nil {
		return 0, err
	}
	return out.Generation, nil
}

// ProviderTraits is a provider's traits at a generation.
type ProviderTraits struct {
	Generation int64    `json:"resource_provider_generation"`
	Traits     []string `json:"traits"`
}

// GetTraits reads a provider's traits and generation.
func (c *Client) GetTraits(ctx context.Context, rp uuid.UUID) (*ProviderTraits, error) {
	var out ProviderTraits
	if err := c.do(ctx, http.MethodGet, "/resource_providers/"+rp.String()+"/traits", nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// PutTraits replaces a provider's traits if its generation is still
// generation (409 otherwise; 400 for a trait that does not exist: create
// custom ones first with EnsureTrait). It returns the new generation.
func (c *Client) PutTraits(ctx context.Context, rp uuid.UUID, generation int64, traits []string) (int64, error) {
	if traits == nil {
		traits = []string{}
	}
	var out ProviderTraits
	body := ProviderTraits{Generation: generation, Traits: traits}
	if err := c.do(ctx, http.MethodPut, "/resource_providers/"+rp.String()+"/traits", body, &out); err != nil {
		return 0, err
	}
	return out.Generation, nil
}

// EnsureTrait creates the custom trait name (CUSTOM_…) if it does not exist
// (PUT /traits/{name}: 201 or 204).
func (c *Client) EnsureTrait(ctx context.Context, name string) error {
	return c.do(ctx, http.MethodPut, "/traits/"+url.PathEscape(name), nil, nil)
}

// TraitExists reports whether trait name exists in Placement (GET
// /traits/{name}: 204 yes, 404 no): the way to check a standard trait
// (HW_…, COMPUTE_…), which EnsureTrait cannot create.
func (c *Client) TraitExists(ctx context.Context, name string) (bool, error) {
	err := c.do(ctx, http.MethodGet, "/traits/"+url.PathEscape(name), nil, nil)
	if IsNotFound(err) {
		return false, nil
	}
	return err == nil, err
}

// EnsureResourceClass creates the custom resource class name (CUSTOM_…) if
// it does not exist (PUT /resource_classes/{name}, 1.7+: 201 or 204).
func (c *Client) EnsureResourceClass(ctx context.Context, name string) error {
	return c.do(ctx, http.MethodPut, "/resource_classes/"+url.PathEscape(name), nil, nil)
}

// Usages is a provider's usage by resource class at a generation.
type Usages struct {
	Generation int64            `json:"resource_provider_generation"`
	Usages     map[string]int64 `json:"usages"`
}

// ProviderUsages reads GET /resource_providers/{uuid}/usages.
func (c *Client) ProviderUsages(ctx context.Context, rp uuid.UUID) (*Usages, error) {
	var out Usages
	if err := c.do(ctx, http.MethodGet, "/resource_providers/"+rp.String()+"/usages", nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// Resources is an amount by resource class, e.g. {"CUSTOM_BAREMETAL_GOLD": 1}.
type Resources map[string]int64

// ProviderResources is one provider's part of an allocation or allocation
// request.
type ProviderResources struct {
	Resources  Resources `json:"resources"`
	Generation *int64    `json:"generation,omitempty"` // set in GET answers only
}

// AllocationRequest is one way to satisfy a request, as GET
// /allocation_candidates returns it (dict form, 1.12+): the resources to
// take from each provider, and (1.34+) which providers serve which request
// group suffix ("" for the unsuffixed group). Its JSON is what PUT
// /allocations/{consumer} takes for "allocations" and "mappings".
type AllocationRequest struct {
	Allocations map[uuid.UUID]ProviderResources `json:"allocations"`
	Mappings    map[string][]uuid.UUID          `json:"mappings,omitempty"`
}

// ProviderSummary is a provider's entry in provider_summaries.
type ProviderSummary struct {
	Resources map[string]struct {
		Capacity int64 `json:"capacity"`
		Used     int64 `json:"used"`
	} `json:"resources"`
	Traits             []string   `json:"traits"`
	ParentProviderUUID *uuid.UUID `json:"parent_provider_uuid"`
	RootProviderUUID   uuid.UUID  `json:"root_provider_uuid"`
}

// Candidates is the answer of GET /allocation_candidates.
type Candidates struct {
	AllocationRequests []AllocationRequest           `json:"allocation_requests"`
	ProviderSummaries  map[uuid.UUID]ProviderSummary `json:"provider_summaries"`
}

// AllocationCandidates asks GET /allocation_candidates with q (resources,
// required, member_of, in_tree, limit, group_policy, granular groups…).
func (c *Client) AllocationCandidates(ctx context.Context, q url.Values) (*Candidates, error) {
	var out Candidates
	if err := c.do(ctx, http.MethodGet, "/allocation_candidates?"+q.Encode(), nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// ConsumerAllocations is a consumer's allocations (GET
// /allocations/{consumer}); empty Allocations when it has none.
type ConsumerAllocations struct {
	Allocations        map[uuid.UUID]ProviderResources `json:"allocations"`
	ProjectID          string                          `json:"project_id,omitempty"`
	UserID             string                          `json:"user_id,omitempty"`
	ConsumerGeneration *int64                          `json:"consumer_generation,omitempty"`
	ConsumerType       string                          `json:"consumer_type,omitempty"`
}

// GetAllocations reads a consumer's allocations.
func (c *Client) GetAllocations(ctx context.Context, consumer uuid.UUID) (*ConsumerAllocations, error) {
	var out ConsumerAllocations
	if err := c.do(ctx, http.MethodGet, "/allocations/"+consumer.String(), nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// Claim is the body of PUT /allocations/{consumer}.
type Claim struct {
	// Request is the allocation request to claim (its allocations and
	// mappings are sent as they are).
	Request AllocationRequest
	// ProjectID and UserID own the consumer (required by Placement).
	ProjectID, UserID string
	// ConsumerGeneration is nil for a new consumer, else the generation
	// read with GetAllocations (409 placement.concurrent_update when stale).
	ConsumerGeneration *int64
}

// PutAllocations replaces all of consumer's allocations with claim (204).
// 409 with code placement.concurrent_update means a provider or consumer
// generation moved; 409 without it (or placement.undefined_code) means some
// provider lacks the capacity.
func (c *Client) PutAllocations(ctx context.Context, consumer uuid.UUID, claim Claim) error {
	return c.do(ctx, http.MethodPut, "/allocations/"+consumer.String(), claim.body(), nil)
}

// body is claim as one consumer's JSON object in PUT and POST
// /allocations.
func (claim Claim) body() map[string]any {
	body := map[string]any{
		"allocations":         claim.Request.Allocations,
		"project_id":          claim.ProjectID,
		"user_id":             claim.UserID,
		"consumer_generation": claim.ConsumerGeneration,
		"consumer_type":       ConsumerType,
	}
	if len(claim.Request.Mappings) > 0 {
		body["mappings"] = claim.Request.Mappings
	}
	return body
}

// PostAllocations writes the allocations of several consumers at once
// (POST /allocations, 204): all of them or none. Each Claim is as for
// PutAllocations (ConsumerGeneration nil for a new consumer; empty
// allocations remove a consumer's). A 409 means some provider lacks the
// capacity or a generation moved (IsConcurrentUpdate), as for PUT.
func (c *Client) PostAllocations(ctx context.Context, claims map[uuid.UUID]Claim) error {
	body := make(map[string]any, len(claims))
	for consumer, claim := range claims {
		body[consumer.String()] = claim.body()
	}
	return c.do(ctx, http.MethodPost, "/allocations", body, nil)
}

// DeleteAllocations deletes all of consumer's allocations (204; 404 when it
// has none: IsNotFound).
func (c *Client) DeleteAllocations(ctx context.Context, consumer uuid.UUID) error {
	return c.do(ctx, http.MethodDelete, "/allocations/"+consumer.String(), nil, nil)
}

// ProviderAllocations is GET /resource_providers/{uuid}/allocations: the
// provider's allocations by consumer.
type ProviderAllocations struct {
	Generation  int64 `json:"resource_provider_generation"`
	Allocations map[uuid.UUID]struct {
		Resources Resources `json:"resources"`
	} `json:"allocations"`
}

// GetProviderAllocations reads a provider's allocations by consumer.
func (c *Client) GetProviderAllocations(ctx context.Context, rp uuid.UUID) (*ProviderAllocations, error) {
	var out ProviderAllocations
	if err := c.do(ctx, http.MethodGet, "/resource_providers/"+rp.String()+"/allocations", nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// NormalizeClass is the Placement resource class of an Ironic resource
// class, as Nova's ironic driver forms it (os-resource-classes'
// normalize_name): every run of characters outside A-Z, a-z and 0-9
// becomes one "_", the result is upper-cased and prefixed "CUSTOM_" (e.g.
// "baremetal.gold" → "CUSTOM_BAREMETAL_GOLD", "a--b" → "CUSTOM_A_B").
func NormalizeClass(rc string) string {
	return "CUSTOM_" + strings.ToUpper(nonAlnum.ReplaceAllString(rc, "_"))
}

var nonAlnum = regexp.MustCompile(`[^0-9A-Za-z]+`)

// RootHeader reads the version document at the API root ("/") and returns
// the value of its response header name ("" when absent). metalloc-
// placement names its database there (placement.IdentityHeader).
func (c *Client) RootHeader(ctx context.Context, name string) (string, error) {
	resp, err := c.send(ctx, http.MethodGet, "/", nil)
	if err != nil {
		return "", &Error{Method: http.MethodGet, Path: "/", Err: err, Detail: err.Error()}
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
	if resp.StatusCode/100 != 2 {
		return "", &Error{Method: http.MethodGet, Path: "/", Status: resp.StatusCode}
	}
	return resp.Header.Get(name), nil
}
