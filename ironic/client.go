package ironic

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gophercloud/gophercloud/v2"
	"github.com/gophercloud/gophercloud/v2/openstack"
	"github.com/gophercloud/gophercloud/v2/openstack/baremetal/httpbasic"
	"github.com/gophercloud/gophercloud/v2/openstack/baremetal/noauth"

	"github.com/metalloc/metalloc/auth"
	"github.com/metalloc/metalloc/web"
)

// Authentication strategies of metalloc's own requests to Ironic
// (ironic.auth_strategy).
const (
	AuthNoAuth    = "noauth"
	AuthHTTPBasic = "http_basic"
	AuthKeystone  = "keystone"
)

// MinMicroversion is the lowest Ironic microversion metalloc works with in
// front of Ironic: 1.65 gives nodes their lessee (Ironic 17.0, Wallaby).
var MinMicroversion = web.Version{Major: 1, Minor: 65}

// Options configures a Client (the ironic section of the configuration,
// and the keystone section for AuthKeystone).
type Options struct {
	// Endpoint is Ironic's API root (http://ironic:6385); a trailing /v1
	// is accepted. Required.
	Endpoint string
	// AuthStrategy is AuthNoAuth (default), AuthHTTPBasic (Username,
	// Password) or AuthKeystone (Keystone).
	AuthStrategy       string
	Username, Password string
	// Keystone is the service user of AuthKeystone. Its token is scoped to
	// the whole system unless KeystoneScope is "project" (then to
	// Keystone.ProjectName): Ironic's secure RBAC lists every node only to
	// system-scoped readers.
	Keystone      auth.KeystoneConfig
	KeystoneScope string
	// CAFile is a PEM bundle verifying an https Endpoint (and, with
	// AuthKeystone, Keystone, together with Keystone.CAFile).
	CAFile string
	// Timeout bounds each request (default 30 s).
	Timeout time.Duration
	// Microversion pins the microversion of every request ("1.82"); ""
	// uses the highest Ironic and metalloc both support (at least
	// MinMicroversion).
	Microversion string
}

// Client is metalloc's client for Ironic's API: gophercloud's bare-metal
// service client with the configured authentication, a microversion
// negotiated once (or pinned), and Ironic's errors as *Error. It contacts
// Ironic only when first used, so a service may start while Ironic is
// down. Safe for concurrent use.
type Client struct {
	opts      Options
	root      string // Endpoint without /v1 or a trailing slash
	transport http.RoundTripper
	pinned    *web.Version

	mu     sync.Mutex
	sc     *gophercloud.ServiceClient // nil until first ready
	mv     web.Version
	irMin  web.Version
	irMax  web.Version
	haveVR bool
}

// NewClient checks opts and returns a Client. It does not contact Ironic.
func NewClient(opts Options) (*Client, error) {
	if opts.Endpoint == "" {
		return nil, errors.New("ironic.endpoint is not set")
	}
	u, err := url.Parse(opts.Endpoint)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("ironic.endpoint %q: want an http(s) URL such as http://ironic:6385", opts.Endpoint)
	}
	if opts.AuthStrategy == "" {
		opts.AuthStrategy = AuthNoAuth
	}
	switch opts.AuthStrategy {
	case AuthNoAuth:
	case AuthHTTPBasic:
		if opts.Username == "" || opts.Password == "" {
			return nil, errors.New("ironic.auth_strategy http_basic needs ironic.username and ironic.password")
		}
	case AuthKeystone:
		if opts.Keystone.AuthURL == "" || opts.Keystone.Username == "" || opts.Keystone.Password == "" {
			return nil, errors.New("ironic.auth_strategy keystone needs keystone.auth_url, keystone.username and keystone.password")
		}
		if opts.KeystoneScope != "" && opts.KeystoneScope != "system" && opts.KeystoneScope != "project" {
			return nil, fmt.Errorf("ironic.keystone_scope %q: want system or project", opts.KeystoneScope)
		}
	default:
		return nil, fmt.Errorf("ironic.auth_strategy %q: want noauth, http_basic or keystone", opts.AuthStrategy)
	}
	if opts.Timeout <= 0 {
		opts.Timeout = 30 * time.Second
	}
	c := &Client{opts: opts}
	if opts.Microversion != "" {
		v, ok := web.ParseVersion(opts.Microversion, web.IronicMaxVersion)
		if !ok || v.Major != 1 || v.Less(MinMicroversion) || web.IronicMaxVersion.Less(v) {
			return nil, fmt.Errorf("ironic.microversion %q: want a version from %s to %s", opts.Microversion, MinMicroversion, web.IronicMaxVersion)
		}
		c.pinned = &v
	}
	c.root = strings.TrimSuffix(strings.TrimRight(opts.Endpoint, "/"), "/v1")
	cas := []string{opts.CAFile}
	if opts.AuthStrategy == AuthKeystone {
		cas = append(cas, opts.Keystone.CAFile)
	}
	if c.transport, err = transport(cas...); err != nil {
		return nil, err
	}
	return c, nil
}

