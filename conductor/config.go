package conductor

import (
	"cmp"
	"errors"
	"fmt"
	"os"
	"strconv"
	"time"

	"github.com/metalloc/metalloc/buildinfo"
	"github.com/metalloc/metalloc/conductor/backend"
	"github.com/metalloc/metalloc/config"
	"github.com/metalloc/metalloc/db"
	"github.com/metalloc/metalloc/placement/client"
)

// Config tunes a Conductor. Zero values take the defaults of the
// configuration keys named (config.Defaults; WithDefaults is where they are
// applied). NewConfig builds it from the loaded configuration.
type Config struct {
	// Hostname identifies the conductor in the conductors table and in
	// conductor_affinity (conductor.hostname). Defaults to os.Hostname().
	Hostname string
	// Group is the conductor_group reported by GET /v1/conductors
	// (conductor.group, "").
	Group string
	// Workers is how many worker goroutines claim and reserve
	// (conductor.workers, 16).
	Workers int
	// ClaimBatch is the most rows one claim-and-reserve transaction takes
	// (conductor.claim_batch, 16).
	ClaimBatch int
	// PollInterval is how often to look for work without a notification
	// (conductor.poll_interval, 1s).
	PollInterval time.Duration
	// ClaimDelay is how long a notification waits before claiming, so that
	// rows arriving together are claimed by one query
	// (conductor.claim_delay, 15ms).
	ClaimDelay time.Duration
	// HeartbeatInterval is how often the conductor row is refreshed
	// (conductor.heartbeat_interval, config.DefaultHeartbeatInterval: 10s).
	HeartbeatInterval time.Duration
	// HeartbeatTimeout is how long after its last heartbeat the conductor
	// counts as dead: every heartbeat writes its expiry, now plus this, into
	// the conductor's row, and everyone reads liveness from there
	// (metalloc_conductor_alive; conductor.heartbeat_timeout,
	// config.DefaultHeartbeatTimeout: 60s).
	HeartbeatTimeout time.Duration
	// ShutdownGrace bounds how long a stop waits for in-flight allocations
	// (conductor.shutdown_grace, 30s).
	ShutdownGrace time.Duration
	// LockedNodeWait is how long an allocation keeps retrying while every
	// node that fits it is locked by others (reservations, API updates)
	// before it goes to error (conductor.locked_node_wait, 2s).
	LockedNodeWait time.Duration
	// TakeoverSchedule is when to take over the allocating rows of dead
	// conductors: a robfig/cron spec or "off"
	// (conductor.takeover_schedule, "@every 60s").
	TakeoverSchedule string
	// LeaseEndingNotice is how long before a lease's end_time the event
	// lease.ending is sent (conductor.lease_ending_notice, 15m).
	LeaseEndingNotice time.Duration
	// Version is reported in the conductors table (default: this
	// binary's, buildinfo).
	Version string
	// Backend is how allocations get their node: BackendDatabase (the
	// default: reserve straight in PostgreSQL) or BackendPlacement (claim
	// through Placement with Selection objects and alternates)
	// (conductor.allocation_backend).
	Backend string
	// Placement is the Placement service the placement backend claims
	// through (required with BackendPlacement).
	Placement *client.Client
	// PlacementMaxAlternates is how many alternates each selection carries
	// besides the chosen node (placement_backend.max_alternates, 2;
	// negative: none; placement backend only).
	PlacementMaxAlternates int
	// PlacementMaxAttempts is how many times one allocation asks Placement
	// for candidates before it goes to error
	// (placement_backend.max_attempts, 3; placement backend only).
	PlacementMaxAttempts int
	// PlacementMode is backend.PlacementModeAuto (the default),
	// PlacementModeLocal or PlacementModeHTTP (placement_backend.mode;
	// placement backend only).
	PlacementMode string
	// Ironic, when set, is the Ironic backend (metalloc in front of Ironic:
	// ironic.endpoint; backend.NewIronic): allocations and groups are made
	// in Ironic too. Backend must then be BackendDatabase (the nodes are
	// the mirror of Ironic's).
	Ironic *backend.Ironic
}

// Allocation backends (Config.Backend; conductor.allocation_backend).
const (
	// BackendDatabase reserves nodes straight in PostgreSQL.
	BackendDatabase = config.AllocationBackendDatabase
	// BackendPlacement claims nodes through the Placement API.
	BackendPlacement = config.AllocationBackendPlacement
)

