package conductor

import (
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/metalloc/metalloc/config"
)

func f64(v float64) *float64 { return &v }

func TestChooseRatio(t *testing.T) {
	for _, tc := range []struct {
		name               string
		override, existing *float64
		initial, want      float64
	}{
		{"new inventory takes the initial ratio", nil, nil, 16, 16},
		{"existing ratio is kept (operator's PUT)", nil, f64(4), 16, 4},
		{"override wins over an existing ratio", f64(2), f64(4), 16, 2},
		{"override wins over the initial ratio", f64(2), nil, 16, 2},
		{"existing 0.0 counts as missing", nil, f64(0), 1.5, 1.5},
		{"existing 0.0 with override", f64(3), f64(0), 1.5, 3},
		{"override 0.0 is ignored, existing kept", f64(0), f64(4), 16, 4},
		{"override 0.0 is ignored, initial used", f64(0), nil, 16, 16},
		{"negative override ignored", f64(-1), nil, 16, 16},
		{"NaN existing counts as missing", nil, f64(math.NaN()), 16, 16},
		{"initial 0.0 falls back to 1.0", nil, nil, 0, 1},
		{"everything 0.0 still never writes 0.0", f64(0), f64(0), 0, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.want, ChooseRatio(tc.override, tc.existing, tc.initial))
		})
	}
}

func TestRatiosForAndRepair(t *testing.T) {
	r := Ratios{
		Override: map[string]float64{ClassMemoryMB: 1.0, "CUSTOM_ZERO": 0},
		Initial:  map[string]float64{"CUSTOM_GOLD": 2.0, ClassDiskGB: 0},
	}
	require.Equal(t, 16.0, r.For(ClassVCPU, nil), "default initial VCPU")
	require.Equal(t, 1.0, r.For(ClassDiskGB, nil), "invalid initial falls back to the default")
	require.Equal(t, 1.0, r.For(ClassMemoryMB, f64(1.5)), "override")
	require.Equal(t, 2.0, r.For("CUSTOM_GOLD", nil))
	require.Equal(t, 5.0, r.For("CUSTOM_GOLD", f64(5)))
	require.Equal(t, 1.0, r.For("CUSTOM_OTHER", nil), "classes without initial ratio start at 1.0")
	require.Equal(t, 1.0, r.For("CUSTOM_ZERO", nil), "0.0 override ignored")
	require.Equal(t, 16.0, r.Repair(ClassVCPU))
	require.Equal(t, 1.0, r.Repair(ClassMemoryMB))
	require.Equal(t, []string{"allocation_ratios.CUSTOM_ZERO=0.0"}, r.InvalidRatios())
}

func TestFullyReserved(t *testing.T) {
	for _, tc := range []struct {
		total, used int64
		ratio       float64
		want        int64
	}{
		{1, 0, 1, 1},
		{1, 1, 1, 0},
		{8, 0, 16, 8},
		{8, 4, 1, 4},
		{8, 4, 16, 7},  // one VCPU at 16.0 covers 4 used
		{8, 20, 16, 6}, // two needed
		{1024, 1000, 1.5, 1024 - 667},
		{4, 9, 1, 0}, // over-committed: never below 0
		{10, 3, 0, 7},
	} {
		got := FullyReserved(tc.total, tc.used, tc.ratio)
		require.Equal(t, tc.want, got, "total %d used %d ratio %v", tc.total, tc.used, tc.ratio)
		if tc.used > 0 && got > 0 {
			r := tc.ratio
			if r <= 0 {
				r = 1
			}
			require.GreaterOrEqual(t, int64(float64(tc.total-got)*r), tc.used, "capacity covers usage")
			require.Less(t, int64(float64(tc.total-got-1)*r), tc.used, "no spare unit")
		}
	}
}

func TestTrackerConfigFrom(t *testing.T) {
	pb := config.PlacementBackend{
		SyncSchedule: "off", SyncDelay: time.Second, ReportGenericResources: true,
		CPUAllocationRatio:        f64(3),
		InitialCPUAllocationRatio: 16, InitialRAMAllocationRatio: 1.5, InitialDiskAllocationRatio: 1,
		AllocationRatios:        map[string]float64{"custom_gold": 2, "vcpu": 9},
		InitialAllocationRatios: map[string]float64{"custom_silver": 4},
	}
	c := TrackerConfigFrom(pb)
	require.Equal(t, "off", c.SyncSchedule)
	require.True(t, c.ReportGenericResources)
	require.Equal(t, map[string]float64{ClassVCPU: 3, "CUSTOM_GOLD": 2}, c.Ratios.Override)
	require.Equal(t, map[string]float64{ClassVCPU: 16, ClassMemoryMB: 1.5, ClassDiskGB: 1, "CUSTOM_SILVER": 4},
		c.Ratios.Initial)
	d := c.WithDefaults()
	require.Equal(t, 8, d.Concurrency)
	require.Equal(t, 10*time.Second, d.ClaimGrace)
	require.Equal(t, "@every 60s", TrackerConfig{}.WithDefaults().SyncSchedule)
}
