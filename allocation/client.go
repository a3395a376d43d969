package allocation

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/metalloc/metalloc/placement/client"
	"github.com/metalloc/metalloc/web"
)

// Client is a small client of metalloc-api's allocation endpoints for
// scripts (`metalloc-manage allocation ...`), using the Prefer: wait
// extension instead of polling.
type Client struct {
	// Endpoint is metalloc-api's base URL (http://127.0.0.1:6385).
	Endpoint string
	// HTTP sends the requests; give it no overall timeout: each request
	// is bounded by its wait plus RequestTimeout.
	HTTP *http.Client
	// Credential authenticates each request (client.Token for noauth or a
	// Keystone token, client.Basic for http_basic, client.Keystone); nil
	// sends none.
	Credential client.Credential
	// RequestTimeout bounds a request beyond its wait (default 30 s).
	RequestTimeout time.Duration
}

// CreateRequest is the body of POST /v1/allocations.
type CreateRequest struct {
	ResourceClass  string   `json:"resource_class"`
	Name           string   `json:"name,omitempty"`
	Traits         []string `json:"traits,omitempty"`
	CandidateNodes []string `json:"candidate_nodes,omitempty"`
	Owner          string   `json:"owner,omitempty"`
}

// ClientError is a non-2xx answer: its status and Ironic's faultstring.
type ClientError struct {
	Status  int
	Message string
}

func (e *ClientError) Error() string { return fmt.Sprintf("%d: %s", e.Status, e.Message) }

// clientVersion is the microversion the client speaks (owner needs 1.60).
const clientVersion = "1.82"

// Create posts req; with wait > 0 the answer comes once the allocation left
// allocating or after wait (Prefer: wait). It returns the allocation
// document.
func (c *Client) Create(ctx context.Context, req CreateRequest, wait time.Duration) (map[string]any, error) {
	body, err := json.Marshal(req)
	if err != nil {
		return nil, err
	}
	return c.do(ctx, http.MethodPost, "/v1/allocations", body, wait)
}

// Show gets allocation ident (uuid or name), waiting up to wait for it to
// leave allocating.
func (c *Client) Show(ctx context.Context, ident string, wait time.Duration) (map[string]any, error) {
	return c.do(ctx, http.MethodGet, "/v1/allocations/"+url.PathEscape(ident), nil, wait)
}

// Delete deletes allocation ident.
func (c *Client) Delete(ctx context.Context, ident string) error {
	_, err := c.do(ctx, http.MethodDelete, "/v1/allocations/"+url.PathEscape(ident), nil, 0)
	return err
}

// Do sends one request to metalloc-api: method on path (below the
// endpoint) with a JSON body (nil: none), Prefer: wait=wait when wait > 0,
// and returns the JSON answer (nil for an empty one) or a *ClientError
// (other resources of the same API, such as allocation groups, use it).
func (c *Client) Do(ctx context.Context, method, path string, body []byte, wait time.Duration) (map[string]any, error) {
	return c.do(ctx, method, path, body, wait)
}

func (c *Client) do(ctx context.Context, method, path string, body []byte, wait time.Duration) (map[string]any, error) {
	timeout := c.RequestTimeout
	if timeout <= 0 {
		timeout = 30 * time.Second
	}
	ctx, cancel := context.WithTimeout(ctx, wait+timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, strings.TrimRight(c.Endpoint, "/")+path, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set(web.IronicVersionHeader, clientVersion)
	req.Header.Set("Accept", "application/json")
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if wait > 0 {
		req.Header.Set("Prefer", "wait="+strconv.Itoa(int(wait.Round(time.Second)/time.Second)))
	}
	if c.Credential != nil {
		if err := c.Credential.Apply(ctx, req); err != nil {
			return nil, err
		}
	}
	hc := c.HTTP
	if hc == nil {
		hc = http.DefaultClient
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode >= 300 {
		return nil, &ClientError{Status: resp.StatusCode, Message: web.IronicFaultString(raw)}
	}
	if len(raw) == 0 {
		return nil, nil
	}
	var doc map[string]any
	return doc, json.Unmarshal(raw, &doc)
}
