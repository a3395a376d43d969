package ironic

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"

	"github.com/google/uuid"
	"github.com/labstack/echo/v4"
	"go.uber.org/zap"

	"github.com/metalloc/metalloc/web"
)

// maxPeekBody bounds the body the front reads of a request it may send to
// Ironic first (larger: left to metalloc's handler, which refuses it).
const maxPeekBody = 1 << 20

// allocationRequest says whether an owned request about allocations must
// go to Ironic, first or instead of metalloc's handler (Front.Middleware):
//
//   - POST /v1/allocations with a node (Ironic's backfill of an
//     allocation for a node already deployed) is Ironic's alone: proxied;
//   - a request for one allocation (/v1/allocations/{ident}) or a node's
//     (/v1/nodes/{node}/allocation) metalloc does not have (made directly
//     in Ironic, or backfilled) is proxied;
//   - DELETE and PATCH of one metalloc has go to Ironic first, with the
//     credentials FrontOptions.Forwarding gives (Ironic's own checks: its policy, a node active
//     or moving), then, when Ironic answered 2xx or 404 (its copy not made
//     yet), to metalloc's handler; any other answer of Ironic's is the
//     client's, and Ironic unreachable is 503. So a deletion through
//     metalloc leaves neither system holding the node when it returns.
//
// It returns handled true when it answered the client itself.
func (f *Front) allocationRequest(c echo.Context) (handled bool, err error) {
	req := c.Request()
	ident, node, ok := allocationTarget(req.URL.Path)
	switch {
	case req.Method == http.MethodPost && strings.TrimRight(req.URL.Path, "/") == "/v1/allocations":
		body, ok := peekBody(req)
		var doc struct {
			Node any `json:"node"`
		}
		if ok && json.Unmarshal(body, &doc) == nil && doc.Node != nil && doc.Node != "" {
			return true, f.serve(c)
		}
		return false, nil
	case !ok || f.opts.Mirror == nil:
		return false, nil
	}
	known, err := f.knownAllocation(req.Context(), ident, node)
	if err != nil {
		web.Logger(c).Warn("looking the allocation up; metalloc answers", zap.Error(err))
		return false, nil
	}
	if !known {
		return true, f.serve(c)
	}
	if req.Method != http.MethodDelete && req.Method != http.MethodPatch {
		return false, nil
	}
	body, ok := peekBody(req)
	if !ok {
		return false, nil
	}
	resp, answer, err := f.ironicFirst(c, body)
	if err != nil {
		f.unavailable(c.Response(), req, err)
		return true, nil
	}
	if resp.StatusCode/100 == 2 || resp.StatusCode == http.StatusNotFound {
		return false, nil
	}
	h := c.Response().Header()
	for k, vs := range resp.Header {
		if k != web.RequestIDHeader && k != "Content-Length" && !hopByHop(k) {
			h[k] = vs
		}
	}
	c.Response().WriteHeader(resp.StatusCode)
	_, err = c.Response().Write(answer)
	return true, err
}

// allocationTarget returns the allocation a request is about:
// /v1/allocations/{ident} (not the event stream), or node's for
// /v1/nodes/{node}/allocation.
func allocationTarget(path string) (ident string, node, ok bool) {
	seg := strings.Split(strings.Trim(path, "/"), "/")
	switch {
	case len(seg) == 3 && seg[0] == "v1" && seg[1] == "allocations" && seg[2] != "events" && seg[2] != "":
		return seg[2], false, true
	case len(seg) == 4 && seg[0] == "v1" && seg[1] == "nodes" && seg[3] == "allocation":
		return seg[2], true, true
	}
	return "", false, false
}

// peekBody reads req's body (up to maxPeekBody) and puts it back; ok is
// false when it is larger or unreadable.
func peekBody(req *http.Request) (body []byte, ok bool) {
	if req.Body == nil || req.Body == http.NoBody {
		return nil, true
	}
	body, err := io.ReadAll(io.LimitReader(req.Body, maxPeekBody+1))
	req.Body = io.NopCloser(io.MultiReader(bytes.NewReader(body), req.Body))
	return body, err == nil && len(body) <= maxPeekBody
}

// ironicFirst sends the request as it came (method, path, query, body,
// the client's headers and credentials, X-Forwarded-*) to Ironic and
// returns its answer, read; an error when Ironic could not be reached or
// did not answer within the client's timeout.
func (f *Front) ironicFirst(c echo.Context, body []byte) (*http.Response, []byte, error) {
	req := c.Request()
	ctx, cancel := context.WithTimeout(req.Context(), f.opts.Client.Timeout())
	defer cancel()
	out, err := http.NewRequestWithContext(ctx, req.Method, strings.TrimRight(f.target.String(), "/")+req.URL.RequestURI(),
		bytes.NewReader(body))
	if err != nil {
		return nil, nil, err
	}
	for k, vs := range req.Header {
		if !hopByHop(k) && k != "Content-Length" {
			out.Header[k] = vs
		}
	}
	f.forwarded(req, out.Header)
	if id := web.RequestIDFrom(req.Context()); id != "" && out.Header.Get(web.RequestIDHeader) == "" {
		out.Header.Set(web.RequestIDHeader, id)
	}
	resp, err := (&http.Client{Transport: f.opts.Client.Transport()}).Do(out)
	if err != nil {
		return nil, nil, err
	}
	defer resp.Body.Close()
	answer, err := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	if err != nil {
		return nil, nil, err
	}
	web.Logger(c).Debug("sent to Ironic first", zap.String("method", req.Method), zap.Int("status", resp.StatusCode))
	return resp, answer, nil
}

// hopByHop reports whether header k is a hop-by-hop header (not sent on).
func hopByHop(k string) bool {
	switch http.CanonicalHeaderKey(k) {
	case "Connection", "Keep-Alive", "Proxy-Authenticate", "Proxy-Authorization", "Te", "Trailer",
		"Transfer-Encoding", "Upgrade", "Host":
		return true
	}
	return false
}

// knownAllocation is Mirror.knownAllocation, first asking
// FrontOptions.Known for an allocation named by its uuid.
func (f *Front) knownAllocation(ctx context.Context, ident string, node bool) (bool, error) {
	if !node && f.opts.Known != nil {
		if u, err := uuid.Parse(ident); err == nil && f.opts.Known(u) {
			return true, nil
		}
	}
	return f.opts.Mirror.knownAllocation(ctx, ident, node)
}

// knownAllocation reports whether metalloc has allocation ident (a uuid or
// a name), or, with node, holds node ident for one of its allocations.
func (m *Mirror) knownAllocation(ctx context.Context, ident string, node bool) (bool, error) {
	u, err := uuid.Parse(ident)
	isUUID := err == nil
	switch {
	case node && isUUID:
		return m.q.NodeAllocationByUUIDKnown(ctx, u)
	case node:
		return m.q.NodeAllocationByNameKnown(ctx, ident)
	case isUUID:
		return m.q.AllocationByUUIDKnown(ctx, u)
	}
	return m.q.AllocationByNameKnown(ctx, ident)
}