// transport is an http.Transport verifying servers with the PEM bundles
// given ("" entries skipped; none: the system's roots), TLS 1.2 or later.
func transport(caFiles ...string) (http.RoundTripper, error) {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = 64
	tr.TLSClientConfig = &tls.Config{MinVersion: tls.VersionTLS12}
	var pool *x509.CertPool
	for _, f := range caFiles {
		if f == "" {
			continue
		}
		pem, err := os.ReadFile(f)
		if err != nil {
			return nil, fmt.Errorf("ironic.ca_file: %w", err)
		}
		if pool == nil {
			pool = x509.NewCertPool()
		}
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("%s: no PEM certificates", f)
		}
	}
	tr.TLSClientConfig.RootCAs = pool
	return tr, nil
}

// Root is Ironic's API root (Endpoint without /v1).
func (c *Client) Root() string { return c.root }

// Transport is the client's HTTP transport (TLS verified with CAFile,
// no credentials): the proxy sends clients' requests through it.
func (c *Client) Transport() http.RoundTripper { return c.transport }

// Timeout is the bound of each request.
func (c *Client) Timeout() time.Duration { return c.opts.Timeout }

// Versions returns Ironic's microversion range, from its root document
// (GET /, which needs no credentials). Once read, it is remembered.
func (c *Client) Versions(ctx context.Context) (lo, hi web.Version, err error) {
	c.mu.Lock()
	if c.haveVR {
		lo, hi = c.irMin, c.irMax
		c.mu.Unlock()
		return lo, hi, nil
	}
	c.mu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, c.opts.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.root+"/", nil)
	if err != nil {
		return lo, hi, err
	}
	resp, err := (&http.Client{Transport: c.transport}).Do(req)
	if err != nil {
		return lo, hi, mapError(ctx, http.MethodGet, c.root+"/", err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if resp.StatusCode != http.StatusOK {
		return lo, hi, &Error{Method: http.MethodGet, URL: c.root + "/", Status: resp.StatusCode, Message: faultString(body)}
	}
	var doc struct {
		Default struct {
			MinVersion string `json:"min_version"`
			Version    string `json:"version"`
		} `json:"default_version"`
	}
	var ok1, ok2 bool
	if json.Unmarshal(body, &doc) == nil {
		lo, ok1 = web.ParseVersion(doc.Default.MinVersion, web.Version{})
		hi, ok2 = web.ParseVersion(doc.Default.Version, web.Version{})
	}
	if !ok1 || !ok2 {
		return lo, hi, &Error{Method: http.MethodGet, URL: c.root + "/", Status: resp.StatusCode,
			Message: "not an Ironic version document"}
	}
	c.mu.Lock()
	c.irMin, c.irMax, c.haveVR = lo, hi, true
	c.mu.Unlock()
	return lo, hi, nil
}

// Microversion is the microversion of the client's requests: the pinned
// one, or the highest Ironic and metalloc both support. It fails when
// Ironic cannot be reached yet, or supports nothing from
// MinMicroversion on.
func (c *Client) Microversion(ctx context.Context) (web.Version, error) {
	sc, err := c.ServiceClient(ctx)
	if err != nil {
		return web.Version{}, err
	}
	v, _ := web.ParseVersion(sc.Microversion, web.Version{})
	return v, nil
}

// ServiceClient returns gophercloud's bare-metal client for Ironic,
// authenticated as configured, with the microversion set (see
// Microversion): for the requests this package has no method for. The
// first call reads Ironic's versions and, with AuthKeystone, gets a token.
func (c *Client) ServiceClient(ctx context.Context) (*gophercloud.ServiceClient, error) {
	c.mu.Lock()
	sc := c.sc
	c.mu.Unlock()
	if sc != nil {
		return sc, nil
	}
	lo, hi, err := c.Versions(ctx)
	if err != nil {
		return nil, err
	}
	mv := hi
	if web.IronicMaxVersion.Less(mv) {
		mv = web.IronicMaxVersion
	}
	if c.pinned != nil {
		mv = *c.pinned
	}
	if mv.Less(MinMicroversion) || mv.Less(lo) || hi.Less(mv) {
		return nil, fmt.Errorf("ironic at %s supports microversions %s to %s; metalloc would use %s and needs one from %s to %s",
			c.root, lo, hi, mv, MinMicroversion, web.IronicMaxVersion)
	}
	if sc, err = c.newServiceClient(ctx); err != nil {
		return nil, err
	}
	sc.Microversion = mv.String()
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.sc == nil {
		c.sc, c.mv = sc, mv
	}
	return c.sc, nil
}

// newServiceClient builds gophercloud's client for the configured
// authentication (with AuthKeystone it authenticates now, and again
// whenever Ironic answers 401).
func (c *Client) newServiceClient(ctx context.Context) (*gophercloud.ServiceClient, error) {
	hc := http.Client{Transport: c.transport, Timeout: c.opts.Timeout}
	endpoint := c.root + "/v1/"
	switch c.opts.AuthStrategy {
	case AuthHTTPBasic:
		sc, err := httpbasic.NewBareMetalHTTPBasic(httpbasic.EndpointOpts{IronicEndpoint: endpoint,
			IronicUser: c.opts.Username, IronicUserPassword: c.opts.Password})
		if err != nil {
			return nil, err
		}
		sc.HTTPClient = hc
		return sc, nil
	case AuthKeystone:
		k := c.opts.Keystone
		base := strings.TrimRight(k.AuthURL, "/")
		if !strings.HasSuffix(base, "/v3") {
			base += "/v3"
		}
		pc, err := openstack.NewClient(base + "/")
		if err != nil {
			return nil, fmt.Errorf("keystone.auth_url: %w", err)
		}
		pc.HTTPClient = hc
		ao := gophercloud.AuthOptions{IdentityEndpoint: base + "/", Username: k.Username, Password: k.Password,
			DomainName: k.UserDomainName, AllowReauth: true}
		if ao.DomainName == "" {
			ao.DomainName = "Default"
		}
		if c.opts.KeystoneScope == "project" {
			dom := k.ProjectDomainName
			if dom == "" {
				dom = "Default"
			}
			ao.Scope = &gophercloud.AuthScope{ProjectName: k.ProjectName, DomainName: dom}
		} else {
			ao.Scope = &gophercloud.AuthScope{System: true}
		}
		actx, cancel := context.WithTimeout(ctx, c.opts.Timeout)
		defer cancel()
		if err := openstack.AuthenticateV3(actx, pc, &ao, gophercloud.EndpointOpts{}); err != nil {
			return nil, mapError(actx, http.MethodPost, base+"/auth/tokens", err)
		}
		return &gophercloud.ServiceClient{ProviderClient: pc, Endpoint: endpoint, Type: "baremetal"}, nil
	default:
		sc, err := noauth.NewBareMetalNoAuth(noauth.EndpointOpts{IronicEndpoint: endpoint})
		if err != nil {
			return nil, err
		}
		sc.HTTPClient = hc
		return sc, nil
	}
}

// get sends GET path (under /v1/) and decodes the JSON answer into out.
func (c *Client) get(ctx context.Context, path string, out any) error {
	return c.call(ctx, http.MethodGet, path, func(ctx context.Context, sc *gophercloud.ServiceClient) error {
		_, err := sc.Get(ctx, sc.Endpoint+path, out, &gophercloud.RequestOpts{OkCodes: []int{http.StatusOK}})
		return err
	})
}

// nodeFields are the node fields the mirror reads (GET /v1/nodes?fields=),
// each with the microversion that introduced it. A node list cannot ask
// for allocation_uuid (Ironic 21.4 answers 500: it is no column of its
// nodes table); ListAllocations gives it instead.
var nodeFields = []struct {
	name  string
	since int
}{
	{"uuid", 1}, {"name", 5}, {"driver", 1}, {"resource_class", 21}, {"traits", 37},
	{"provision_state", 1}, {"target_provision_state", 1}, {"power_state", 1}, {"target_power_state", 1},
	{"maintenance", 1}, {"maintenance_reason", 1}, {"fault", 42}, {"last_error", 1},
	{"owner", 50}, {"lessee", 65}, {"instance_uuid", 1}, {"allocation_uuid", 52},
	{"conductor_group", 46}, {"properties", 1}, {"extra", 1}, {"description", 51},
	{"protected", 48}, {"retired", 61}, {"shard", 82},
}

// fields is the fields query value for microversion v, of a list or of
// one node.
func fields(v web.Version, list bool) string {
	var out []string
	for _, f := range nodeFields {
		if v.AtLeast(1, f.since) && !(list && f.name == "allocation_uuid") {
			out = append(out, f.name)
		}
	}
	return strings.Join(out, ",")
}

// NodePage is one page of Ironic's node list as the mirror reads it.
type NodePage struct {
	// Nodes are Ironic's node objects as sent (the fields of nodeFields),
	// UUIDs their uuids in the same order.
	Nodes []json.RawMessage
	UUIDs []string
	// More is true when Ironic says there is a next page (it has a "next"
	// link); the next page starts after the last of UUIDs.
	More bool
}

// ListNodes reads one page of Ironic's nodes, after marker (a node uuid;
// "" for the first page), at most limit (Ironic also caps it at its
// [api]max_limit), in Ironic's order (by id).
func (c *Client) ListNodes(ctx context.Context, marker string, limit int) (NodePage, error) {
	mv, err := c.Microversion(ctx)
	if err != nil {
		return NodePage{}, err
	}
	q := url.Values{"fields": {fields(mv, true)}, "limit": {strconv.Itoa(limit)}}
	if marker != "" {
		q.Set("marker", marker)
	}
	var out struct {
		Nodes []json.RawMessage `json:"nodes"`
		Next  string            `json:"next"`
	}
	if err := c.get(ctx, "nodes?"+q.Encode(), &out); err != nil {
		return NodePage{}, err
	}
	p := NodePage{Nodes: out.Nodes, More: out.Next != "" && len(out.Nodes) > 0}
	for _, raw := range out.Nodes {
		var n struct {
			UUID string `json:"uuid"`
		}
		if err := json.Unmarshal(raw, &n); err != nil || n.UUID == "" {
			return NodePage{}, fmt.Errorf("ironic: a node of the list has no uuid: %.200s", raw)
		}
		p.UUIDs = append(p.UUIDs, n.UUID)
	}
	return p, nil
}

// GetNode reads node ident (uuid or name) with the mirror's fields; a
// missing node is an *Error with Status 404 (IsNotFound).
func (c *Client) GetNode(ctx context.Context, ident string) (json.RawMessage, error) {
	mv, err := c.Microversion(ctx)
	if err != nil {
		return nil, err
	}
	var out json.RawMessage
	err = c.get(ctx, "nodes/"+url.PathEscape(ident)+"?fields="+url.QueryEscape(fields(mv, false)), &out)
	return out, err
}

// Authorize sets metalloc's own credentials for Ironic in h
// (ironic.auth_strategy): nothing for noauth, Authorization: Basic with
// ironic.username and ironic.password for http_basic, the service user's
// X-Auth-Token for keystone (the token gophercloud keeps and renews; the
// first call authenticates, and fails as ServiceClient does while Ironic
// or Keystone cannot be reached). The front uses it for requests it
// proxies with ForwardService.
func (c *Client) Authorize(ctx context.Context, h http.Header) error {
	switch c.opts.AuthStrategy {
	case AuthHTTPBasic:
		h.Set("Authorization", "Basic "+base64.StdEncoding.EncodeToString([]byte(c.opts.Username+":"+c.opts.Password)))
	case AuthKeystone:
		sc, err := c.ServiceClient(ctx)
		if err != nil {
			return err
		}
		h.Set("X-Auth-Token", sc.ProviderClient.Token())
	}
	return nil
}
