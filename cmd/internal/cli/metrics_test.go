package cli

import (
	"io"
	"net"
	"net/http"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"

	"github.com/metalloc/metalloc/auth"
	"github.com/metalloc/metalloc/web"
	"github.com/metalloc/metalloc/web/webtest"
)

// TestServeMetricsOverTLS: with conductor.metrics_tls_cert_file/key_file
// the metrics listener speaks TLS only, verifiable with the certificate as
// CA; a missing key fails at start.
func TestServeMetricsOverTLS(t *testing.T) {
	cert, key := webtest.SelfSigned(t)
	reg := prometheus.NewRegistry()
	reg.MustRegister(prometheus.NewCounter(prometheus.CounterOpts{Name: "metalloc_test_total", Help: "test"}))
	cfg := web.ServerConfig{Listen: "127.0.0.1:0", TLSCertFile: cert, TLSKeyFile: key}
	_, err := ServeMetrics(web.ServerConfig{Listen: "127.0.0.1:0", TLSCertFile: cert}, reg, zap.NewNop())
	require.Error(t, err)

	// Bind a port first to learn it: ServeMetrics reports it only in its log.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	cfg.Listen = ln.Addr().String()
	require.NoError(t, ln.Close())
	stop, err := ServeMetrics(cfg, reg, zap.NewNop())
	require.NoError(t, err)
	defer stop()

	hc, err := auth.HTTPClient(cert, 0)
	require.NoError(t, err)
	resp, err := hc.Get("https://" + cfg.Listen + "/metrics")
	require.NoError(t, err)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Contains(t, string(body), "metalloc_test_total 0")

	plain, err := http.Get("http://" + cfg.Listen + "/metrics")
	if err == nil {
		b, _ := io.ReadAll(plain.Body)
		plain.Body.Close()
		require.NotContains(t, string(b), "metalloc_test_total", "plain HTTP must not get the metrics")
		require.True(t, plain.StatusCode == http.StatusBadRequest || strings.Contains(string(b), "TLS"), plain.Status)
	}
	hc.CloseIdleConnections()
}
