package ironic

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"mime"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/labstack/echo/v4"
	"go.uber.org/zap"

	"github.com/metalloc/metalloc/auth"
	"github.com/metalloc/metalloc/web"
)

// Owned reports whether metalloc-api serves a request for path itself in
// front of Ironic; every other request goes to Ironic (Front). metalloc
// owns its allocations (/v1/allocations, and a node's allocation at
// /v1/nodes/{node}/allocation), its extensions (/v1/allocation_groups,
// /v1/topology, /v1/leases, /v1/ui/...), Blazar's lease API
// (/reservation/..., package lease/blazar), its operator page (/ui/) and
// metrics (/metrics); / and /v1 are answered for both (Front). Everything else,
// nodes included, is Ironic's, whatever metalloc serves when standalone.
func Owned(path string) bool {
	p := strings.TrimRight(path, "/")
	if p == "" || p == "/v1" || p == "/metrics" || p == "/ui" || strings.HasPrefix(p, "/ui/") ||
		p == "/reservation" || strings.HasPrefix(p, "/reservation/") {
		return true
	}
	for _, prefix := range []string{"/v1/allocations", "/v1/allocation_groups", "/v1/topology", "/v1/leases", "/v1/ui"} {
		if p == prefix || strings.HasPrefix(p, prefix+"/") {
			return true
		}
	}
	seg := strings.Split(strings.TrimPrefix(p, "/"), "/")
	return len(seg) == 4 && seg[0] == "v1" && seg[1] == "nodes" && seg[3] == "allocation"
}

// nodeOf returns the node a request for path is about: ident for
// /v1/nodes/{ident}[/...], "" with ok for /v1/nodes itself.
func nodeOf(path string) (ident string, ok bool) {
	seg := strings.Split(strings.Trim(path, "/"), "/")
	if len(seg) < 2 || seg[0] != "v1" || seg[1] != "nodes" {
		return "", false
	}
	if len(seg) == 2 {
		return "", true
	}
	if seg[2] == "detail" && len(seg) == 3 {
		return "", false
	}
	return seg[2], true
}

// FrontOptions configures a Front.
type FrontOptions struct {
	// Client is the Ironic behind metalloc (its root, TLS, timeout and
	// microversion range). Required.
	Client *Client
	// Mirror, when set, is refreshed after every change proxied for a
	// node (Mirror.Refresh).
	Mirror *Mirror
	// PublicEndpoint is api.public_endpoint: links in Ironic's answers
	// name it (X-Forwarded-Host, -Proto, -Prefix), and the version
	// documents metalloc answers when Ironic cannot.
	PublicEndpoint string
	// Resources are the top-level resources of metalloc's own /v1
	// document, answered while Ironic cannot be reached.
	Resources []string
	// Metrics, when set, counts the refreshes.
	Metrics *Metrics
	// Forwarding is what proxied requests carry to Ironic as credentials
	// (ForwardingFor metalloc-api's api.auth_strategy).
	Forwarding Forwarding
	// Known, when set, says without the database that metalloc has
	// allocation u (metalloc-api passes its allocation hub's cache,
	// allocation.Hub.Has): a request for one it knows is metalloc's
	// without the lookup allocationRequest makes otherwise (one query per
	// poll of a client waiting for its allocation). False: looked up.
	Known func(u uuid.UUID) bool
	// FollowFor is how long a node Ironic is still moving (a target
	// provision or power state) after a proxied change is read again,
	// with back-off, until it arrives (default 2 min).
	FollowFor time.Duration
	Log       *zap.Logger
}

// Forwarding is what a request metalloc-api proxies to Ironic carries as
// credentials, decided by metalloc's own authentication (api.auth_strategy,
// ForwardingFor). Every proxied request has passed metalloc's
// authentication first (but Ironic's own public routes, see
// PublicRoute); this decides only what Ironic then sees.
type Forwarding int

