package config

import (
	"time"

	"github.com/metalloc/metalloc/auth"
	"github.com/metalloc/metalloc/web"
)

// The defaults of every configuration key that has one, the one place they
// are written: the key registry (keys.go) gives them to viper, the sample
// configuration and docs/configuration.md's table, and each component's WithDefaults
// (Defaults, conductor.Config.WithDefaults) reads them from there.
const (
	DefaultDatabaseMaxConns = 20

	DefaultAPIListen         = "127.0.0.1:6385"
	DefaultAPIMaxLimit       = web.DefaultMaxLimit
	DefaultAPIRequestTimeout = 30 * time.Second
	DefaultAPIMaxWait        = 60 * time.Second
	// A GET of an allocation still allocating that follows the previous
	// answer for it within the window is held until the allocation
	// changes or the hold has passed. The window is short so that only a
	// client polling faster than once a second is held (not openstacksdk's
	// 2 s polls, nor someone running `allocation show` twice); the hold is
	// long so that such a client, queued for seconds behind a busy Ironic,
	// sends about one GET per 10 s rather than one per second
	// (docs/benchmarks.md, 2026-12-04, night).
	DefaultAPIPollWindow      = time.Second
	DefaultAPIPollHold        = 10 * time.Second
	DefaultAPIEventsHeartbeat = 15 * time.Second
	DefaultAPIEventsRetention = time.Hour
	DefaultAPIEventsMaxCount  = 100000

	DefaultPlacementListen = "127.0.0.1:8778"
	// DefaultPlacementMaxAllocationCandidates bounds the candidates one GET
	// /allocation_candidates generates (placement.max_allocation_candidates).
	DefaultPlacementMaxAllocationCandidates = 100000

	// Listener limits of both APIs (web.ServerConfig).
	DefaultReadTimeout  = 60 * time.Second
	DefaultWriteTimeout = 120 * time.Second
	DefaultIdleTimeout  = 120 * time.Second
	// How both APIs stop (api.shutdown_delay, api.shutdown_grace and the
	// placement keys): /readyz 503 for 5 s, time for a load balancer
	// probing every 1-2 s to see it twice, then 30 s for the requests in
	// flight, as conductor.shutdown_grace. The systemd units' TimeoutStopSec
	// covers both and the last answers (configs/systemd_test.go).
	DefaultShutdownDelay      = 5 * time.Second
	DefaultShutdownGrace      = 30 * time.Second
	DefaultAuthStrategy       = auth.StrategyNoAuth
	DefaultMaxRequestBodySize = web.DefaultMaxRequestBodySize

	DefaultKeystoneProjectName    = "service"
	DefaultKeystoneDomainName     = "Default"
	DefaultKeystoneTokenCacheTime = auth.DefaultTokenCacheTime
	DefaultKeystoneTimeout        = 10 * time.Second

	// A conductor writes its heartbeat every DefaultHeartbeatInterval and
	// counts as dead (its rows may be taken over) once it is older than
	// DefaultHeartbeatTimeout (conductor/doc.go).
	DefaultHeartbeatInterval = 10 * time.Second
	// DefaultConductorOfflineRetention keeps a dead conductor's row a week
	// (conductor.offline_retention).
	DefaultConductorOfflineRetention = 7 * 24 * time.Hour
	DefaultHeartbeatTimeout          = 60 * time.Second

	DefaultConductorWorkers           = 16
	DefaultConductorClaimBatch        = 16
	DefaultConductorPollInterval      = time.Second
	DefaultConductorClaimDelay        = 15 * time.Millisecond
	DefaultConductorShutdownGrace     = 30 * time.Second
	DefaultConductorLockedNodeWait    = 2 * time.Second
	DefaultConductorTakeoverSchedule  = "@every 60s"
	DefaultConductorLeaseEndingNotice = 15 * time.Minute
	DefaultConductorMetricsListen     = "127.0.0.1:9464"
	DefaultConductorAllocationBackend = AllocationBackendDatabase

	DefaultPlacementBackendEndpoint     = "http://127.0.0.1:8778"
	DefaultPlacementBackendMode         = PlacementModeAuto
	DefaultPlacementBackendAuthStrategy = PlacementAuthToken
	DefaultPlacementBackendToken        = "admin"
	DefaultPlacementBackendTimeout      = 30 * time.Second
	DefaultPlacementMaxAlternates       = 2
	DefaultPlacementMaxAttempts         = 3
	DefaultPlacementSyncSchedule        = "@every 60s"
	DefaultPlacementSyncDelay           = 200 * time.Millisecond
	DefaultInitialCPUAllocationRatio    = 16.0
	DefaultInitialRAMAllocationRatio    = 1.5
	DefaultInitialDiskAllocationRatio   = 1.0

	DefaultIronicAuthStrategy      = auth.StrategyNoAuth
	DefaultIronicKeystoneScope     = IronicScopeSystem
	DefaultIronicTimeout           = 30 * time.Second
	DefaultIronicSyncSchedule      = "@every 60s"
	DefaultIronicSyncPageSize      = 1000
	DefaultIronicMaxInFlight       = 16
	DefaultIronicAdaptiveLimit     = true
	DefaultIronicAllocationTimeout = 60 * time.Second

	DefaultLogLevel  = "info"
	DefaultLogFormat = "json"

	// DefaultLogFlushInterval 0 writes every log line at once.
	DefaultLogFlushInterval time.Duration = 0
)

// Values of conductor.allocation_backend.
const (
	// AllocationBackendDatabase reserves nodes straight in PostgreSQL.
	AllocationBackendDatabase = "database"
	// AllocationBackendPlacement claims nodes through a Placement API.
	AllocationBackendPlacement = "placement"
)

// Values of placement_backend.mode (allocation.PlacementModeAuto ... name
// the same strings).
const (
	PlacementModeAuto  = "auto"
	PlacementModeLocal = "local"
	PlacementModeHTTP  = "http"
)

// PlacementAuthToken is placement_backend.auth_strategy token: send
// placement_backend.token as X-Auth-Token. The other values are
// auth.StrategyHTTPBasic and auth.StrategyKeystone.
const PlacementAuthToken = "token"

// Values of ironic.keystone_scope.
const (
	// IronicScopeSystem asks a system-scoped token (Ironic's secure RBAC
	// lists every node only to system readers).
	IronicScopeSystem = "system"
	// IronicScopeProject asks a token scoped to keystone.project_name.
	IronicScopeProject = "project"
)

// ScheduleOff disables a robfig/cron schedule key
// (conductor.takeover_schedule, placement_backend.sync_schedule).
const ScheduleOff = "off"
