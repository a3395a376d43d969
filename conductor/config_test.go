package conductor

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/metalloc/metalloc/buildinfo"
	"github.com/metalloc/metalloc/config"
	"github.com/metalloc/metalloc/db"
)

// TestConfigDefaultsAreTheKeys: WithDefaults fills a zero Config with the
// defaults of the configuration keys (config.Defaults, the one source), so
// a conductor built in code and one started from an empty file agree.
func TestConfigDefaultsAreTheKeys(t *testing.T) {
	t.Parallel()
	got := Config{}.WithDefaults()
	want := NewConfig(config.Defaults(), nil)
	want.Hostname, _ = os.Hostname()
	want.Version = buildinfo.Get().Version
	require.Equal(t, want, got)
	require.Equal(t, config.DefaultConductorWorkers, got.Workers)
	require.Equal(t, config.DefaultHeartbeatTimeout, got.HeartbeatTimeout)
	require.Equal(t, config.DefaultPlacementMaxAlternates, got.PlacementMaxAlternates)
	require.Equal(t, -1, Config{PlacementMaxAlternates: -1}.WithDefaults().PlacementMaxAlternates, "negative: no alternates")
}

// TestNewConfigFromFile: every conductor and placement_backend key the
// conductor takes reaches its Config (no field copied by hand in
// cmd/conductor), and PoolOptions derives the session settings from it.
func TestNewConfigFromFile(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "metalloc.yaml")
	require.NoError(t, os.WriteFile(path, []byte(`conductor:
  hostname: c-7
  group: g
  workers: 3
  claim_batch: 5
  poll_interval: 7s
  claim_delay: 9ms
  heartbeat_interval: 11s
  heartbeat_timeout: 13s
  shutdown_grace: 17s
  locked_node_wait: 19s
  takeover_schedule: "@every 23s"
  lease_ending_notice: 29s
  allocation_backend: placement
placement_backend:
  max_alternates: 4
  max_attempts: 6
  mode: http
`), 0o600))
	cfg, err := config.Load(path, nil)
	require.NoError(t, err)
	require.Equal(t, Config{
		Hostname: "c-7", Group: "g", Workers: 3, ClaimBatch: 5, PollInterval: 7 * time.Second,
		ClaimDelay: 9 * time.Millisecond, HeartbeatInterval: 11 * time.Second, HeartbeatTimeout: 13 * time.Second,
		ShutdownGrace: 17 * time.Second, LockedNodeWait: 19 * time.Second, TakeoverSchedule: "@every 23s", LeaseEndingNotice: 29 * time.Second,
		Backend: BackendPlacement, PlacementMaxAlternates: 4, PlacementMaxAttempts: 6, PlacementMode: "http",
	}, NewConfig(cfg, nil))

	opts := db.PoolOptions{ApplicationName: "metalloc-conductor"}
	NewConfig(cfg, nil).PoolOptions(&opts)
	require.Equal(t, "metalloc-conductor c-7", opts.ApplicationName)
	require.Equal(t, map[string]string{"idle_in_transaction_session_timeout": "13000"}, opts.RuntimeParams)
}