// NewConfig is the conductor's Config from the loaded configuration (the
// conductor and placement_backend sections), claiming through pc with the
// placement backend. Unset (zero) values are left for WithDefaults.
func NewConfig(cfg config.Config, pc *client.Client) Config {
	c, pb := cfg.Conductor, cfg.PlacementBackend
	return Config{
		Hostname: c.Hostname, Group: c.Group, Workers: c.Workers, ClaimBatch: c.ClaimBatch,
		PollInterval: c.PollInterval, ClaimDelay: c.ClaimDelay, HeartbeatInterval: c.HeartbeatInterval,
		HeartbeatTimeout: c.HeartbeatTimeout, ShutdownGrace: c.ShutdownGrace,
		LockedNodeWait: c.LockedNodeWait, TakeoverSchedule: c.TakeoverSchedule, LeaseEndingNotice: c.LeaseEndingNotice,
		Backend: c.AllocationBackend, Placement: pc,
		PlacementMaxAlternates: pb.MaxAlternates, PlacementMaxAttempts: pb.MaxAttempts, PlacementMode: pb.Mode,
	}
}

// WithDefaults returns c with zero fields set to their defaults: those of
// their configuration keys (config.Defaults), the host name, this build's
// version. It is the only place a conductor's defaults are applied.
func (c Config) WithDefaults() Config {
	d := NewConfig(config.Defaults(), nil)
	if c.Hostname == "" {
		c.Hostname, _ = os.Hostname()
	}
	setDefault(&c.Workers, d.Workers)
	setDefault(&c.ClaimBatch, d.ClaimBatch)
	setDefault(&c.PollInterval, d.PollInterval)
	setDefault(&c.ClaimDelay, d.ClaimDelay)
	setDefault(&c.HeartbeatInterval, d.HeartbeatInterval)
	setDefault(&c.HeartbeatTimeout, d.HeartbeatTimeout)
	setDefault(&c.ShutdownGrace, d.ShutdownGrace)
	setDefault(&c.LockedNodeWait, d.LockedNodeWait)
	setDefault(&c.TakeoverSchedule, d.TakeoverSchedule)
	setDefault(&c.LeaseEndingNotice, d.LeaseEndingNotice)
	setDefault(&c.Backend, d.Backend)
	if c.PlacementMaxAlternates == 0 { // negative: no alternates
		c.PlacementMaxAlternates = d.PlacementMaxAlternates
	}
	setDefault(&c.PlacementMaxAttempts, d.PlacementMaxAttempts)
	setDefault(&c.PlacementMode, d.PlacementMode)
	if c.Version == "" {
		c.Version = buildinfo.Get().Version
	}
	return c
}

// setDefault sets *v to def when it is zero or, for a number, negative.
func setDefault[T cmp.Ordered](v *T, def T) {
	var zero T
	if *v <= zero {
		*v = def
	}
}

// Validate reports configuration errors, naming the field.
func (c Config) Validate() error {
	if c.Hostname == "" {
		return errors.New("conductor.hostname: must not be empty")
	}
	if c.HeartbeatTimeout <= c.HeartbeatInterval {
		return fmt.Errorf("conductor.heartbeat_timeout (%s) must exceed conductor.heartbeat_interval (%s)",
			c.HeartbeatTimeout, c.HeartbeatInterval)
	}
	if _, err := parseSchedule(c.TakeoverSchedule); err != nil {
		return err
	}
	if c.Ironic != nil && c.Backend != BackendDatabase {
		return fmt.Errorf("conductor.allocation_backend: %q with ironic.endpoint set; in front of Ironic it must be %q", c.Backend, BackendDatabase)
	}
	switch c.Backend {
	case BackendDatabase:
	case BackendPlacement:
		if c.Placement == nil {
			return errors.New("conductor.allocation_backend: placement needs a Placement client (placement_backend.endpoint)")
		}
		if !backend.ValidPlacementMode(c.PlacementMode) {
			return fmt.Errorf("placement_backend.mode: %q is none of %q, %q, %q", c.PlacementMode,
				backend.PlacementModeAuto, backend.PlacementModeLocal, backend.PlacementModeHTTP)
		}
	default:
		return fmt.Errorf("conductor.allocation_backend: %q is neither %q nor %q", c.Backend, BackendDatabase, BackendPlacement)
	}
	return nil
}

// PoolOptions adjusts the conductor's database pool: PostgreSQL ends a
// conductor session that sits in a transaction for longer than the
// heartbeat timeout (a stalled or paused process), so that the row locks it
// holds are gone by the time peers take its allocations over; the sessions
// are named "<application name> <hostname>" in pg_stat_activity (when that
// fits application_name's 63 bytes); new connections are warmed up
// (db.PoolOptions.WarmUp).
func (c Config) PoolOptions(opts *db.PoolOptions) {
	c = c.WithDefaults()
	opts.RuntimeParams = map[string]string{
		"idle_in_transaction_session_timeout": strconv.FormatInt(IdleInTransactionTimeout(c.HeartbeatTimeout).Milliseconds(), 10),
	}
	if name := opts.ApplicationName + " " + c.Hostname; len(name) <= 63 {
		opts.ApplicationName = name
	}
	opts.WarmUp = true // its first claims run on warm backends
}
