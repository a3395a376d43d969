package main

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/metalloc/metalloc/loadgen"
)

func TestParseLimitSettings(t *testing.T) {
	t.Parallel()
	got, err := parseLimitSettings("")
	require.NoError(t, err)
	require.Equal(t, []limitSetting{{}}, got)
	require.Nil(t, got[0].env(), "as configured: the conductors' environment untouched")
	got, err = parseLimitSettings("adaptive, 2,8")
	require.NoError(t, err)
	require.Equal(t, []limitSetting{{adaptive: true}, {fixed: 2}, {fixed: 8}}, got)
	require.Equal(t, []string{"METALLOC_IRONIC_ADAPTIVE_LIMIT=false", "METALLOC_IRONIC_MAX_IN_FLIGHT=8"}, got[2].env())
	require.Equal(t, "fixed 8", got[2].String())
	for _, bad := range []string{"0", "fast", "2,,4"} {
		_, err := parseLimitSettings(bad)
		require.Error(t, err, bad)
	}
}

// TestLimitSummary: per client count, the adaptive limit's median against
// the best fixed limit's and against its own rate with the fewest clients.
func TestLimitSummary(t *testing.T) {
	t.Parallel()
	row := func(clients int, l limitSetting, perSecond float64) benchRow {
		return benchRow{nodes: 2000, system: "metalloc", clients: clients, limit: l,
			r: loadgen.Result{Allocate: loadgen.Rate{N: int(perSecond * 10), Duration: 10 * time.Second}}}
	}
	adaptive := limitSetting{adaptive: true}
	rows := []benchRow{
		row(16, adaptive, 12), row(16, limitSetting{fixed: 2}, 13), row(16, limitSetting{fixed: 4}, 10),
		row(64, adaptive, 11), row(64, adaptive, 13), row(64, limitSetting{fixed: 2}, 10),
	}
	var out strings.Builder
	printLimitSummary(&out, rows)
	require.Equal(t, "2000 nodes, 16 clients: adaptive 12.0/s, 92% of the best fixed limit (fixed 2, 13.0/s), 100% of its own rate with 16 clients (12.0/s)\n"+
		"2000 nodes, 64 clients: adaptive 12.0/s, 120% of the best fixed limit (fixed 2, 10.0/s), 100% of its own rate with 16 clients (12.0/s)\n",
		out.String())
}

// TestIntList: --nodes and --concurrency lists.
func TestIntList(t *testing.T) {
	t.Parallel()
	got, err := intList("16, 64,256", 1)
	require.NoError(t, err)
	require.Equal(t, []int{16, 64, 256}, got)
	for _, bad := range []string{"", "0", "16,,64", "x"} {
		_, err := intList(bad, 1)
		require.Error(t, err, bad)
	}
	_, err = intList("2", 4)
	require.Error(t, err, "below the least")
}

// TestRunWindow: the summary's samples are taken from the run's start
// until its allocation phase ends or --duration has passed, not while it
// drains, checks and deletes.
func TestRunWindow(t *testing.T) {
	t.Parallel()
	start := time.Now()
	w := &runWindow{start: start, duration: 45 * time.Second}
	require.True(t, w.open(start.Add(time.Second)))
	w.progress("allocate", 100, 1900)
	require.True(t, w.open(start.Add(44*time.Second)), "allocating within the duration")
	require.False(t, w.open(start.Add(45*time.Second)), "the duration is up")

	w = &runWindow{start: start}
	w.progress("allocate", 1899, 1900)
	require.True(t, w.open(start.Add(time.Hour)), "no duration: until the phase ends")
	w.progress("allocate", 1900, 1900)
	require.False(t, w.open(start.Add(time.Hour)), "the phase's last report")

	w = &runWindow{start: start}
	w.progress("delete", 0, 1900)
	require.False(t, w.open(start.Add(time.Second)), "a later phase")
}
