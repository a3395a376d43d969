// Package config loads metalloc's configuration with viper: one YAML file
// (configs/metalloc.yaml documents every key), every key overridable by a
// METALLOC_<SECTION>_<KEY> environment variable (e.g.
// METALLOC_CONDUCTOR_WORKERS=32) and by a --section.key flag on every binary
// that reads it. DATABASE_URL, when set, is the default for database.url.
//
// Each key is defined once, in the registry (keys.go, registry.go): name,
// default (the constants of defaults.go), unit, description, the binaries
// that read it; its type is the type of its field in Config. Viper's
// defaults and environment binding, the flags (AddFlags), the strict
// loader (Load: unknown keys and variables are errors naming the nearest
// valid key), `metalloc-manage config check|show` and the documentation
// (configs/metalloc.yaml, the README's table: SampleYAML, MarkdownTable)
// all come from it.
package config

import (
	"errors"
	"fmt"
	"os"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/metalloc/metalloc/auth"
	"github.com/metalloc/metalloc/web"
)

// Config is the whole metalloc configuration. Durations accept Go syntax
// ("500ms", "10s").
type Config struct {
	Database  Database  `mapstructure:"database"`
	API       API       `mapstructure:"api"`
	Conductor Conductor `mapstructure:"conductor"`
	Placement Placement `mapstructure:"placement"`
	// PlacementBackend configures the conductor's Placement backend
	// (conductor.allocation_backend: placement) and its resource tracker.
	PlacementBackend PlacementBackend `mapstructure:"placement_backend"`
	// Keystone is where tokens are validated (auth_strategy keystone) and
	// the service user metalloc authenticates as (also to Placement with
	// placement_backend.auth_strategy keystone).
	Keystone auth.KeystoneConfig `mapstructure:"keystone"`
	Log      Log                 `mapstructure:"log"`
}

// Access is the authentication, access-rule and request-size settings of
// one API (the api.* and placement.* keys of the same names).
type Access struct {
	// AuthStrategy is noauth (the default), http_basic or keystone
	// (Ironic's auth_strategy; see auth.StrategyNoAuth ...).
	AuthStrategy string `mapstructure:"auth_strategy"`
	// HTTPBasicAuthUserFile is the htpasswd file (bcrypt entries) of
	// http_basic, re-read when it changes.
	HTTPBasicAuthUserFile string `mapstructure:"http_basic_auth_user_file"`
	// AllowInsecureNoAuth lets noauth serve on a non-loopback address
	// (also the --insecure-noauth flag); without it the service refuses
	// to start.
	AllowInsecureNoAuth bool `mapstructure:"allow_insecure_noauth"`
	// PolicyFile is a YAML file of access rules (oslo.policy syntax)
	// overriding single default rules; "" = defaults only.
	PolicyFile string `mapstructure:"policy_file"`
	// EnforceScope and EnforceNewDefaults are oslo.policy's
	// [oslo_policy] options of the same names. Defaults: true for the
	// api section (as Ironic from 2023.2: scope-checked, secure-RBAC
	// rules only), false for placement (as Placement 8.0).
	EnforceScope       bool `mapstructure:"enforce_scope"`
	EnforceNewDefaults bool `mapstructure:"enforce_new_defaults"`
	// MaxRequestBodySize is the largest request body accepted, in bytes
	// (default 114688, oslo.middleware's); larger gets 413.
	MaxRequestBodySize int64 `mapstructure:"max_request_body_size"`
}

// Database configures the PostgreSQL connection.
type Database struct {
	// URL is a libpq URL or DSN. Default: $DATABASE_URL. Required.
	URL string `mapstructure:"url"`
	// MaxConns caps each process's connection pool (default 20).
	MaxConns int32 `mapstructure:"max_conns"`
}

// API configures metalloc-api.
type API struct {
	// ServerConfig: listen is the address:port to serve on (default
	// 127.0.0.1:6385, Ironic's port), plus TLS and timeouts.
	web.ServerConfig `mapstructure:",squash"`
	Access           `mapstructure:",squash"`
	// PublicEndpoint is the base URL used in links; empty = the request's host.
	PublicEndpoint string `mapstructure:"public_endpoint"`
	// MaxLimit caps list page sizes (default 1000, as Ironic's [api]max_limit).
	MaxLimit int `mapstructure:"max_limit"`
	// RequestTimeout bounds a request's database work (default 30s); past it
	// the request answers 503, so a frozen database cannot hang clients.
	RequestTimeout time.Duration `mapstructure:"request_timeout"`
	// MaxWait caps the metalloc extension Prefer: wait=N on POST
	// /v1/allocations and GET /v1/allocations/{ident} (default 60s; keep
	// it below write_timeout).
	MaxWait time.Duration `mapstructure:"max_wait"`
	// EventsHeartbeat is how often an idle GET /v1/allocations/events
	// stream gets a comment line (default 15s).
	EventsHeartbeat time.Duration `mapstructure:"events_heartbeat"`
	// EventsRetention and EventsMaxCount bound the allocation event table
	// streams resume from: older events, and all but the newest
	// EventsMaxCount, are pruned (defaults 1h, 100000).
	EventsRetention time.Duration `mapstructure:"events_retention"`
	EventsMaxCount  int64         `mapstructure:"events_max_count"`
}

