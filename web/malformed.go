package web

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"sync"
)

// MalformedRenderer renders the answer to a request Go's HTTP server could
// not parse (status 400, 431 or 501, detail saying why): its content type
// and body, in the API's own error format.
type MalformedRenderer func(status int, detail string) (contentType string, body []byte)

// PlacementMalformed renders a malformed request's answer in Placement's
// error format ({"errors": [...]}).
func PlacementMalformed(status int, detail string) (string, []byte) {
	b, _ := json.Marshal(map[string]any{"errors": []any{map[string]any{
		"status": status, "title": http.StatusText(status), "detail": detail,
	}}})
	return "application/json", b
}

// IronicMalformed renders a malformed request's answer in Ironic's error
// format ({"error_message": ...}).
func IronicMalformed(status int, detail string) (string, []byte) {
	b, _ := json.Marshal(IronicErrorBody(status, detail))
	return "application/json", b
}

// Why Go's server refused a request, as the answer's detail. The first is
// Placement's own sentence for a Content-Length that is not a number.
const (
	badContentLength   = "content-length header must be an integer"
	malformedRequest   = "The request could not be parsed as HTTP/1.1."
	headersTooLarge    = "The request's header fields are too large."
	unsupportedEncoder = "The request's transfer encoding is not supported."
)

// malformedListener wraps each accepted connection in a malformedConn.
type malformedListener struct {
	net.Listener
	render MalformedRenderer
}

func (l malformedListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &malformedConn{Conn: c, render: l.render}, nil
}

// malformedConn replaces the bare text/plain answer net/http writes, before
// closing the connection, to a request it cannot parse (a Content-Length
// that is not a number, a malformed request line or header, headers too
// large, an unknown transfer encoding) by one in the API's error format, so
// that every answer a client gets is one the API documents. It keeps the
// last bytes read to tell why the request was refused.
type malformedConn struct {
	net.Conn
	render MalformedRenderer
	mu     sync.Mutex
	recent []byte // the last up to recentMax bytes read
}

const recentMax = 16 << 10

func (c *malformedConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if n > 0 {
		c.mu.Lock()
		c.recent = append(c.recent, p[:n]...)
		if len(c.recent) > recentMax {
			c.recent = append(c.recent[:0], c.recent[len(c.recent)-recentMax:]...)
		}
		c.mu.Unlock()
	}
	return n, err
}

// goErrorHeaders follows the status line of every answer net/http writes
// itself for a request it could not read; the answers of handlers always
// carry Date and never this order of headers.
var goErrorHeaders = []byte("\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\n\r\n")

func (c *malformedConn) Write(p []byte) (int, error) {
	status, ok := goErrorStatus(p)
	if !ok {
		return c.Conn.Write(p)
	}
	c.mu.Lock()
	detail := malformedDetail(status, c.recent)
	c.mu.Unlock()
	ct, body := c.render(status, detail)
	var b bytes.Buffer
	fmt.Fprintf(&b, "HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %d\r\nConnection: close\r\n\r\n",
		status, http.StatusText(status), ct, len(body))
	b.Write(body)
	if _, err := c.Conn.Write(b.Bytes()); err != nil {
		return 0, err
	}
	return len(p), nil
}

// goErrorStatus recognises net/http's own error answer and returns its
// status.
func goErrorStatus(p []byte) (int, bool) {
	if !bytes.HasPrefix(p, []byte("HTTP/1.1 ")) || len(p) < 12 {
		return 0, false
	}
	eol := bytes.Index(p, []byte("\r\n"))
	if eol < 0 || !bytes.HasPrefix(p[eol:], goErrorHeaders) {
		return 0, false
	}
	status, err := strconv.Atoi(string(p[9:12]))
	if err != nil || status < 400 {
		return 0, false
	}
	return status, true
}

// malformedDetail says why a request was refused with status, from the last
// bytes read: the last Content-Length header among them is the refused
// request's, if it has one (an earlier request's was a number, or the
// connection would have ended there).
func malformedDetail(status int, recent []byte) string {
	switch status {
	case http.StatusRequestHeaderFieldsTooLarge:
		return headersTooLarge
	case http.StatusNotImplemented:
		return unsupportedEncoder
	}
	var last []byte
	for _, line := range bytes.Split(recent, []byte("\r\n")) {
		name, value, ok := bytes.Cut(line, []byte(":"))
		if ok && bytes.EqualFold(bytes.TrimSpace(name), []byte("Content-Length")) {
			last = bytes.TrimSpace(value)
		}
	}
	if last != nil {
		if _, err := strconv.ParseUint(string(last), 10, 63); err != nil {
			return badContentLength
		}
	}
	return malformedRequest
}
