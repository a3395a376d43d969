package web

import (
	"bufio"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// rawRequest sends raw on a new connection to addr and reads one answer.
func rawRequest(t *testing.T, addr, raw string) (*http.Response, string) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	defer c.Close()
	_, err = io.WriteString(c, raw)
	require.NoError(t, err)
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	require.NoError(t, err)
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp, string(body)
}

// Requests net/http refuses before any handler runs are answered in the
// API's error format, with why; handlers' answers are untouched, also on
// a kept-alive connection before the bad request.
func TestMalformedRequests(t *testing.T) {
	t.Parallel()
	srv, err := NewServer(ServerConfig{Listen: "127.0.0.1:0"}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Header().Set("Connection", "close")
		w.WriteHeader(http.StatusBadRequest) // the same status and headers Go's own answer has
		_, _ = io.WriteString(w, "from the handler")
	}))
	require.NoError(t, err)
	srv.Malformed = PlacementMalformed
	go func() { _ = srv.Serve() }()
	t.Cleanup(func() { _ = srv.Close() })

	detail := func(body string) string {
		var doc struct {
			Errors []struct {
				Status int    `json:"status"`
				Detail string `json:"detail"`
			} `json:"errors"`
		}
		require.NoError(t, json.Unmarshal([]byte(body), &doc), body)
		require.Len(t, doc.Errors, 1)
		return doc.Errors[0].Detail
	}

	resp, body := rawRequest(t, srv.Addr(), "POST /resource_providers HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: hi mom\r\n\r\n{}")
	require.Equal(t, 400, resp.StatusCode)
	require.Equal(t, "application/json", resp.Header.Get("Content-Type"))
	require.Equal(t, "content-length header must be an integer", detail(body))

	resp, body = rawRequest(t, srv.Addr(), "GET / HTTP/1.1\r\nHost: x\r\nBad Header\r\n\r\n")
	require.Equal(t, 400, resp.StatusCode)
	require.Equal(t, "The request could not be parsed as HTTP/1.1.", detail(body))

	resp, body = rawRequest(t, srv.Addr(), "GET / HTTP/1.1\r\nHost: x\r\nX-Big: "+strings.Repeat("a", 2<<20)+"\r\n\r\n")
	require.Equal(t, 431, resp.StatusCode)
	require.Equal(t, "The request's header fields are too large.", detail(body))

	resp, body = rawRequest(t, srv.Addr(), "POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip, chunked\r\n\r\n")
	require.Equal(t, 501, resp.StatusCode)
	require.Equal(t, "The request's transfer encoding is not supported.", detail(body))

	// A handler's own 400 passes through as it is.
	resp, body = rawRequest(t, srv.Addr(), "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
	require.Equal(t, 400, resp.StatusCode)
	require.Equal(t, "from the handler", body)
}

func TestMalformedIronicBody(t *testing.T) {
	ct, body := IronicMalformed(400, "content-length header must be an integer")
	require.Equal(t, "application/json", ct)
	var doc map[string]string
	require.NoError(t, json.Unmarshal(body, &doc))
	require.Contains(t, doc["error_message"], "content-length header must be an integer")
}

// Error bodies follow Accept as webob's do.
func TestErrorMediaType(t *testing.T) {
	for accept, want := range map[string]string{
		"":                 "application/json",
		"*/*":              "application/json",
		"application/json": "application/json",
		"text/html":        "text/html",
		"text/plain":       "text/plain",
		"text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8": "text/html",
		"application/json;q=0.9, text/html;q=0.5":                         "application/json",
		"text/*;q=0.5, application/json;q=0.4":                            "text/html",
		"text/html;q=0, */*;q=0.1":                                        "application/json",
		"a/b;;;q=x":                                                       "application/json",
	} {
		require.Equal(t, want, ErrorMediaType(accept), accept)
	}
	require.True(t, AcceptsJSON("text/html, */*;q=0.1"))
	require.False(t, AcceptsJSON("text/html, application/json;q=0"))
	require.False(t, AcceptsJSON("text/plain"))
}
