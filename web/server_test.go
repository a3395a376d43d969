package web

import (
	"crypto/tls"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/labstack/echo/v4"
	"github.com/stretchr/testify/require"

	"github.com/metalloc/metalloc/auth"
	"github.com/metalloc/metalloc/web/webtest"
)

// TestNewServerTLS: with a certificate and key the listener speaks TLS
// 1.2+ only; a certificate without a key fails at start.
func TestNewServerTLS(t *testing.T) {
	cert, key := webtest.SelfSigned(t)
	_, err := NewServer(ServerConfig{Listen: "127.0.0.1:0", TLSCertFile: cert}, http.NotFoundHandler())
	require.Error(t, err)
	srv, err := NewServer(ServerConfig{Listen: "127.0.0.1:0", TLSCertFile: cert, TLSKeyFile: key},
		http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "hello") }))
	require.NoError(t, err)
	go func() { _ = srv.Serve() }()
	t.Cleanup(func() { _ = srv.Close() })

	hc, err := auth.HTTPClient(cert, 0)
	require.NoError(t, err)
	resp, err := hc.Get("https://" + srv.Addr() + "/")
	require.NoError(t, err)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.Equal(t, "hello", string(body))
	hc.CloseIdleConnections()

	old := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{
		MaxVersion: tls.VersionTLS11, InsecureSkipVerify: true, //nolint:gosec // the point of the test
	}}}
	_, err = old.Get("https://" + srv.Addr() + "/")
	require.Error(t, err, "TLS 1.1 is refused")

	plain, err := http.Get("http://" + srv.Addr() + "/")
	if err == nil {
		b, _ := io.ReadAll(plain.Body)
		plain.Body.Close()
		require.NotEqual(t, "hello", string(b), "plain HTTP is not served")
	}
}

// TestBodyLimit: a body over the limit, declared or streamed, gets the
// API's 413 before the handler runs; one at the limit passes whole.
func TestBodyLimit(t *testing.T) {
	e := echo.New()
	e.HTTPErrorHandler = IronicErrorHandler
	called := 0
	e.Use(BodyLimit(10, func() error { return Errorf(http.StatusRequestEntityTooLarge, "Request is too large.") }))
	e.POST("/", func(c echo.Context) error {
		called++
		b, _ := io.ReadAll(c.Request().Body)
		return c.String(http.StatusOK, string(b))
	})
	send := func(body io.Reader, length int64) *httptest.ResponseRecorder {
		r := httptest.NewRequest(http.MethodPost, "/", body)
		r.ContentLength = length
		w := httptest.NewRecorder()
		e.ServeHTTP(w, r)
		return w
	}
	w := send(strings.NewReader("0123456789"), 10)
	require.Equal(t, http.StatusOK, w.Code)
	require.Equal(t, "0123456789", w.Body.String())
	w = send(strings.NewReader("0123456789A"), 11)
	require.Equal(t, http.StatusRequestEntityTooLarge, w.Code)
	require.Contains(t, w.Body.String(), "Request is too large.")
	w = send(io.MultiReader(strings.NewReader("0123456789"), strings.NewReader("AB")), -1) // chunked, no length
	require.Equal(t, http.StatusRequestEntityTooLarge, w.Code)
	require.Equal(t, 1, called)
}