const (
	// ForwardAsSent (noauth): the client's headers as sent. metalloc
	// checks nothing and grants nothing: Ironic authenticates the
	// request itself, with whatever credentials the client gave.
	ForwardAsSent Forwarding = iota
	// ForwardToken (keystone): the client's X-Auth-Token, which metalloc
	// has validated; Ironic validates it again and applies its own access
	// rules and project scoping to the caller. An Authorization header is
	// removed.
	ForwardToken
	// ForwardService (http_basic): metalloc's own Ironic credentials
	// (ironic.auth_strategy: nothing, ironic.username and .password, or
	// the keystone service user's token) instead of the client's: the
	// client's password is metalloc's and never leaves it
	// (Authorization and X-Auth-Token are removed). Ironic sees the
	// request as metalloc's service user's; the caller is named in
	// metalloc's log line for the request, whose request id Ironic logs
	// as the global request id. Requests to Ironic's public routes carry
	// no credentials.
	ForwardService
)

// ForwardingFor is the Forwarding of metalloc-api's api.auth_strategy:
// keystone forwards the client's token, http_basic metalloc's own
// credentials, noauth (and anything else) the request as sent.
func ForwardingFor(strategy string) Forwarding {
	switch strategy {
	case auth.StrategyKeystone:
		return ForwardToken
	case auth.StrategyHTTPBasic:
		return ForwardService
	}
	return ForwardAsSent
}

// PublicRoute reports whether path (decoded, trailing slash removed) is
// one of Ironic's public routes that metalloc forwards without
// authentication in front of Ironic: the ramdisk agent's /v1/lookup and
// /v1/heartbeat/{node}, which Ironic serves to agents without
// credentials (its [api] public routes; the agent proves itself with
// its agent token, checked by Ironic). metalloc's own public routes (/,
// /v1, /metrics) are web.IronicPublicRoute's.
func PublicRoute(path string) bool {
	if path == "/v1/lookup" {
		return true
	}
	node, ok := strings.CutPrefix(path, "/v1/heartbeat/")
	if !ok || node == "" {
		return false
	}
	for _, r := range node {
		if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-') {
			return false
		}
	}
	return true
}

// Front is metalloc-api's face in front of Ironic: a route-level switch
// (Middleware) sending every request metalloc does not own (Owned) to
// Ironic unchanged (httputil.ReverseProxy: method, path, query, body, the
// client's credentials and headers, plus X-Forwarded-* so that Ironic's
// links name metalloc), answering / and /v1 for the pair, and checking
// every /v1 request's microversion against the pair's range (the
// intersection of metalloc's and Ironic's). An Ironic that cannot be
// reached or does not answer within the client's timeout gives 503 in
// Ironic's error format, with Retry-After; nothing else changes. After a change proxied
// for a node it refreshes the node in the mirror before answering, and
// reads it again while Ironic is still moving it.
type Front struct {
	opts   FrontOptions
	target *url.URL
	proxy  *httputil.ReverseProxy
	log    *zap.Logger

	ctx       context.Context // ends at Close: follow-ups stop
	cancel    context.CancelFunc
	wg        sync.WaitGroup
	following sync.Map // node ident → struct{}

	vmu     sync.Mutex
	lastTry time.Time // last attempt to read Ironic's range while unknown
	probing bool      // an attempt is under way

	dmu  sync.Mutex
	docs map[string]cachedDoc // Ironic's version documents, by path, base URL and microversion

	self atomic.Pointer[string] // the base URL Ironic's root document names, when not metalloc's
}

// cachedDoc is a version document of Ironic's as last read.
type cachedDoc struct {
	doc map[string]any
	at  time.Time
}

// docTTL is how long Ironic's version documents are served from memory
// (clients read them at every session start).
const docTTL = time.Minute

// proxyState travels with a proxied request to ModifyResponse.
type proxyState struct {
	node   string // the node changed (uuid when the mirror knew it)
	create bool   // POST /v1/nodes: the node's uuid is in the answer
	public string // metalloc's base URL as the client reached it (links)
	log    *zap.Logger
}

