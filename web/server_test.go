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
// 1.2+ only, 1.2 without CBC suites; a certificate without a key fails at
// start.
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

	// TLS 1.2 without CBC suites: a client offering only CBC-SHA ones
	// finds no common suite; ECDHE with AES-GCM is fine.
	tls12 := func(suite uint16) error {
		c := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{
			MaxVersion: tls.VersionTLS12, CipherSuites: []uint16{suite}, InsecureSkipVerify: true, //nolint:gosec // the point of the test
		}}}
		resp, err := c.Get("https://" + srv.Addr() + "/")
		if err == nil {
			resp.Body.Close()
		}
		return err
	}
	for _, cbc := range []uint16{tls.TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA, tls.TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA,
		tls.TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA256} {
		require.Error(t, tls12(cbc), tls.CipherSuiteName(cbc))
	}
	require.NoError(t, tls12(tls.TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256))
	require.NoError(t, tls12(tls.TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256))

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

// TestTrustForwarded: forwarding headers set the scheme (and so links) and
// the client address only when the connection comes from a configured
// proxy; from anyone else they are ignored.
func TestTrustForwarded(t *testing.T) {
	t.Parallel()
	_, err := ParseTrustedProxies("api.trusted_proxies", []string{"10.0.0.0/8", "nonsense"})
	require.ErrorContains(t, err, `api.trusted_proxies: "nonsense"`)
	trusted, err := ParseTrustedProxies("api.trusted_proxies", []string{"10.0.0.0/8", "2001:db8::1"})
	require.NoError(t, err)
	e := echo.New()
	TrustProxies(e, trusted)
	e.GET("/", func(c echo.Context) error { return c.String(http.StatusOK, PublicURL(c, "")+" "+c.RealIP()) })
	get := func(peer string, hdr ...string) string {
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		r.Host = "api.example:6385"
		r.RemoteAddr = peer
		for i := 0; i+1 < len(hdr); i += 2 {
			r.Header.Set(hdr[i], hdr[i+1])
		}
		w := httptest.NewRecorder()
		e.ServeHTTP(w, r)
		return w.Body.String()
	}
	spoof := []string{"X-Forwarded-Proto", "https", "X-Forwarded-For", "203.0.113.9", "X-Real-Ip", "203.0.113.9"}
	require.Equal(t, "http://api.example:6385 192.0.2.1", get("192.0.2.1:5555", spoof...))
	require.Equal(t, "http://api.example:6385 192.0.2.1", get("192.0.2.1:5555", "X-Forwarded-Ssl", "on", "X-Url-Scheme", "https"))
	require.Equal(t, "http://api.example:6385 192.0.2.1", get("192.0.2.1:5555", "Forwarded", "proto=https;for=203.0.113.9"))
	require.Equal(t, "http://api.example:6385 127.0.0.1", get("127.0.0.1:5555", spoof...), "loopback is not trusted unless listed")
	require.Equal(t, "https://api.example:6385 203.0.113.9", get("10.1.2.3:5555", spoof...))
	require.Equal(t, "https://api.example:6385 10.1.2.3", get("10.1.2.3:5555", "Forwarded", `for=203.0.113.9;proto="https"`))
	require.Equal(t, "https://api.example:6385 203.0.113.9", get("[2001:db8::1]:5555", spoof...))
}
