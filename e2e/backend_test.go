package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gophercloud/gophercloud/v2"
	"github.com/gophercloud/gophercloud/v2/openstack/baremetal/noauth"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"

	"github.com/metalloc/metalloc/db/dbtest"
	"github.com/metalloc/metalloc/devstack"
)

// backendRun parameterizes runEndToEndAllocations. The zero value is the
// database backend with every request.
type backendRun struct {
	// opts selects the backend (AllocationBackend, PlacementBackendEndpoint)
	// and adds Env; the test fills in the binaries, database, logs.
	opts devstack.Options
	// requests, when > 0, runs only that many of requests() (a few that
	// cannot fit among them), for slow Placement services.
	requests int
	// mirrorTimeout bounds the wait for the resource tracker to mirror the
	// nodes into Placement (default 60s).
	mirrorTimeout time.Duration
}

// startStackOpts is startStack with extra options. When the test fails it
// logs the end of every process's log.
func startStackOpts(t *testing.T, conductors int, o devstack.Options) (*devstack.Stack, *gophercloud.ServiceClient) {
	t.Helper()
	o.BinDir, o.DatabaseURL, o.Conductors = binDir, dbtest.NewURL(t), conductors
	o.LogDir, o.Log = t.TempDir(), zaptest.NewLogger(t)
	o.Env = append([]string{"METALLOC_LOG_LEVEL=warn"}, o.Env...)
	stack, err := devstack.Start(context.Background(), o)
	require.NoError(t, err)
	t.Cleanup(func() {
		stack.Stop(context.Background())
		if t.Failed() {
			for _, p := range append([]*devstack.Process{stack.API, stack.Placement}, stack.Conductors...) {
				if p != nil {
					logTail(t, p.LogPath, 40)
				}
			}
		}
	})
	client, err := noauth.NewBareMetalNoAuth(noauth.EndpointOpts{IronicEndpoint: stack.APIURL + "/v1"})
	require.NoError(t, err)
	client.Microversion = "1.82"
	return stack, client
}

// logTail logs the last n lines of the file at path.
func logTail(t *testing.T, path string, n int) {
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Logf("%s: %v", path, err)
		return
	}
	lines := strings.Split(strings.TrimRight(string(raw), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	t.Logf("--- last lines of %s:\n%s", path, strings.Join(lines, "\n"))
}

// subsetOf keeps n of reqs, in their (shuffled) order: up to two of each
// kind that cannot fit, the rest fitting ones. Any subset of requests()
// still fits whatever order the conductors serve it in.
func subsetOf(reqs []request, n int) []request {
	var out []request
	noFit := map[string]int{}
	fits := 0
	for _, r := range reqs {
		if len(out) == n {
			break
		}
		if !r.fits {
			if noFit[r.opts.ResourceClass] < 2 {
				noFit[r.opts.ResourceClass]++
				out = append(out, r)
			}
			continue
		}
		if fits < n-4 {
			fits++
			out = append(out, r)
		}
	}
	return out
}

// placementGet GETs path from the Placement service at url (noauth2 token
// "admin", microversion 1.39) and decodes the JSON answer into out; it
// returns the status.
func placementGet(ctx context.Context, url, path string, out any) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url+path, nil)
	if err != nil {
		return 0, err
	}
	req.Header.Set("X-Auth-Token", "admin")
	req.Header.Set("OpenStack-API-Version", "placement 1.39")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return resp.StatusCode, err
	}
	if resp.StatusCode != http.StatusOK {
		return resp.StatusCode, fmt.Errorf("GET %s: %s: %s", path, resp.Status, raw)
	}
	return resp.StatusCode, json.Unmarshal(raw, out)
}

type placementProvider struct {
	UUID string `json:"uuid"`
	Name string `json:"name"`
}

func placementProviders(ctx context.Context, url, query string) ([]placementProvider, error) {
	var doc struct {
		Providers []placementProvider `json:"resource_providers"`
	}
	_, err := placementGet(ctx, url, "/resource_providers"+query, &doc)
	return doc.Providers, err
}