type proxyStateKey struct{}

// NewFront returns the front for opts.Client's Ironic.
func NewFront(opts FrontOptions) (*Front, error) {
	if opts.Client == nil {
		return nil, errors.New("ironic: NewFront needs a Client")
	}
	target, err := url.Parse(opts.Client.Root())
	if err != nil {
		return nil, err
	}
	if opts.FollowFor <= 0 {
		opts.FollowFor = 2 * time.Minute
	}
	if opts.Log == nil {
		opts.Log = zap.NewNop()
	}
	f := &Front{opts: opts, target: target, log: opts.Log}
	f.ctx, f.cancel = context.WithCancel(context.Background())
	f.proxy = &httputil.ReverseProxy{
		Rewrite:        f.rewrite,
		Transport:      opts.Client.Transport(),
		ModifyResponse: f.modifyResponse,
		ErrorHandler:   f.unavailable,
		ErrorLog:       zap.NewStdLog(opts.Log),
	}
	return f, nil
}

// SetMetrics makes the front count its refreshes in m (call it before
// serving).
func (f *Front) SetMetrics(m *Metrics) { f.opts.Metrics = m }

// Close stops the follow-up reads of moving nodes and waits for them.
func (f *Front) Close() {
	f.cancel()
	f.wg.Wait()
}

// Versions is the microversion range metalloc-api answers for in front of
// Ironic: the intersection of metalloc's and Ironic's. Until Ironic has
// answered once it is metalloc's own, and Ironic is asked in the
// background (at most every 5 s): a request never waits for it.
func (f *Front) Versions(ctx context.Context) (lo, hi web.Version) {
	lo, hi = web.IronicMinVersion, web.IronicMaxVersion
	c := f.opts.Client
	c.mu.Lock()
	known, ilo, ihi := c.haveVR, c.irMin, c.irMax
	c.mu.Unlock()
	if !known {
		f.vmu.Lock()
		if !f.probing && time.Since(f.lastTry) >= 5*time.Second {
			f.probing, f.lastTry = true, time.Now()
			f.wg.Add(1)
			go func() {
				defer f.wg.Done()
				_, _, _ = c.Versions(f.ctx)
				f.vmu.Lock()
				f.probing = false
				f.vmu.Unlock()
			}()
		}
		f.vmu.Unlock()
		return lo, hi
	}
	if lo.Less(ilo) {
		lo = ilo
	}
	if ihi.Less(hi) {
		hi = ihi
	}
	return lo, hi
}

// Middleware is the route-level switch: requests metalloc owns go on to
// its handlers (with the pair's microversion checks), / and /v1 are
// answered for the pair, everything else is proxied to Ironic. Put it
// after CanonicalPaths, the body limit and authentication: every request
// it proxies has passed metalloc's authentication (but Ironic's public
// routes, PublicRoute), and carries the credentials FrontOptions.Forwarding
// says.
func (f *Front) Middleware() echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			req := c.Request()
			path := req.URL.Path
			if !strings.HasPrefix(path, "/v1") {
				if strings.TrimRight(path, "/") == "" && (req.Method == http.MethodGet || req.Method == http.MethodHead) {
					return f.versionDoc(c, "/")
				}
				if Owned(path) {
					return next(c)
				}
				return f.serve(c)
			}
			lo, hi := f.Versions(req.Context())
			h := c.Response().Header()
			c.Response().Before(func() {
				h.Set(web.IronicMinVersionHeader, lo.String())
				h.Set(web.IronicMaxVersionHeader, hi.String())
			})
			raw := req.Header.Get(web.IronicVersionHeader)
			v, err := web.NegotiateIronicVersion(raw, lo, hi)
			if err != nil {
				return err
			}
			if strings.EqualFold(raw, "latest") {
				req.Header.Set(web.IronicVersionHeader, v.String())
			}
			if strings.TrimRight(path, "/") == "/v1" && (req.Method == http.MethodGet || req.Method == http.MethodHead) {
				return f.versionDoc(c, "/v1")
			}
			if Owned(path) {
				if handled, err := f.allocationRequest(c); handled {
					return err
				}
				return next(c)
			}
			return f.serve(c)
		}
	}
}