// Placement configures metalloc-placement.
type Placement struct {
	// ServerConfig: listen is the address:port to serve on (default
	// 127.0.0.1:8778, Placement's usual port), plus TLS and timeouts.
	web.ServerConfig `mapstructure:",squash"`
	Access           `mapstructure:",squash"`
	// RandomizeAllocationCandidates makes a limited GET
	// /allocation_candidates return a random sample (Placement's
	// [placement] randomize_allocation_candidates; default false).
	RandomizeAllocationCandidates bool `mapstructure:"randomize_allocation_candidates"`
	// MaxAllocationCandidates is the most candidates one GET
	// /allocation_candidates generates, before limit (Placement's
	// [placement] max_allocation_candidates; default 100000, -1 for no
	// bound; see candidate.Finder.SetMax).
	MaxAllocationCandidates int `mapstructure:"max_allocation_candidates"`
}

// Conductor configures metalloc-conductor (see conductor.Config).
type Conductor struct {
	Hostname          string        `mapstructure:"hostname"`
	Group             string        `mapstructure:"group"`
	Workers           int           `mapstructure:"workers"`
	ClaimBatch        int           `mapstructure:"claim_batch"`
	PollInterval      time.Duration `mapstructure:"poll_interval"`
	ClaimDelay        time.Duration `mapstructure:"claim_delay"`
	HeartbeatInterval time.Duration `mapstructure:"heartbeat_interval"`
	HeartbeatTimeout  time.Duration `mapstructure:"heartbeat_timeout"`
	ShutdownGrace     time.Duration `mapstructure:"shutdown_grace"`
	LockedNodeWait    time.Duration `mapstructure:"locked_node_wait"`
	// TakeoverSchedule is a robfig/cron spec ("@every 60s") or "off".
	TakeoverSchedule string `mapstructure:"takeover_schedule"`
	// OfflineRetention is how long a dead conductor's row stays in the
	// conductors table after its last heartbeat (default 168h; negative:
	// forever); see conductor.Pruner.
	OfflineRetention time.Duration `mapstructure:"offline_retention"`
	// AllocationBackend is "database" (default: reserve nodes straight in
	// PostgreSQL) or "placement" (claim through the Placement API with
	// Selection objects and alternates; see PlacementBackend).
	AllocationBackend string `mapstructure:"allocation_backend"`
	// MetricsListen is the address:port of the conductor's own Prometheus
	// /metrics listener (default 127.0.0.1:9464; "off" disables it).
	MetricsListen string `mapstructure:"metrics_listen"`
	// MetricsTLSCertFile and MetricsTLSKeyFile serve /metrics over TLS.
	MetricsTLSCertFile string `mapstructure:"metrics_tls_cert_file"`
	MetricsTLSKeyFile  string `mapstructure:"metrics_tls_key_file"`
}

