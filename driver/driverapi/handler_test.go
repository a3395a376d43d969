package driverapi_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/metalloc/metalloc/db/dbtest"
	"github.com/metalloc/metalloc/driver/driverapi"
	"github.com/metalloc/metalloc/web/ironictest"
)

// TestDrivers checks /v1/drivers against what Ironic 21.4 answers for the
// hardware types its live conductors serve: the list (and detail, type,
// fields, with their microversion gates), one driver, its properties, RAID
// logical disk properties and vendor methods; a conductor that died serves
// nothing.
func TestDrivers(t *testing.T) {
	t.Parallel()
	pool := dbtest.New(t)
	s := ironictest.NewIronic(t, driverapi.NewHandler(pool, driverapi.HandlerOptions{PublicEndpoint: ironictest.Base}).Register)
	require.JSONEq(t, `{"drivers":[]}`, string(s.Must(http.StatusOK, http.MethodGet, "/v1/drivers", "1.82", nil).Raw))
	require.Equal(t, "No conductors registered.", s.Must(http.StatusNotFound, http.MethodGet, "/v1/drivers/fake-hardware/properties", "1.82", nil).Fault(t))
	dbtest.Conductor(t, pool, "c2", 0, true)
	dbtest.Conductor(t, pool, "c1", 0, true)
	dbtest.Conductor(t, pool, "dead", time.Hour, true)

	links := func(path string) string {
		return `[{"href":"` + ironictest.Base + `/v1/drivers/` + path + `","rel":"self"},{"href":"` + ironictest.Base + `/drivers/` + path + `","rel":"bookmark"}]`
	}
	require.JSONEq(t, `{"drivers":[
		{"name":"fake-hardware","hosts":["c1","c2"],"links":`+links("fake-hardware")+`,"properties":`+links("fake-hardware/properties")+`,"type":"dynamic"},
		{"name":"ipmi","hosts":["c1","c2"],"links":`+links("ipmi")+`,"properties":`+links("ipmi/properties")+`,"type":"dynamic"}]}`,
		string(s.Must(http.StatusOK, http.MethodGet, "/v1/drivers", "1.82", nil).Raw))
	require.JSONEq(t, `{"drivers":[{"name":"fake-hardware","hosts":["c1","c2"],"links":`+links("fake-hardware")+`},
		{"name":"ipmi","hosts":["c1","c2"],"links":`+links("ipmi")+`}]}`,
		string(s.Must(http.StatusOK, http.MethodGet, "/v1/drivers", "1.13", nil).Raw))

	detail := s.Must(http.StatusOK, http.MethodGet, "/v1/drivers?detail=true", "1.82", nil).Body["drivers"].([]any)
	fake := detail[0].(map[string]any)
	require.Equal(t, "noop", fake["default_network_interface"])
	require.Equal(t, []any{"fake", "no-raid", "agent"}, fake["enabled_raid_interfaces"])
	require.Equal(t, "ipmitool", detail[1].(map[string]any)["default_power_interface"])
	require.Len(t, fake, 5+2*12)
	old := s.Must(http.StatusOK, http.MethodGet, "/v1/drivers/fake-hardware", "1.33", nil).Body
	require.Contains(t, old, "default_storage_interface")
	require.NotContains(t, old, "default_rescue_interface")
	require.NotContains(t, old, "default_bios_interface")

	r := s.Must(http.StatusOK, http.MethodGet, "/v1/drivers/fake-hardware?fields=name,enabled_raid_interfaces", "1.82", nil)
	require.JSONEq(t, `{"name":"fake-hardware","links":`+links("fake-hardware")+`,"enabled_raid_interfaces":["fake","no-raid","agent"]}`, string(r.Raw))
	require.JSONEq(t, `{"drivers":[]}`, string(s.Must(http.StatusOK, http.MethodGet, "/v1/drivers?type=classic", "1.82", nil).Raw))
	for _, tc := range []struct {
		path, ver string
		status    int
		want      string
	}{
		{"/v1/drivers?type=foo", "1.82", 400, `"type" filter must be one of "classic" or "dynamic", if specified.`},
		{"/v1/drivers?detail=true", "1.29", 406, "Request not acceptable. The minimal required API version should be 1.30"},
		{"/v1/drivers?type=dynamic", "1.29", 406, "Request not acceptable. The minimal required API version should be 1.30"},
		{"/v1/drivers?fields=name", "1.76", 406, "Request not acceptable."},
		{"/v1/drivers?fields=name,bogus", "1.82", 400, `Field(s) "bogus" are not valid`},
		{"/v1/drivers?fields=name&detail=true", "1.82", 400, "Can not specify ?detail=True and fields in the same request."},
		{"/v1/drivers?x=1", "1.82", 400, "Unexpected arguments: x"},
		{"/v1/drivers/nope", "1.82", 404, "Could not find the following driver(s) or hardware type(s): nope."},
		{"/v1/drivers/nope/properties", "1.82", 404, "The driver 'nope' is unknown."},
		{"/v1/drivers/nope/raid/logical_disk_properties", "1.82", 404, "The driver 'nope' is unknown."},
		{"/v1/drivers/fake-hardware/raid/logical_disk_properties", "1.11", 406, "Request not acceptable."},
		{"/v1/drivers/nope/vendor_passthru/methods", "1.82", 404, "The driver 'nope' is unknown."},
		{"/v1/drivers/fake-hardware/vendor_passthru?method=foo", "1.82", 400, "No handler for method foo"},
		{"/v1/drivers/fake-hardware/vendor_passthru/foo", "1.82", 400, "No handler for method foo"},
	} {
		require.Equal(t, tc.want, s.Must(tc.status, http.MethodGet, tc.path, tc.ver, nil).Fault(t), tc.path)
	}
	require.Contains(t, s.Must(http.StatusOK, http.MethodGet, "/v1/drivers/ipmi/properties", "1.82", nil).Body, "ipmi_address")
	require.Len(t, s.Must(http.StatusOK, http.MethodGet, "/v1/drivers/fake-hardware/properties", "1.82", nil).Body, 2)
	require.Contains(t, s.Must(http.StatusOK, http.MethodGet, "/v1/drivers/ipmi/raid/logical_disk_properties", "1.82", nil).Body, "raid_level")
	require.JSONEq(t, `{}`, string(s.Must(http.StatusOK, http.MethodGet, "/v1/drivers/ipmi/vendor_passthru/methods", "1.82", nil).Raw))
}
