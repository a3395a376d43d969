// Package config loads metalloc's configuration with viper: one YAML file
// (configs/metalloc.yaml documents every key), every key overridable by a
// METALLOC_<SECTION>_<KEY> environment variable (e.g.
// METALLOC_CONDUCTOR_WORKERS=32) and by command-line flags. DATABASE_URL, when
// set, is the default for database.url.
package config

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/spf13/pflag"
	"github.com/spf13/viper"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// Heartbeat defaults, the one place they are set: a conductor writes its
// heartbeat every DefaultHeartbeatInterval and counts as dead (its rows may
// be taken over) once it is older than DefaultHeartbeatTimeout
// (conductor.heartbeat_interval, conductor.heartbeat_timeout; conductor/doc.go).
const (
	DefaultHeartbeatInterval = 10 * time.Second
	DefaultHeartbeatTimeout  = 60 * time.Second
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
	Log              Log              `mapstructure:"log"`
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
	// Listen is the address:port to serve on (default 127.0.0.1:6385, Ironic's port).
	Listen string `mapstructure:"listen"`
	// PublicEndpoint is the base URL used in links; empty = the request's host.
	PublicEndpoint string `mapstructure:"public_endpoint"`
	// MaxLimit caps list page sizes (default 1000, as Ironic's [api]max_limit).
	MaxLimit int `mapstructure:"max_limit"`
	// RequestTimeout bounds a request's database work (default 30s); past it
	// the request answers 503, so a frozen database cannot hang clients.
	RequestTimeout time.Duration `mapstructure:"request_timeout"`
}

// Placement configures metalloc-placement.
type Placement struct {
	// Listen is the address:port to serve on (default 127.0.0.1:8778,
	// Placement's usual port).
	Listen string `mapstructure:"listen"`
	// RandomizeAllocationCandidates makes a limited GET
	// /allocation_candidates return a random sample (Placement's
	// [placement] randomize_allocation_candidates; default false).
	RandomizeAllocationCandidates bool `mapstructure:"randomize_allocation_candidates"`
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
	// AllocationBackend is "database" (default: reserve nodes straight in
	// PostgreSQL) or "placement" (claim through the Placement API with
	// Selection objects and alternates; see PlacementBackend).
	AllocationBackend string `mapstructure:"allocation_backend"`
	// MetricsListen is the address:port of the conductor's own Prometheus
	// /metrics listener (default 127.0.0.1:9464; "off" disables it).
	MetricsListen string `mapstructure:"metrics_listen"`
}

// PlacementBackend configures how metalloc-conductor allocates through a
// Placement service (metalloc-placement or OpenStack Placement 8.0) and
// mirrors nodes into it (docs/architecture.md;
// the initial-allocation-ratios and Selection-objects specifications).
type PlacementBackend struct {
	// Endpoint is the Placement API root (default http://127.0.0.1:8778).
	Endpoint string `mapstructure:"endpoint"`
	// Token is sent as X-Auth-Token (default "admin", for noauth2).
	Token string `mapstructure:"token"`
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

func defaults(v *viper.Viper) {
	v.SetDefault("database.url", os.Getenv("DATABASE_URL"))
	v.SetDefault("database.max_conns", 20)
	v.SetDefault("api.listen", "127.0.0.1:6385")
	v.SetDefault("api.public_endpoint", "")
	v.SetDefault("api.max_limit", 1000)
	v.SetDefault("api.request_timeout", "30s")
	v.SetDefault("placement.listen", "127.0.0.1:8778")
	v.SetDefault("placement.randomize_allocation_candidates", false)
	v.SetDefault("conductor.hostname", "")
	v.SetDefault("conductor.group", "")
	v.SetDefault("conductor.workers", 16)
	v.SetDefault("conductor.claim_batch", 8)
	v.SetDefault("conductor.poll_interval", "1s")
	v.SetDefault("conductor.claim_delay", "15ms")
	v.SetDefault("conductor.heartbeat_interval", DefaultHeartbeatInterval.String())
	v.SetDefault("conductor.heartbeat_timeout", DefaultHeartbeatTimeout.String())
	v.SetDefault("conductor.shutdown_grace", "30s")
	v.SetDefault("conductor.locked_node_wait", "2s")
	v.SetDefault("conductor.takeover_schedule", "@every 60s")
	v.SetDefault("conductor.metrics_listen", "127.0.0.1:9464")
	v.SetDefault("conductor.allocation_backend", "database")
	v.SetDefault("placement_backend.endpoint", "http://127.0.0.1:8778")
	v.SetDefault("placement_backend.token", "admin")
	v.SetDefault("placement_backend.timeout", "30s")
	v.SetDefault("placement_backend.max_alternates", 2)
	v.SetDefault("placement_backend.max_attempts", 3)
	v.SetDefault("placement_backend.sync_schedule", "@every 60s")
	v.SetDefault("placement_backend.sync_delay", "200ms")
	v.SetDefault("placement_backend.report_generic_resources", false)
	v.SetDefault("placement_backend.initial_cpu_allocation_ratio", 16.0)
	v.SetDefault("placement_backend.initial_ram_allocation_ratio", 1.5)
	v.SetDefault("placement_backend.initial_disk_allocation_ratio", 1.0)
	v.SetDefault("log.level", "info")
	v.SetDefault("log.format", "json")
	v.SetDefault("log.flush_interval", "0s")
}

// Load reads the YAML file at path (optional: "" skips it), then environment
// variables, then the flags in fs whose names are config keys ("api.listen").
func Load(path string, fs *pflag.FlagSet) (Config, error) {
	v := viper.New()
	defaults(v)
	v.SetEnvPrefix("METALLOC")
	v.SetEnvKeyReplacer(strings.NewReplacer(".", "_"))
	v.AutomaticEnv()
	if path != "" {
		v.SetConfigFile(path)
		if err := v.ReadInConfig(); err != nil {
			return Config{}, fmt.Errorf("reading config %s: %w", path, err)
		}
	}
	if fs != nil {
		if err := v.BindPFlags(fs); err != nil {
			return Config{}, err
		}
	}
	var c Config
	if err := v.Unmarshal(&c); err != nil {
		return Config{}, fmt.Errorf("parsing config: %w", err)
	}
	return c, nil
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