// serve proxies the request to Ironic.
func (f *Front) serve(c echo.Context) error {
	req := c.Request()
	ctx, cancel := context.WithTimeout(req.Context(), f.opts.Client.Timeout())
	defer cancel()
	st := &proxyState{log: web.Logger(c), public: f.publicBase(req)}
	// Credentials, as metalloc's authentication decided (Forwarding).
	// Expect: 100-continue is not forwarded: the body is already read
	// (the body limit), and Ironic's 100 must not become the answer.
	req.Header.Del("Expect")
	switch f.opts.Forwarding {
	case ForwardToken:
		req.Header.Del("Authorization")
	case ForwardService:
		req.Header.Del("Authorization")
		req.Header.Del("X-Auth-Token")
		if creds, authed := auth.FromContext(req.Context()); authed {
			if err := f.opts.Client.Authorize(ctx, req.Header); err != nil {
				f.unavailable(c.Response(), req.WithContext(context.WithValue(ctx, proxyStateKey{}, st)), err)
				return nil
			}
			if req.Method != http.MethodGet && req.Method != http.MethodHead {
				st.log.Info("proxied to Ironic with metalloc's credentials", zap.String("user", creds.UserName),
					zap.String("method", req.Method), zap.String("path", req.URL.Path))
			}
		}
	}
	switch req.Method {
	case http.MethodGet, http.MethodHead, http.MethodOptions:
	default:
		if ident, ok := nodeOf(req.URL.Path); ok && f.opts.Mirror != nil {
			if ident == "" {
				st.create = req.Method == http.MethodPost
			} else {
				// Resolved now: the change may rename or delete it.
				st.node = ident
				if u, found, err := f.opts.Mirror.Resolve(ctx, ident); err == nil && found {
					st.node = u.String()
				}
			}
		}
	}
	// metalloc's request id answers, as for its own routes; Ironic gets it
	// as the global request id (in its logs beside its own), unless the
	// client sent one.
	if id := web.RequestIDFrom(req.Context()); id != "" && req.Header.Get(web.RequestIDHeader) == "" {
		req.Header.Set(web.RequestIDHeader, id)
	}
	c.SetPath("ironic:proxy")
	f.proxy.ServeHTTP(informational{c.Response()}, req.WithContext(context.WithValue(ctx, proxyStateKey{}, st)))
	return nil
}

// informational is the response writer of proxied requests: an
// informational status (1xx but 101) goes to the client without
// committing echo's response, whose final status would otherwise be lost
// (echo writes a committed response's later status nowhere: the client
// got 200 for Ironic's 400 after a 100 Continue).
type informational struct{ *echo.Response }

// WriteHeader implements http.ResponseWriter.
func (w informational) WriteHeader(code int) {
	if code >= 100 && code < 200 && code != http.StatusSwitchingProtocols {
		w.Response.Writer.WriteHeader(code)
		return
	}
	w.Response.WriteHeader(code)
}

// rewrite sends the request to Ironic's root, keeping its path and query,
// with X-Forwarded-* naming metalloc (forwarded).
func (f *Front) rewrite(pr *httputil.ProxyRequest) {
	pr.SetURL(f.target)
	pr.Out.Host = ""
	f.forwarded(pr.In, pr.Out.Header)
}

// publicBase is metalloc's base URL as the client reached it
// (scheme://host[/prefix], no trailing slash; see publicParts).
func (f *Front) publicBase(in *http.Request) string {
	host, proto, prefix := f.publicParts(in)
	return proto + "://" + host + prefix
}

