package e2e

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gophercloud/gophercloud/v2"
	"github.com/gophercloud/gophercloud/v2/openstack/baremetal/noauth"
	"github.com/gophercloud/gophercloud/v2/openstack/baremetal/v1/allocations"
	"github.com/gophercloud/gophercloud/v2/openstack/baremetal/v1/nodes"
	"github.com/gophercloud/gophercloud/v2/pagination"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"
	"gopkg.in/yaml.v3"

	"github.com/metalloc/metalloc/db/dbtest"
	"github.com/metalloc/metalloc/devstack"
)

type sampleNode struct {
	Name          string         `yaml:"name"`
	UUID          string         `yaml:"uuid"`
	Driver        string         `yaml:"driver"`
	ResourceClass string         `yaml:"resource_class"`
	Properties    map[string]any `yaml:"properties"`
	Extra         map[string]any `yaml:"extra"`
	Traits        []string       `yaml:"traits"`
}

func loadSample(t *testing.T) []sampleNode {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(repoRoot(), "examples", "dc1-nodes.yaml"))
	require.NoError(t, err)
	var doc struct{ Nodes []sampleNode }
	require.NoError(t, yaml.Unmarshal(raw, &doc))
	require.Len(t, doc.Nodes, 240)
	return doc.Nodes
}

func startStack(t *testing.T, conductors int) (*devstack.Stack, *gophercloud.ServiceClient) {
	t.Helper()
	stack, err := devstack.Start(context.Background(), devstack.Options{
		BinDir: binDir, DatabaseURL: dbtest.NewURL(t), Conductors: conductors,
		LogDir: t.TempDir(), Log: zaptest.NewLogger(t),
		Env: []string{"METALLOC_LOG_LEVEL=warn"},
	})
	require.NoError(t, err)
	t.Cleanup(func() { stack.Stop(context.Background()) })
	client, err := noauth.NewBareMetalNoAuth(noauth.EndpointOpts{IronicEndpoint: stack.APIURL + "/v1"})
	require.NoError(t, err)
	client.Microversion = "1.82"
	return stack, client
}