// waitMirrored waits until Placement holds one provider per sample node,
// and for every resource class and trait of the sample exactly as many
// providers with free capacity of that class, and with that trait, as the
// sample has nodes: the tracker has mirrored every node, inventory and
// traits included (all nodes are available and unallocated here).
func waitMirrored(t *testing.T, ctx context.Context, url string, sample []sampleNode, timeout time.Duration) {
	t.Helper()
	if timeout <= 0 {
		timeout = 60 * time.Second
	}
	start := time.Now()
	require.NoError(t, devstack.WaitPlacementProviders(ctx, url, len(sample), timeout))
	want := map[string]int{}
	for _, s := range sample {
		want["?resources="+devstack.PlacementResourceClass(s.ResourceClass)+":1"]++
		for _, tr := range s.Traits {
			want["?required="+tr]++
		}
	}
	check := func() error {
		all, err := placementProviders(ctx, url, "")
		if err != nil {
			return err
		}
		if len(all) != len(sample) {
			return fmt.Errorf("%d providers, want %d", len(all), len(sample))
		}
		for q, n := range want {
			ps, err := placementProviders(ctx, url, q)
			if err != nil {
				return err // a trait not created yet: 400
			}
			if len(ps) != n {
				return fmt.Errorf("GET /resource_providers%s: %d providers, want %d", q, len(ps), n)
			}
		}
		return nil
	}
	var err error
	for deadline := start.Add(timeout); ; {
		if err = check(); err == nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(250 * time.Millisecond)
	}
	require.NoError(t, err, "the resource tracker did not mirror the %d nodes within %s", len(sample), timeout)
	t.Logf("tracker mirrored %d nodes into %s in %s", len(sample), url, time.Since(start).Round(time.Millisecond))
}

// placementAllocations reads every provider's allocations and returns node
// uuid → consumer uuid. It fails the test on a provider that is no sample
// node's (matched by uuid, or by name = node uuid or node name), on a
// provider with several consumers, and on a consumer on several providers.
func placementAllocations(t *testing.T, ctx context.Context, url string, sample []sampleNode) map[string]string {
	t.Helper()
	nodeOf := map[string]string{}
	for _, s := range sample {
		nodeOf[s.UUID], nodeOf[s.Name] = s.UUID, s.UUID
	}
	providers, err := placementProviders(ctx, url, "")
	require.NoError(t, err)
	out := map[string]string{}
	seen := map[string]string{}
	var mu sync.Mutex
	inParallel(t, len(providers), 8, func(i int) error {
		p := providers[i]
		node, ok := nodeOf[p.UUID]
		if !ok {
			node, ok = nodeOf[p.Name]
		}
		if !ok {
			return fmt.Errorf("provider %s (%s) is no node's", p.UUID, p.Name)
		}
		var doc struct {
			Allocations map[string]struct {
				Resources map[string]int `json:"resources"`
			} `json:"allocations"`
		}
		if _, err := placementGet(ctx, url, "/resource_providers/"+p.UUID+"/allocations", &doc); err != nil {
			return err
		}
		mu.Lock()
		defer mu.Unlock()
		for consumer := range doc.Allocations {
			if prev, dup := out[node]; dup {
				return fmt.Errorf("provider of node %s holds consumers %s and %s", node, prev, consumer)
			}
			if prev, dup := seen[consumer]; dup {
				return fmt.Errorf("consumer %s holds nodes %s and %s", consumer, prev, node)
			}
			out[node], seen[consumer] = consumer, node
		}
		return nil
	})
	return out
}

// waitPlacementEmpty waits up to 30s until every provider's usages are 0
// (Placement refuses allocations of 0, so no allocation is left either).
func waitPlacementEmpty(t *testing.T, ctx context.Context, url string, sample []sampleNode) {
	t.Helper()
	providers, err := placementProviders(ctx, url, "")
	require.NoError(t, err)
	require.Len(t, providers, len(sample))
	deadline := time.Now().Add(30 * time.Second)
	for {
		var mu sync.Mutex
		var used []string
		inParallel(t, len(providers), 8, func(i int) error {
			var doc struct {
				Usages map[string]int `json:"usages"`
			}
			if _, err := placementGet(ctx, url, "/resource_providers/"+providers[i].UUID+"/usages", &doc); err != nil {
				return err
			}
			for rc, n := range doc.Usages {
				if n != 0 {
					mu.Lock()
					used = append(used, fmt.Sprintf("%s (%s) %s=%d", providers[i].UUID, providers[i].Name, rc, n))
					mu.Unlock()
				}
			}
			return nil
		})
		if len(used) == 0 {
			return
		}
		require.True(t, time.Now().Before(deadline), "Placement usages left 30s after deleting every allocation: %v", used)
		time.Sleep(500 * time.Millisecond)
	}
}
