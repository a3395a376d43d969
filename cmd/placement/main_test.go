package main

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"

	"github.com/metalloc/metalloc/auth"
	"github.com/metalloc/metalloc/auth/policy"
	"github.com/metalloc/metalloc/cmd/internal/cli"
	"github.com/metalloc/metalloc/config"
	"github.com/metalloc/metalloc/db/dbtest"
	"github.com/metalloc/metalloc/placement"
	"github.com/metalloc/metalloc/web/webtest"
)

// TestNonTextBodiesRefused: a JSON body with bytes that are not UTF-8, or a
// \u escape of a lone surrogate (which Go's decoder would store as U+FFFD),
// is Placement's 400 "Malformed JSON: ..." (its extract_json says so of
// invalid UTF-8) on every route that takes a body, and nothing is stored.
func TestNonTextBodiesRefused(t *testing.T) {
	t.Parallel()
	pool := dbtest.New(t)
	require.NoError(t, placement.Prepare(t.Context(), pool))
	cfg, err := config.Load("", nil)
	require.NoError(t, err)
	rules, err := cli.Rules(cfg.Placement.Access, policy.PlacementDefaults(), false)
	require.NoError(t, err)
	e, err := newPlacement(cfg, pool, auth.PlacementNoAuth{}, rules, zap.NewNop())
	require.NoError(t, err)
	srv := httptest.NewServer(e)
	t.Cleanup(srv.Close)
	hdr := []string{"Content-Type", "application/json", "X-Auth-Token", "admin", "OpenStack-API-Version", "placement 1.39"}

	rp := uuid.NewString()
	st, _, raw := webtest.Do(t, http.MethodPost, srv.URL+"/resource_providers", `{"name": "rp1", "uuid": "`+rp+`"}`, hdr...)
	require.Equal(t, http.StatusOK, st, string(raw))
	consumer, project, user := uuid.NewString(), uuid.NewString(), uuid.NewString()

	// X marks where the bad text goes.
	routes := [][3]string{
		{"POST", "/resource_providers", `{"name": "X"}`},
		{"PUT", "/resource_providers/" + rp, `{"name": "X"}`},
		{"PUT", "/resource_providers/" + rp + "/inventories", `{"resource_provider_generation": 0, "inventories": {"CUSTOM_X": {"total": 1}}}`},
		{"PUT", "/resource_providers/" + rp + "/traits", `{"resource_provider_generation": 0, "traits": ["CUSTOM_X"]}`},
		{"PUT", "/resource_providers/" + rp + "/aggregates", `{"resource_provider_generation": 0, "aggregates": ["X"]}`},
		{"POST", "/resource_classes", `{"name": "CUSTOM_X"}`},
		{"PUT", "/allocations/" + consumer, `{"allocations": {}, "consumer_generation": null, "project_id": "` + project +
			`", "user_id": "X"}`},
		{"POST", "/allocations", `{"` + consumer + `": {"allocations": {}, "consumer_generation": null, "project_id": "X", "user_id": "` + user + `"}}`},
		{"POST", "/reshaper", `{"inventories": {"X": {}}, "allocations": {}}`},
	}
	snapshot := func() string {
		var s string
		require.NoError(t, pool.QueryRow(context.Background(), `SELECT concat_ws('|',
			(SELECT string_agg(x::text, ',' ORDER BY x::text) FROM placement.resource_providers x),
			(SELECT count(*) FROM placement.resource_classes),
			(SELECT count(*) FROM placement.consumers),
			(SELECT count(*) FROM placement.allocations))`).Scan(&s))
		return s
	}
	before := snapshot()
	webtest.SendNonText(t, srv.URL, routes, func(raw []byte, problem string) {
		var doc struct {
			Errors []struct {
				Status        int
				Title, Detail string
			}
		}
		require.NoError(t, json.Unmarshal(raw, &doc), string(raw))
		require.Len(t, doc.Errors, 1, string(raw))
		require.Equal(t, "Bad Request", doc.Errors[0].Title)
		require.Contains(t, doc.Errors[0].Detail, "Malformed JSON: "+problem)
	}, hdr...)
	require.Equal(t, before, snapshot(), "nothing stored")
}