// PlacementBackend configures how metalloc-conductor allocates through a
// Placement service (metalloc-placement or OpenStack Placement 8.0) and
// mirrors nodes into it (docs/architecture.md;
// the initial-allocation-ratios and Selection-objects specifications).
type PlacementBackend struct {
	// Endpoint is the Placement API root (default http://127.0.0.1:8778).
	Endpoint string `mapstructure:"endpoint"`
	// Mode is how claims reach Placement: "auto" (the default: in-process
	// when the Placement at Endpoint is metalloc-placement on this
	// conductor's database, as the database identity in its version
	// document says; HTTP otherwise), "local" (always in-process: the
	// Placement claim and the node reservation in one transaction) or
	// "http" (always through the API). See allocation.PlacementModeAuto.
	Mode string `mapstructure:"mode"`
	// AuthStrategy is how the conductor authenticates to Placement:
	// "token" (default: send Token as X-Auth-Token, for noauth2),
	// "keystone" (a token of the keystone section's service user, renewed
	// before it expires and after a 401) or "http_basic" (Username and
	// Password).
	AuthStrategy string `mapstructure:"auth_strategy"`
	// Token is sent as X-Auth-Token with auth_strategy token (default
	// "admin", for noauth2).
	Token string `mapstructure:"token"`
	// Username and Password are the http_basic credentials.
	Username string `mapstructure:"username"`
	Password string `mapstructure:"password"`
	// CAFile is a PEM bundle to verify an https endpoint with (default:
	// the system's roots).
	CAFile string `mapstructure:"ca_file"`
	// Timeout bounds each Placement request (default 30s).
	Timeout time.Duration `mapstructure:"timeout"`
	// MaxAlternates is how many alternates each Selection list carries
	// besides the chosen node (default 2, as Nova's
	// [scheduler]max_attempts − 1 with its default of 3).
	MaxAlternates int `mapstructure:"max_alternates"`
	// MaxAttempts bounds how many times one allocation asks Placement for
	// candidates again after every alternate failed (default 3).
	MaxAttempts int `mapstructure:"max_attempts"`
	// SyncSchedule is the resource tracker's robfig/cron period ("@every
	// 60s", the default, or "off"); it also syncs promptly (debounced by
	// SyncDelay) when nodes change (LISTEN metalloc_nodes).
	SyncSchedule string `mapstructure:"sync_schedule"`
	// SyncDelay gathers node changes for this long before a prompt sync
	// (default 200ms).
	SyncDelay time.Duration `mapstructure:"sync_delay"`
	// ReportGenericResources also reports VCPU, MEMORY_MB and DISK_GB from
	// the node's properties cpus, memory_mb and local_gb (default false).
	ReportGenericResources bool `mapstructure:"report_generic_resources"`
	// CPUAllocationRatio, RAMAllocationRatio, DiskAllocationRatio override
	// the ratio of VCPU, MEMORY_MB, DISK_GB on every sync when set (> 0);
	// unset (the default, 0 in the file means "explicitly 0.0", refused by
	// the upgrade check) keeps what the provider has.
	CPUAllocationRatio  *float64 `mapstructure:"cpu_allocation_ratio"`
	RAMAllocationRatio  *float64 `mapstructure:"ram_allocation_ratio"`
	DiskAllocationRatio *float64 `mapstructure:"disk_allocation_ratio"`
	// InitialCPUAllocationRatio (16.0), InitialRAMAllocationRatio (1.5) and
	// InitialDiskAllocationRatio (1.0) apply only when a provider's
	// inventory of that class is first created.
	InitialCPUAllocationRatio  float64 `mapstructure:"initial_cpu_allocation_ratio"`
	InitialRAMAllocationRatio  float64 `mapstructure:"initial_ram_allocation_ratio"`
	InitialDiskAllocationRatio float64 `mapstructure:"initial_disk_allocation_ratio"`
	// AllocationRatios and InitialAllocationRatios generalise the options
	// above to any resource class (e.g. {CUSTOM_BAREMETAL_GOLD: 1.0}); the
	// named options win for their three classes.
	AllocationRatios        map[string]float64 `mapstructure:"allocation_ratios"`
	InitialAllocationRatios map[string]float64 `mapstructure:"initial_allocation_ratios"`
}

// Log configures zap.
type Log struct {
	// Level is debug, info, warn or error (default info).
	Level string `mapstructure:"level"`
	// Format is json or console (default json).
	Format string `mapstructure:"format"`
	// FlushInterval buffers log output and writes it at least this often
	// (default 0: every line is written at once). Buffering saves a write per
	// request under load; a crash can lose up to this much of the log.
	FlushInterval time.Duration `mapstructure:"flush_interval"`
}

// RequireDatabase returns an error naming the key when no database URL is set.
func (c Config) RequireDatabase() error {
	if c.Database.URL == "" {
		return errors.New("database.url is not set: set DATABASE_URL, METALLOC_DATABASE_URL or database.url in the config file")
	}
	return nil
}

// NewLogger builds the zap logger described by l.
func NewLogger(l Log) (*zap.Logger, error) {
	var zc zap.Config
	if l.Format == "console" {
		zc = zap.NewDevelopmentConfig()
	} else {
		// zap's production sampling: per second, the first 100 lines with
		// the same level and message, then every 100th, so that access
		// logs under load do not cost more than the requests.
		zc = zap.NewProductionConfig()
		zc.EncoderConfig.TimeKey = "time"
		zc.EncoderConfig.EncodeTime = zapcore.ISO8601TimeEncoder
	}
	lvl, err := zapcore.ParseLevel(l.Level)
	if err != nil {
		return nil, fmt.Errorf("log.level: %w", err)
	}
	zc.Level = zap.NewAtomicLevelAt(lvl)
	if l.FlushInterval <= 0 {
		return zc.Build()
	}
	// Buffer log writes (one write call per buffer, not per line): Sync,
	// called at shutdown, flushes; a crash loses at most FlushInterval.
	var enc zapcore.Encoder = zapcore.NewJSONEncoder(zc.EncoderConfig)
	if l.Format == "console" {
		enc = zapcore.NewConsoleEncoder(zc.EncoderConfig)
	}
	ws := &zapcore.BufferedWriteSyncer{WS: zapcore.Lock(os.Stderr), Size: 256 << 10, FlushInterval: l.FlushInterval}
	core := zapcore.NewCore(enc, ws, zc.Level)
	if zc.Sampling != nil {
		core = zapcore.NewSamplerWithOptions(core, time.Second, zc.Sampling.Initial, zc.Sampling.Thereafter)
	}
	return zap.New(core, zap.AddCaller(), zap.AddStacktrace(zapcore.ErrorLevel)), nil
}
