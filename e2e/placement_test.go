package e2e

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"

	"github.com/google/uuid"
	"github.com/gophercloud/gophercloud/v2"
	"github.com/gophercloud/gophercloud/v2/openstack/placement/v1/allocations"
	"github.com/gophercloud/gophercloud/v2/openstack/placement/v1/resourceproviders"
	"github.com/gophercloud/gophercloud/v2/openstack/placement/v1/traits"
	"github.com/gophercloud/gophercloud/v2/openstack/placement/v1/usages"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"

	"github.com/metalloc/metalloc/db/dbtest"
	"github.com/metalloc/metalloc/devstack"
	"github.com/metalloc/metalloc/web"
	"github.com/metalloc/metalloc/web/webtest"
)

// placementClient starts metalloc-placement (with the API, no conductors
// needed but devstack starts at least one) and returns gophercloud's
// placement client on it, authenticated with the noauth2 token "admin".
func placementClient(t *testing.T) *gophercloud.ServiceClient {
	t.Helper()
	stack, err := devstack.Start(context.Background(), devstack.Options{
		BinDir: binDir, DatabaseURL: dbtest.NewURL(t), Conductors: 1, Placement: true,
		LogDir: t.TempDir(), Log: zaptest.NewLogger(t), Env: []string{"METALLOC_LOG_LEVEL=warn"},
	})
	require.NoError(t, err)
	t.Cleanup(func() { stack.Stop(context.Background()) })
	provider := &gophercloud.ProviderClient{TokenID: "admin"}
	return &gophercloud.ServiceClient{
		ProviderClient: provider, Endpoint: stack.PlacementURL + "/", Type: "placement", Microversion: "1.39",
	}
}

