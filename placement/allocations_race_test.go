package placement

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
)

// send is call for goroutines other than the test's: it returns the
// status, or 0 when the request could not be made.
func send(srv *httptest.Server, method, path, version, body string) int {
	req, err := http.NewRequest(method, srv.URL+path, strings.NewReader(body))
	if err != nil {
		return 0
	}
	req.Header.Set("X-Auth-Token", "admin")
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("OpenStack-API-Version", "placement "+version)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}

// TestProviderDeleteRacesAllocationWrites checks what placement.allocations'
// foreign keys guaranteed before migration 00043 dropped them: an
// allocation never outlives its provider or its consumer. Each round, 8
// writers PUT allocations for new consumers on one provider while it is
// deleted, and 4 more PUT and DELETE the allocations of one consumer
// against each other. The provider's DELETE answers 204 only if no write
// succeeded (409 inuse otherwise); every answer is 204 or a 4xx; and no
// allocation row names a missing provider or consumer.
func TestProviderDeleteRacesAllocationWrites(t *testing.T) {
	t.Parallel()
	srv, pool := rpTestServer(t)
	shared := uuid.NewString()
	for round := range 15 {
		rp := uuid.NewString()
		rpCreate(t, srv, fmt.Sprintf("race-%d", round), rp, "")
		status, _, body := call(t, srv, "PUT", "/resource_providers/"+rp+"/inventories", "1.28",
			`{"resource_provider_generation": 0, "inventories": {"VCPU": {"total": 100, "max_unit": 100}}}`)
		require.Equal(t, 200, status, body)
		put := func(consumer string) int {
			return send(srv, "PUT", "/allocations/"+consumer, "1.28", fmt.Sprintf(
				`{"allocations": {"%s": {"resources": {"VCPU": 1}}}, "project_id": "p", "user_id": "u", "consumer_generation": null}`, rp))
		}
		var wg sync.WaitGroup
		writes := make([]int, 8)
		for i := range writes {
			wg.Go(func() { writes[i] = put(uuid.NewString()) })
		}
		var deleted int
		wg.Go(func() { deleted = send(srv, "DELETE", "/resource_providers/"+rp, "1.28", "") })
		sharedAnswers := make([]int, 4)
		for i := range sharedAnswers {
			wg.Go(func() {
				if i%2 == 0 {
					sharedAnswers[i] = put(shared)
				} else {
					sharedAnswers[i] = send(srv, "DELETE", "/allocations/"+shared, "1.28", "")
				}
			})
		}
		wg.Wait()
		succeeded := 0
		for _, s := range writes {
			require.True(t, s == 204 || (s >= 400 && s < 500), "a write answered %d", s)
			if s == 204 {
				succeeded++
			}
		}
		for _, s := range sharedAnswers {
			require.True(t, s == 204 || (s >= 400 && s < 500), "the shared consumer's request answered %d", s)
		}
		switch deleted {
		case 204:
			require.Zero(t, succeeded, "round %d: the provider went with allocations written", round)
		case 409:
		default:
			t.Fatalf("round %d: DELETE answered %d", round, deleted)
		}
		var orphans int
		require.NoError(t, pool.QueryRow(t.Context(), `
			SELECT count(*) FROM placement.allocations a
			 WHERE NOT EXISTS (SELECT 1 FROM placement.resource_providers p WHERE p.id = a.resource_provider_id)
			    OR NOT EXISTS (SELECT 1 FROM placement.consumers c WHERE c.id = a.consumer_id)`).Scan(&orphans))
		require.Zero(t, orphans, "round %d", round)
		// The shared consumer's writes go to this round's provider: free
		// it for the next round's DELETE to have a chance.
		send(srv, "DELETE", "/allocations/"+shared, "1.28", "")
	}
}