// publicParts names metalloc as the client reached it: api.public_endpoint
// when set; else what a proxy in front of metalloc said; else the
// request's own host and scheme.
func (f *Front) publicParts(in *http.Request) (host, proto, prefix string) {
	host, proto = in.Host, "http"
	if in.TLS != nil {
		proto = "https"
	}
	if v := in.Header.Get("X-Forwarded-Host"); v != "" {
		host = v
	}
	if v := in.Header.Get("X-Forwarded-Proto"); v != "" {
		proto = v
	}
	if pe := f.opts.PublicEndpoint; pe != "" {
		if u, err := url.Parse(pe); err == nil && u.Host != "" {
			host, proto, prefix = u.Host, u.Scheme, strings.TrimRight(u.Path, "/")
		}
	}
	return host, proto, prefix
}

// forwarded sets X-Forwarded-For, -Host, -Proto (and -Prefix) in out for
// request in, naming metalloc as the client reached it (publicParts), so
// that an Ironic that reads them (enable_proxy_headers_parsing) names
// metalloc in its links.
func (f *Front) forwarded(in *http.Request, out http.Header) {
	host, proto, prefix := f.publicParts(in)
	if ip, _, err := net.SplitHostPort(in.RemoteAddr); err == nil {
		if prior := in.Header.Values("X-Forwarded-For"); len(prior) > 0 {
			ip = strings.Join(prior, ", ") + ", " + ip
		}
		out.Set("X-Forwarded-For", ip)
	}
	out.Set("X-Forwarded-Host", host)
	out.Set("X-Forwarded-Proto", proto)
	if prefix != "" {
		out.Set("X-Forwarded-Prefix", prefix)
	} else {
		out.Del("X-Forwarded-Prefix")
	}
}

// modifyResponse refreshes the node a successful change was about, before
// the answer goes to the client.
func (f *Front) modifyResponse(resp *http.Response) error {
	st, _ := resp.Request.Context().Value(proxyStateKey{}).(*proxyState)
	if id := resp.Header.Get(web.RequestIDHeader); id != "" && st != nil {
		st.log.Debug("proxied to Ironic", zap.String("ironic_request_id", id), zap.Int("status", resp.StatusCode))
	}
	resp.Header.Del(web.RequestIDHeader) // one id in the answer: metalloc's
	if st != nil {
		if err := f.rewriteLinks(resp, st.public); err != nil {
			return err
		}
	}
	if st == nil || resp.StatusCode/100 != 2 || (st.node == "" && !st.create) {
		return nil
	}
	node := st.node
	if st.create {
		body, err := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
		resp.Body.Close()
		resp.Body = io.NopCloser(bytes.NewReader(body))
		if err != nil {
			return nil
		}
		var created struct {
			UUID string `json:"uuid"`
		}
		if json.Unmarshal(body, &created) != nil || created.UUID == "" {
			return nil
		}
		node = created.UUID
	}
	f.refresh(resp.Request.Context(), node, st.log)
	return nil
}

// refresh mirrors node now, and follows it while Ironic moves it.
func (f *Front) refresh(ctx context.Context, node string, log *zap.Logger) {
	moving, err := f.opts.Mirror.Refresh(ctx, node)
	f.opts.Metrics.refreshed(err == nil)
	if err != nil {
		log.Warn("refreshing the node in the mirror after a proxied change failed; the next full sync corrects it",
			zap.String("node", node), zap.Error(err))
		return
	}
	if moving {
		f.follow(node)
	}
}

// follow reads node again, with back-off from 250 ms to 5 s, until Ironic
// no longer moves it, for at most FollowFor; one follow-up per node.
func (f *Front) follow(node string) {
	if _, busy := f.following.LoadOrStore(node, struct{}{}); busy {
		return
	}
	f.wg.Add(1)
	go func() {
		defer f.wg.Done()
		defer f.following.Delete(node)
		deadline := time.Now().Add(f.opts.FollowFor)
		delay := 250 * time.Millisecond
		for time.Now().Before(deadline) {
			select {
			case <-f.ctx.Done():
				return
			case <-time.After(delay):
			}
			ctx, cancel := context.WithTimeout(f.ctx, f.opts.Client.Timeout())
			moving, err := f.opts.Mirror.Refresh(ctx, node)
			cancel()
			f.opts.Metrics.refreshed(err == nil)
			if err == nil && !moving {
				return
			}
			delay = min(2*delay, 5*time.Second)
		}
	}()
}