// inParallel runs fn(i) for i in [0, n) on c goroutines.
func inParallel(t *testing.T, n, c int, fn func(i int) error) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, n)
	next := make(chan int, n)
	for i := range n {
		next <- i
	}
	close(next)
	for range c {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				if err := fn(i); err != nil {
					errs <- err
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
}

func enroll(t *testing.T, ctx context.Context, client *gophercloud.ServiceClient, sample []sampleNode) {
	inParallel(t, len(sample), 16, func(i int) error {
		s := sample[i]
		n, err := nodes.Create(ctx, client, nodes.CreateOpts{
			Name: s.Name, UUID: s.UUID, Driver: s.Driver, ResourceClass: s.ResourceClass,
			Properties: s.Properties, Extra: s.Extra,
		}).Extract()
		if err != nil {
			return fmt.Errorf("create %s: %w", s.Name, err)
		}
		if n.ProvisionState != "enroll" {
			return fmt.Errorf("node %s created in %s, want enroll", s.Name, n.ProvisionState)
		}
		_, err = client.Put(ctx, client.ServiceURL("nodes", n.UUID, "traits"),
			map[string]any{"traits": s.Traits}, nil, &gophercloud.RequestOpts{OkCodes: []int{204}})
		if err != nil {
			return fmt.Errorf("traits %s: %w", s.Name, err)
		}
		steps := []func() error{
			func() error {
				return nodes.ChangeProvisionState(ctx, client, n.UUID, nodes.ProvisionStateOpts{Target: nodes.TargetManage}).ExtractErr()
			},
			func() error {
				return nodes.ChangePowerState(ctx, client, n.UUID, nodes.PowerStateOpts{Target: nodes.PowerOff}).ExtractErr()
			},
			func() error {
				return nodes.ChangeProvisionState(ctx, client, n.UUID, nodes.ProvisionStateOpts{Target: nodes.TargetProvide}).ExtractErr()
			},
		}
		for _, step := range steps {
			if err := step(); err != nil {
				return fmt.Errorf("node %s: %w", s.Name, err)
			}
		}
		return nil
	})
	n, err := nodes.Get(ctx, client, sample[0].Name).Extract()
	require.NoError(t, err)
	require.Equal(t, "available", n.ProvisionState)
	require.Equal(t, "power off", n.PowerState)
}

// request is one allocation the test asks for and what it expects.
type request struct {
	opts allocations.CreateOpts
	fits bool
}

// requests builds 200 allocations that must all succeed whatever order the
// conductors serve them in (per class, the total never exceeds the supply of
// the scarcest trait asked for), plus 10 that cannot fit.
func requests() []request {
	var out []request
	add := func(n int, rc string, traits []string, fits bool) {
		for range n {
			out = append(out, request{opts: allocations.CreateOpts{ResourceClass: rc, Traits: traits}, fits: fits})
		}
	}
	add(24, "baremetal-gold", nil, true)
	add(24, "baremetal-gold", []string{"HW_CPU_X86_AVX512F"}, true)
	add(10, "baremetal-gold", []string{"CUSTOM_25GBE"}, true) // 58 gold nodes have it; 58 gold asked
	// 18 gpu nodes have both CUSTOM_GPU_A100 and CUSTOM_NVME, so 18 gpu in
	// all: the 13 AVX512F ones may take any 13 of those 18 and leave 5.
	add(13, "baremetal-gpu", []string{"HW_CPU_X86_AVX512F"}, true)
	add(5, "baremetal-gpu", []string{"CUSTOM_GPU_A100", "CUSTOM_NVME"}, true)
	add(55, "baremetal-silver", nil, true)
	add(50, "baremetal-silver", []string{"HW_CPU_X86_AVX2"}, true)
	add(14, "baremetal-storage", nil, true)
	add(5, "baremetal-storage", []string{"CUSTOM_HDD_JBOD"}, true)
	add(5, "baremetal-gold", []string{"CUSTOM_GPU_A100"}, false)
	add(5, "baremetal-nope", nil, false)
	rand.Shuffle(len(out), func(i, j int) { out[i], out[j] = out[j], out[i] })
	return out
}

func TestEndToEndAllocations(t *testing.T) {
	t.Parallel()
	runEndToEndAllocations(t, backendRun{})
}

// runEndToEndAllocations enrolls the 240 sample nodes on a stack started
// with b's options, runs the allocation requests (all 210, or b's subset)
// through gophercloud and checks every outcome, the nodes, and that
// deleting frees everything. With the placement backend it first waits
// until the resource tracker has mirrored the nodes, checks that Placement
// holds exactly the active allocations, and at the end that no Placement
// allocation is left.
func runEndToEndAllocations(t *testing.T, b backendRun) {
	ctx := context.Background()
	stack, client := startStackOpts(t, 2, b.opts)
	sample := loadSample(t)
	enroll(t, ctx, client, sample)
	placementURL := stack.BackendPlacementURL
	if placementURL != "" {
		waitMirrored(t, ctx, placementURL, sample, b.mirrorTimeout)
	}

	reqs := requests()
	require.Len(t, reqs, 210)
	fitting := 200
	if b.requests > 0 {
		reqs = subsetOf(reqs, b.requests)
		fitting = 0
		for _, r := range reqs {
			if r.fits {
				fitting++
			}
		}
	}
	uuids := make([]string, len(reqs))
	inParallel(t, len(reqs), 32, func(i int) error {
		a, err := allocations.Create(ctx, client, reqs[i].opts).Extract()
		if err != nil {
			return err
		}
		uuids[i] = a.UUID
		return nil
	})

	// Every allocation leaves "allocating".
	final := map[string]*allocations.Allocation{}
	dbtest.WaitEvery(t, 60*time.Second, 50*time.Millisecond, "every allocation to leave allocating", func() bool {
		pages, err := allocations.List(client, allocations.ListOpts{Limit: 1000}).AllPages(ctx)
		require.NoError(t, err)
		all, err := allocations.ExtractAllocations(pages)
		require.NoError(t, err)
		for i := range all {
			if all[i].State != "allocating" {
				final[all[i].UUID] = &all[i]
			}
		}
		return len(final) == len(reqs)
	}, func() { t.Logf("%d of %d allocations left allocating", len(final), len(reqs)) })

	booked := map[string]string{}
	for i, u := range uuids {
		a := final[u]
		if !reqs[i].fits {
			require.Equal(t, "error", a.State, "allocation %d (%v) should not fit", i, reqs[i].opts)
			require.Contains(t, a.LastError, "no node fits: ")
			// Ironic's own sentence first (tools match on it), then the counts.
			prefix := "Failed to process allocation " + u + ": "
			if reqs[i].opts.ResourceClass == "baremetal-nope" {
				require.True(t, strings.HasPrefix(a.LastError, prefix+"no available nodes match the resource class baremetal-nope. ("), a.LastError)
				require.Contains(t, a.LastError, "0 of resource class baremetal-nope")
			} else {
				require.True(t, strings.HasPrefix(a.LastError, prefix+"no suitable nodes have the requested traits CUSTOM_GPU_A100. ("), a.LastError)
				require.Contains(t, a.LastError, "73 of resource class baremetal-gold")
				require.Contains(t, a.LastError, "0 with traits CUSTOM_GPU_A100")
			}
			continue
		}
		require.Equal(t, "active", a.State, "allocation %d (%v): %s", i, reqs[i].opts, a.LastError)
		prev, dup := booked[a.NodeUUID]
		require.False(t, dup, "node %s booked by %s and %s", a.NodeUUID, prev, u)
		booked[a.NodeUUID] = u
	}
	require.Len(t, booked, fitting)
	if placementURL != "" {
		// Placement holds exactly one allocation per active allocation, on
		// its node's provider, and none for the failed ones.
		require.Equal(t, booked, placementAllocations(t, ctx, placementURL, sample))
	}

	// Each node names its allocation back, holds its uuid as instance_uuid,
	// and matches the class and traits asked for.
	byUUID := map[string]sampleNode{}
	for _, s := range sample {
		byUUID[s.UUID] = s
	}
	reqOf := map[string]request{}
	for i, u := range uuids {
		reqOf[u] = reqs[i]
	}
	err := nodes.ListDetail(client, nodes.ListOpts{Limit: 100}).EachPage(ctx, func(_ context.Context, p pagination.Page) (bool, error) {
		ns, err := nodes.ExtractNodes(p)
		for _, n := range ns {
			alloc, held := booked[n.UUID]
			if !held {
				require.Empty(t, n.InstanceUUID, "node %s holds an instance without an allocation", n.Name)
				continue
			}
			require.Equal(t, alloc, n.InstanceUUID)
			r := reqOf[alloc]
			require.Equal(t, r.opts.ResourceClass, n.ResourceClass)
			for _, tr := range r.opts.Traits {
				require.Contains(t, byUUID[n.UUID].Traits, tr)
			}
		}
		return true, err
	})
	require.NoError(t, err)

	// Deleting frees the nodes.
	inParallel(t, len(uuids), 16, func(i int) error {
		return allocations.Delete(ctx, client, uuids[i]).ExtractErr()
	})
	pages, err := nodes.List(client, nodes.ListOpts{Associated: true, Limit: 1000}).AllPages(ctx)
	require.NoError(t, err)
	left, err := nodes.ExtractNodes(pages)
	require.NoError(t, err)
	require.Empty(t, left, "nodes still associated after deleting every allocation")
	all, err := allocations.List(client, nil).AllPages(ctx)
	require.NoError(t, err)
	rest, err := allocations.ExtractAllocations(all)
	require.NoError(t, err)
	require.Empty(t, rest)
	if placementURL != "" {
		// The conductors released their claims (or the tracker reconciled
		// them away): every usage is back to 0.
		waitPlacementEmpty(t, ctx, placementURL, sample)
	}
}
