package topology

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/labstack/echo/v4"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"

	"github.com/metalloc/metalloc/db/dbtest"
	"github.com/metalloc/metalloc/web"
	"github.com/metalloc/metalloc/web/webtest"
)

func TestAPI(t *testing.T) {
	pool := dbtest.New(t)
	e := echo.New()
	e.HTTPErrorHandler = web.IronicErrorHandler
	e.Use(web.RequestID(zaptest.NewLogger(t)))
	NewHandler(pool, HandlerOptions{}).Register(e.Group("/v1", web.IronicVersion()))
	srv := httptest.NewServer(e)
	t.Cleanup(srv.Close)

	do := func(method, body string) (int, map[string]any) {
		t.Helper()
		req, err := http.NewRequest(method, srv.URL+"/v1/topology", strings.NewReader(body))
		require.NoError(t, err)
		if body != "" {
			req.Header.Set("Content-Type", "application/json")
		}
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		raw, _ := io.ReadAll(resp.Body)
		var out map[string]any
		require.NoError(t, json.Unmarshal(raw, &out), string(raw))
		return resp.StatusCode, out
	}
	levels := func(doc map[string]any) string {
		b, _ := json.Marshal(doc["levels"])
		return string(b)
	}

	status, doc := do("GET", "")
	require.Equal(t, 200, status)
	require.Equal(t, `[]`, levels(doc))

	body := `{"levels":[{"name":"row","source":"extra.row"},{"name":"rack","source":"trait:CUSTOM_RACK_"}]}`
	status, doc = do("PUT", body)
	require.Equal(t, 200, status, doc)
	want := `[{"name":"row","source":"extra.row"},{"name":"rack","source":"trait:CUSTOM_RACK_"}]`
	require.Equal(t, want, levels(doc))
	status, doc = do("GET", "")
	require.Equal(t, 200, status)
	require.Equal(t, want, levels(doc))

	for _, tc := range []struct{ body, fault string }{
		{``, `Missing argument: "topology"`},
		{`{`, `Invalid JSON in request body`},
		{`{"levels":[{"name":"rack"}]}`, `Schema error for topology: 'source' is a required property`},
		{`{"levels":[],"x":1}`, `Schema error for topology: Additional properties are not allowed ('x' was unexpected)`},
		{`{"levels":[{"name":"rack","source":"rack"}]}`, `invalid source "rack" of topology level rack: want extra.KEY, properties.KEY, trait:PREFIX or aggregate`},
		{`{"levels":[{"name":"rack","source":"extra.a"},{"name":"rack","source":"extra.b"}]}`, `topology level rack is given twice`},
	} {
		status, doc := do("PUT", tc.body)
		require.Equal(t, 400, status, tc.body)
		require.Contains(t, webtest.IronicFault(t, doc), tc.fault, tc.body)
	}
	// The failed PUTs changed nothing.
	_, doc = do("GET", "")
	require.Equal(t, want, levels(doc))

	status, _ = do("DELETE", "")
	require.Equal(t, 405, status)

	// An empty list removes the topology.
	status, doc = do("PUT", `{"levels":[]}`)
	require.Equal(t, 200, status)
	require.Equal(t, `[]`, levels(doc))
}