// unavailable answers a request Ironic did not answer: 503 in Ironic's
// error format, with Retry-After: web.UnavailableRetryAfter (seconds).
func (f *Front) unavailable(w http.ResponseWriter, r *http.Request, err error) {
	reason := "no answer"
	var ie *Error
	if errors.As(mapError(context.Background(), r.Method, r.URL.String(), err), &ie) {
		reason = ie.Message
	}
	if errors.Is(err, context.DeadlineExceeded) {
		reason = "no answer within " + f.opts.Client.Timeout().String()
	}
	if st, _ := r.Context().Value(proxyStateKey{}).(*proxyState); st != nil {
		st.log.Warn("Ironic unavailable", zap.String("method", r.Method), zap.String("path", r.URL.Path), zap.Error(err))
	}
	msg := "The bare metal service (Ironic) behind metalloc is unavailable (" + reason + "); retry later."
	body, _ := json.Marshal(web.IronicErrorBody(http.StatusServiceUnavailable, msg))
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Retry-After", strconv.Itoa(web.UnavailableRetryAfter))
	w.WriteHeader(http.StatusServiceUnavailable)
	if r.Method != http.MethodHead {
		_, _ = w.Write(body)
	}
}

// versionDoc answers GET / or /v1 for the pair: Ironic's document (its
// resources, its links naming metalloc; kept for docTTL) with the pair's
// range, or, when Ironic cannot be reached and none was read before,
// metalloc's own with the range last known.
func (f *Front) versionDoc(c echo.Context, which string) error {
	req := c.Request()
	lo, hi := f.Versions(req.Context())
	base := web.PublicURL(c, f.opts.PublicEndpoint)
	key := which + " " + base + " " + req.Header.Get(web.IronicVersionHeader) // /v1 lists resources by microversion
	f.dmu.Lock()
	cached, ok := f.docs[key]
	f.dmu.Unlock()
	if !ok || time.Since(cached.at) > docTTL {
		ctx, cancel := context.WithTimeout(req.Context(), min(f.opts.Client.Timeout(), 5*time.Second))
		doc, err := f.ironicDoc(ctx, c, which)
		cancel()
		switch {
		case err == nil:
			if which == "/" {
				f.learnSelfBase(doc, f.publicBase(req))
			}
			cached, ok = cachedDoc{doc: doc, at: time.Now()}, true
			f.dmu.Lock()
			if f.docs == nil {
				f.docs = map[string]cachedDoc{}
			}
			f.docs[key] = cached
			f.dmu.Unlock()
		case !ok:
			web.Logger(c).Debug("Ironic's version document unavailable; answering metalloc's", zap.Error(err))
			if which == "/" {
				return c.JSON(http.StatusOK, web.IronicRootDoc(base, lo, hi))
			}
			return c.JSON(http.StatusOK, web.IronicV1Doc(base, f.opts.Resources, lo, hi))
		}
	}
	doc := copyJSON(cached.doc).(map[string]any)
	setRange := func(v any) {
		if m, ok := v.(map[string]any); ok {
			m["min_version"], m["version"] = lo.String(), hi.String()
		}
	}
	if which == "/" {
		setRange(doc["default_version"])
		if vs, ok := doc["versions"].([]any); ok {
			for _, v := range vs {
				setRange(v)
			}
		}
	} else {
		setRange(doc["version"])
	}
	return c.JSON(http.StatusOK, doc)
}

// copyJSON deep-copies a decoded JSON value (maps and slices).
func copyJSON(v any) any {
	switch t := v.(type) {
	case map[string]any:
		m := make(map[string]any, len(t))
		for k, e := range t {
			m[k] = copyJSON(e)
		}
		return m
	case []any:
		l := make([]any, len(t))
		for i, e := range t {
			l[i] = copyJSON(e)
		}
		return l
	}
	return v
}

