package e2e

import (
	"context"
	"fmt"
	neturl "net/url"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/gophercloud/gophercloud/v2"
	"github.com/gophercloud/gophercloud/v2/openstack/baremetal/noauth"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"

	"github.com/metalloc/metalloc/db/dbtest"
	"github.com/metalloc/metalloc/devstack"
	"github.com/metalloc/metalloc/placement/client"
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

// startStackOpts is startStack with extra options (a fresh database unless
// o.DatabaseURL names one). When the test fails it logs the end of every
// process's log.
func startStackOpts(t *testing.T, conductors int, o devstack.Options) (*devstack.Stack, *gophercloud.ServiceClient) {
	t.Helper()
	if o.DatabaseURL == "" {
		o.DatabaseURL = dbtest.NewURL(t)
	}
	o.BinDir, o.Conductors = binDir, conductors
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

// metallocPlacementClient is our client of the Placement service at url (noauth2
// token "admin").
func metallocPlacementClient(url string) *client.Client {
	return client.New(url, "admin", 30*time.Second)
}

type placementProvider struct {
	UUID string
	Name string
}

// placementProviders lists the providers matching q (nil: all).
func placementProviders(ctx context.Context, url string, q neturl.Values) ([]placementProvider, error) {
	ps, err := metallocPlacementClient(url).ListProviders(ctx, q)
	out := make([]placementProvider, len(ps))
	for i, p := range ps {
		out[i] = placementProvider{UUID: p.UUID.String(), Name: p.Name}
	}
	return out, err
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
	want := map[string]int{}
	for _, s := range sample {
		want["resources="+client.NormalizeClass(s.ResourceClass)+":1"]++
		for _, tr := range s.Traits {
			want["required="+tr]++
		}
	}
	check := func() error {
		all, err := placementProviders(ctx, url, nil)
		if err != nil {
			return err
		}
		if len(all) != len(sample) {
			return fmt.Errorf("%d providers, want %d", len(all), len(sample))
		}
		for q, n := range want {
			query, err := neturl.ParseQuery(q)
			if err != nil {
				return err
			}
			ps, err := placementProviders(ctx, url, query)
			if err != nil {
				return err // a trait not created yet: 400
			}
			if len(ps) != n {
				return fmt.Errorf("GET /resource_providers?%s: %d providers, want %d", q, len(ps), n)
			}
		}
		return nil
	}
	var err error
	dbtest.WaitEvery(t, timeout, 250*time.Millisecond, fmt.Sprintf("the resource tracker to mirror the %d nodes", len(sample)),
		func() bool { err = check(); return err == nil },
		func() { t.Logf("last check: %v (is the conductors' resource tracker running? see their logs)", err) })
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
	providers, err := placementProviders(ctx, url, nil)
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
		doc, err := metallocPlacementClient(url).GetProviderAllocations(ctx, uuid.MustParse(p.UUID))
		if err != nil {
			return err
		}
		mu.Lock()
		defer mu.Unlock()
		for consumer := range doc.Allocations {
			c := consumer.String()
			if prev, dup := out[node]; dup {
				return fmt.Errorf("provider of node %s holds consumers %s and %s", node, prev, c)
			}
			if prev, dup := seen[c]; dup {
				return fmt.Errorf("consumer %s holds nodes %s and %s", c, prev, node)
			}
			out[node], seen[c] = c, node
		}
		return nil
	})
	return out
}

// waitPlacementEmpty waits until every provider's usages are 0
// (Placement refuses allocations of 0, so no allocation is left either).
func waitPlacementEmpty(t *testing.T, ctx context.Context, url string, sample []sampleNode) {
	t.Helper()
	providers, err := placementProviders(ctx, url, nil)
	require.NoError(t, err)
	require.Len(t, providers, len(sample))
	var used []string
	dbtest.WaitEvery(t, 60*time.Second, 500*time.Millisecond, "every Placement usage to be 0 after deleting every allocation", func() bool {
		var mu sync.Mutex
		used = nil
		inParallel(t, len(providers), 8, func(i int) error {
			doc, err := metallocPlacementClient(url).ProviderUsages(ctx, uuid.MustParse(providers[i].UUID))
			if err != nil {
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
		return len(used) == 0
	}, func() { t.Logf("usages left: %v", used) })
}
