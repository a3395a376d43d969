package placement

import (
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
)

// TestConcurrentProviderDeleteAndUpdate races DELETEs and PUTs of one
// provider (found by the HTTP fuzzer: the loser of two DELETEs got 500):
// each answer is 200, 204, 404 or 409, never a 5xx, and one DELETE wins.
func TestConcurrentProviderDeleteAndUpdate(t *testing.T) {
	t.Parallel()
	srv := testServer(t)
	for round := range 10 {
		rp := uuid.NewString()
		st, _, body := call(t, srv, "POST", "/resource_providers", "1.20", fmt.Sprintf(`{"name":"race-%d","uuid":"%s"}`, round, rp))
		require.Equal(t, 200, st, body)
		var wg sync.WaitGroup
		statuses := make(chan int, 8)
		for i := range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				method, reqBody := "DELETE", ""
				if i%2 == 1 {
					method, reqBody = "PUT", fmt.Sprintf(`{"name":"race-%d-%d"}`, round, i)
				}
				req, _ := http.NewRequest(method, srv.URL+"/resource_providers/"+rp, strings.NewReader(reqBody))
				req.Header.Set("X-Auth-Token", "admin")
				req.Header.Set("Content-Type", "application/json")
				req.Header.Set("OpenStack-API-Version", "placement 1.20")
				resp, err := srv.Client().Do(req)
				if err == nil {
					resp.Body.Close()
					statuses <- resp.StatusCode
				}
			}()
		}
		wg.Wait()
		close(statuses)
		deleted := 0
		for st := range statuses {
			require.Contains(t, []int{200, 204, 404, 409}, st)
			if st == 204 {
				deleted++
			}
		}
		require.Equal(t, 1, deleted)
	}
}