// ironicDoc reads Ironic's document at which, as the client would see it
// through metalloc (forwarded headers), at the request's microversion.
func (f *Front) ironicDoc(ctx context.Context, c echo.Context, which string) (map[string]any, error) {
	out, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimRight(f.target.String(), "/")+which, nil)
	if err != nil {
		return nil, err
	}
	f.forwarded(c.Request(), out.Header)
	out.Header.Set(web.IronicVersionHeader, c.Request().Header.Get(web.IronicVersionHeader))
	resp, err := (&http.Client{Transport: f.opts.Client.Transport()}).Do(out)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, &Error{Method: http.MethodGet, URL: out.URL.String(), Status: resp.StatusCode}
	}
	var doc map[string]any
	if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&doc); err != nil {
		return nil, err
	}
	return doc, nil
}

// rewriteLinks makes the links of a JSON answer of Ironic's name metalloc
// (public, its base URL as the client reached it) where they name Ironic:
// an Ironic that does not read X-Forwarded-* (enable_proxy_headers_parsing
// off, its default) builds its links from its own address, or from its
// [api]public_endpoint, and a client paginating with the "next" link would
// leave metalloc. The bases replaced are Ironic's root as metalloc
// reaches it (ironic.endpoint) and the base Ironic's root document names
// (selfBase), wherever a JSON string starts with one of them, and in
// Location. Nothing is read when no base differs from public.
func (f *Front) rewriteLinks(resp *http.Response, public string) error {
	var bases []string
	for _, b := range []string{strings.TrimRight(f.target.String(), "/"), f.selfBase()} {
		if b != "" && b != public && !slices.Contains(bases, b) {
			bases = append(bases, b)
		}
	}
	if len(bases) == 0 {
		return nil
	}
	if loc := resp.Header.Get("Location"); loc != "" {
		for _, b := range bases {
			if rest, ok := strings.CutPrefix(loc, b); ok && (rest == "" || rest[0] == '/' || rest[0] == '?') {
				resp.Header.Set("Location", public+rest)
				break
			}
		}
	}
	mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	if resp.Body == nil || resp.Header.Get("Content-Encoding") != "" || mt != "application/json" {
		return nil
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		return err
	}
	changed := false
	for _, b := range bases {
		for _, end := range []string{`/`, `?`, `"`} {
			old := []byte(`"` + b + end)
			if bytes.Contains(body, old) {
				body, changed = bytes.ReplaceAll(body, old, []byte(`"`+public+end)), true
			}
		}
	}
	resp.Body = io.NopCloser(bytes.NewReader(body))
	if changed {
		resp.ContentLength = int64(len(body))
		resp.Header.Set("Content-Length", strconv.Itoa(len(body)))
	}
	return nil
}

// selfBase is the base URL Ironic's root document names (its
// [api]public_endpoint, or its own address), as last read; "" before.
func (f *Front) selfBase() string {
	if p := f.self.Load(); p != nil {
		return *p
	}
	return ""
}

// learnSelfBase remembers the base URL of Ironic's root document doc
// (its default version's self link, less /v1/) unless it is public
// (metalloc's, as the client that asked for it reached it: Ironic reads
// X-Forwarded-*).
func (f *Front) learnSelfBase(doc map[string]any, public string) {
	dv, _ := doc["default_version"].(map[string]any)
	links, _ := dv["links"].([]any)
	for _, l := range links {
		m, _ := l.(map[string]any)
		href, _ := m["href"].(string)
		if rel, _ := m["rel"].(string); rel != "self" || href == "" {
			continue
		}
		base := strings.TrimSuffix(strings.TrimRight(href, "/"), "/v1")
		if u, err := url.Parse(base); err == nil && u.Host != "" && base != public {
			f.self.Store(&base)
		}
		return
	}
}