// gophercloud's placement client (openstack/placement/v1) drives
// metalloc-placement: providers, inventories, traits, aggregates,
// allocations and usages.
func TestPlacementWithGophercloud(t *testing.T) {
	client := placementClient(t)
	ctx := context.Background()

	rp, err := resourceproviders.Create(ctx, client, resourceproviders.CreateOpts{Name: "node-1"}).Extract()
	require.NoError(t, err)
	require.Equal(t, "node-1", rp.Name)
	require.Equal(t, rp.UUID, rp.RootProviderUUID)
	child, err := resourceproviders.Create(ctx, client, resourceproviders.CreateOpts{
		Name: "node-1-numa0", ParentProviderUUID: rp.UUID,
	}).Extract()
	require.NoError(t, err)
	require.Equal(t, rp.UUID, child.RootProviderUUID)

	page, err := resourceproviders.List(client, resourceproviders.ListOpts{InTree: rp.UUID}).AllPages(ctx)
	require.NoError(t, err)
	all, err := resourceproviders.ExtractResourceProviders(page)
	require.NoError(t, err)
	require.Len(t, all, 2)

	inv, err := resourceproviders.UpdateInventories(ctx, client, rp.UUID, resourceproviders.UpdateInventoriesOpts{
		ResourceProviderGeneration: rp.Generation,
		Inventories: map[string]resourceproviders.Inventory{
			"VCPU":      {Total: 8, MaxUnit: 8, MinUnit: 1, StepSize: 1, AllocationRatio: 2},
			"MEMORY_MB": {Total: 4096, MaxUnit: 4096, MinUnit: 1, StepSize: 1, AllocationRatio: 1},
		},
	}).Extract()
	require.NoError(t, err)
	require.Len(t, inv.Inventories, 2)
	gen := inv.ResourceProviderGeneration

	// A stale generation is refused.
	_, err = resourceproviders.UpdateInventories(ctx, client, rp.UUID, resourceproviders.UpdateInventoriesOpts{
		ResourceProviderGeneration: rp.Generation,
		Inventories:                map[string]resourceproviders.Inventory{"VCPU": {Total: 1, MaxUnit: 1, MinUnit: 1, StepSize: 1, AllocationRatio: 1}},
	}).Extract()
	require.True(t, gophercloud.ResponseCodeIs(err, 409), "%v", err)

	require.NoError(t, traits.Create(ctx, client, "CUSTOM_E2E_GOLD").ExtractErr())
	tr, err := resourceproviders.UpdateTraits(ctx, client, rp.UUID, resourceproviders.UpdateTraitsOpts{
		ResourceProviderGeneration: gen, Traits: []string{"CUSTOM_E2E_GOLD", "HW_CPU_X86_AVX2"},
	}).Extract()
	require.NoError(t, err)
	require.ElementsMatch(t, []string{"CUSTOM_E2E_GOLD", "HW_CPU_X86_AVX2"}, tr.Traits)
	gen = tr.ResourceProviderGeneration

	agg := uuid.NewString()
	ag, err := resourceproviders.UpdateAggregates(ctx, client, rp.UUID, resourceproviders.UpdateAggregatesOpts{
		ResourceProviderGeneration: &gen, Aggregates: []string{agg},
	}).Extract()
	require.NoError(t, err)
	require.Equal(t, []string{agg}, ag.Aggregates)

	consumer := uuid.NewString()
	var none *int
	err = allocations.Update(ctx, client, consumer, allocations.UpdateOpts{
		Allocations: map[string]allocations.ProviderAllocationsOpts{
			rp.UUID: {Resources: map[string]int{"VCPU": 4, "MEMORY_MB": 1024}},
		},
		ProjectID: "p1", UserID: "u1", ConsumerGeneration: none, ConsumerType: "INSTANCE",
	}).ExtractErr()
	require.NoError(t, err)
	got, err := allocations.Get(ctx, client, consumer).Extract()
	require.NoError(t, err)
	require.Equal(t, map[string]int{"VCPU": 4, "MEMORY_MB": 1024}, got.Allocations[rp.UUID].Resources)

	// Over capacity (8 VCPU x 2.0 = 16; 4 used): refused, all or nothing.
	err = allocations.Update(ctx, client, uuid.NewString(), allocations.UpdateOpts{
		Allocations: map[string]allocations.ProviderAllocationsOpts{
			rp.UUID: {Resources: map[string]int{"VCPU": 8, "MEMORY_MB": 4000}},
		},
		ProjectID: "p1", UserID: "u1", ConsumerType: "INSTANCE",
	}).ExtractErr()
	require.True(t, gophercloud.ResponseCodeIs(err, 409), "%v", err)

	us, err := resourceproviders.GetUsages(ctx, client, rp.UUID).Extract()
	require.NoError(t, err)
	require.Equal(t, map[string]int{"VCPU": 4, "MEMORY_MB": 1024}, us.Usages)
	pu, err := usages.Get(ctx, client, usages.GetOpts{ProjectID: "p1"}).Extract()
	require.NoError(t, err)
	require.Equal(t, 4, pu.Usages["INSTANCE"]["VCPU"])

	require.NoError(t, allocations.Delete(ctx, client, consumer).ExtractErr())
	us, err = resourceproviders.GetUsages(ctx, client, rp.UUID).Extract()
	require.NoError(t, err)
	require.Equal(t, 0, us.Usages["VCPU"])

	// A provider with children cannot go; the leaf first, then the root.
	err = resourceproviders.Delete(ctx, client, rp.UUID).ExtractErr()
	require.True(t, gophercloud.ResponseCodeIs(err, 409), "%v", err)
	require.NoError(t, resourceproviders.Delete(ctx, client, child.UUID).ExtractErr())
	require.NoError(t, resourceproviders.Delete(ctx, client, rp.UUID).ExtractErr())
}

// TestPlacementCrossSiteWritesRefused: what a browser sends when a page of
// another site submits a form to metalloc-placement is refused (403 in
// Placement's error body), and a text/plain body without Origin gets
// Placement's own 415; nothing is created.
func TestPlacementCrossSiteWritesRefused(t *testing.T) {
	client := placementClient(t)
	post := func(hdr ...string) (int, string) {
		st, _, raw := webtest.Do(t, http.MethodPost, client.Endpoint+"resource_providers", `{"name": "csrf", "x": "="}`,
			append([]string{"X-Auth-Token", "admin"}, hdr...)...)
		return st, string(raw)
	}
	st, body := post("Content-Type", "text/plain", "Origin", "http://evil.example", "Sec-Fetch-Site", "cross-site")
	require.Equal(t, http.StatusForbidden, st, body)
	var doc struct{ Errors []struct{ Detail string } }
	require.NoError(t, json.Unmarshal([]byte(body), &doc), body)
	require.Len(t, doc.Errors, 1, body)
	require.Equal(t, web.CrossSiteMessage, doc.Errors[0].Detail)
	st, body = post("Content-Type", "application/json", "Origin", "null")
	require.Equal(t, http.StatusForbidden, st, body)
	st, body = post("Content-Type", "text/plain")
	require.Equal(t, http.StatusUnsupportedMediaType, st, body)
	require.Contains(t, body, "The media type text/plain is not supported, use application/json")

	page, err := resourceproviders.List(client, nil).AllPages(context.Background())
	require.NoError(t, err)
	all, err := resourceproviders.ExtractResourceProviders(page)
	require.NoError(t, err)
	require.Empty(t, all)
}
