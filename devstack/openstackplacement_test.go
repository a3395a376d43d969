package devstack

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"
)

// TestOpenStackPlacement starts the reference OpenStack Placement 8.0 from
// Debian's packages, creates a provider through it, and stops it. The
// packages must be installed (.ci/run installs them): a missing package
// fails the test, it does not skip it.
func TestOpenStackPlacement(t *testing.T) {
	ctx := context.Background()
	p, err := StartOpenStackPlacement(ctx, t.TempDir(), zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Stop()

	do := func(method, path, body string) (int, string) {
		req, err := http.NewRequest(method, p.URL+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("X-Auth-Token", "admin")
		req.Header.Set("OpenStack-API-Version", "placement 1.39")
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		raw, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(raw)
	}
	code, body := do("GET", "/", "")
	if code != 200 || !strings.Contains(body, `"max_version": "1.39"`) {
		t.Fatalf("GET /: %d %s", code, body)
	}
	code, body = do("POST", "/resource_providers", `{"name": "n1", "uuid": "8d3e6a4c-6a4f-4c53-9a0f-5a3f1bde0a11"}`)
	if code != 200 {
		t.Fatalf("create provider: %d %s", code, body)
	}
	n, err := placementCount(ctx, p.URL, nil)
	if err != nil || n != 1 {
		t.Fatalf("providers: %d, %v", n, err)
	}
	if err := WaitPlacementCapacity(ctx, p.URL, map[string]int{"VCPU": 0}, time.Minute); err != nil {
		t.Fatal(err)
	}

	p.Stop() // the process group is gone (internal/wsgi TestStopEndsTheProcessGroup)
	if p.Exited() == nil {
		t.Fatal("gunicorn still runs after Stop")
	}
	if _, err := http.Get(p.URL + "/"); err == nil {
		t.Fatal("OpenStack Placement still answers after Stop")
	}
}
