package config

import (
	"github.com/metalloc/metalloc/auth"
)

// Who reads which section (a key may add readers: see registry).
var (
	everyBinary   = []Binary{BinaryAPI, BinaryConductor, BinaryPlacement, BinaryManage}
	apiReaders    = []Binary{BinaryAPI, BinaryManage}
	placeReaders  = []Binary{BinaryPlacement}
	ksReaders     = []Binary{BinaryAPI, BinaryConductor, BinaryPlacement, BinaryManage}
	condReaders   = []Binary{BinaryConductor}
	pbReaders     = []Binary{BinaryConductor, BinaryManage}
	ironicReaders = []Binary{BinaryAPI, BinaryConductor, BinaryManage}
	strategyDoc   = "Who may call this API (docs/security.md): `noauth` (nobody is checked; refused on a non-loopback listen address unless `allow_insecure_noauth` or `--insecure-noauth`), `http_basic` (the users of `http_basic_auth_user_file`) or `keystone` (`X-Auth-Token` checked against the `keystone` section's Keystone)."
	authStrategys = []string{auth.StrategyNoAuth, auth.StrategyHTTPBasic, auth.StrategyKeystone}
)

// sections introduces each section in the sample configuration, in order.
var sections = []SectionDoc{
	{"database", "The PostgreSQL database every process shares."},
	{"api", "metalloc-api, the Ironic-compatible API."},
	{"placement", "metalloc-placement, the Placement-compatible API (it also reads api.request_timeout)."},
	{"keystone", "Where Keystone is, and metalloc's own service user there: the APIs validate tokens with it (auth_strategy keystone; the user needs the \"service\" role, or system reader, to validate tokens), and conductors use it to call Placement (placement_backend.auth_strategy keystone)."},
	{"conductor", "metalloc-conductor."},
	{"placement_backend", "Used by conductors with allocation_backend: placement (metalloc-placement or OpenStack Placement 8.0). Ratio options keep Nova's names and rules (spec/initial-allocation-ratios.md)."},
	{"ironic", "metalloc in front of an existing OpenStack Ironic (21.4 or later; docs/ironic.md): Ironic keeps the nodes and drives the hardware, the conductors mirror its nodes and allocate in it too, metalloc-api proxies every route metalloc does not own. Set the same section on every metalloc process."},
	{"log", "Logging (zap), for every binary."},
}

// registry is the definition of every key, by section in the order of
// configs/metalloc.yaml.
func registry() []*Key {
	ks := []*Key{
		{Name: "database.url", DefaultText: "$DATABASE_URL", DefaultEnv: "DATABASE_URL", Secret: true, Readers: everyBinary,
			Example: "postgres://metalloc@127.0.0.1:5432/metalloc?sslmode=disable",
			Doc: "PostgreSQL URL (libpq URL or key=value DSN); required. Several hosts for a primary with standbys: " +
				"`postgres://u:pw@db-a:5432,db-b:5432/metalloc?target_session_attrs=read-write` (docs/operations.md, PostgreSQL failover)."},
		{Name: "database.max_conns", Default: DefaultDatabaseMaxConns, Unit: "connections", Readers: everyBinary,
			Doc: "Connection pool size of each process."},

		{Name: "api.listen", Default: DefaultAPIListen, Readers: apiReaders,
			Doc: "Address and port metalloc-api listens on."},
		{Name: "api.public_endpoint", Default: "", DefaultText: "the request's host", Readers: apiReaders,
			Doc: "Base URL used in links and `next` URLs; empty means the request's scheme and Host header."},
		{Name: "api.max_limit", Default: DefaultAPIMaxLimit, Unit: "items", Readers: []Binary{BinaryAPI},
			Doc: "Largest page a list request returns (Ironic's `[api]max_limit`)."},
		{Name: "api.request_timeout", Default: DefaultAPIRequestTimeout, Readers: []Binary{BinaryAPI, BinaryPlacement, BinaryManage},
			Doc: "A request whose database work takes longer answers 503, so that a database that stopped answering cannot hang clients (also metalloc-placement's requests); 0 disables it."},
		{Name: "api.max_wait", Default: DefaultAPIMaxWait, Readers: []Binary{BinaryAPI},
			Doc: "Longest wait a client may ask for with the metalloc extension `Prefer: wait=N` on `POST /v1/allocations` and `GET /v1/allocations/{id}` (docs/without-polling.md); longer asks are cut to it and `Preference-Applied` says so. Keep it below `api.write_timeout`."},
		{Name: "api.poll_window", Default: DefaultAPIPollWindow, Readers: []Binary{BinaryAPI},
			Doc: "A `GET /v1/allocations/{id}` of an allocation still `allocating` that comes less than this long after metalloc-api's previous answer for it is a client polling faster than this: it is held (`api.poll_hold`; docs/without-polling.md). A single GET, and polls this far apart or more (python-ironicclient's `--wait` every 1 s, openstacksdk's every 2 s), are answered at once; 0 answers every GET at once."},
		{Name: "api.poll_hold", Default: DefaultAPIPollHold, Readers: []Binary{BinaryAPI},
			Doc: "A poll (`api.poll_window`) is answered when the allocation changes or after this long, whichever is first: a polling client learns of the change at once and sends about one GET per this interval while it waits. A hold also ends by half the time its request has left under `api.request_timeout`, so that a longer one answers the state then, not a 503; keep it below the clients' own timeouts. 0 answers every GET at once."},
		{Name: "api.events_heartbeat", Default: DefaultAPIEventsHeartbeat, Readers: []Binary{BinaryAPI},
			Doc: "Interval of the comment lines that keep an idle `GET /v1/allocations/events` stream open through proxies."},
		{Name: "api.events_retention", Default: DefaultAPIEventsRetention, Readers: []Binary{BinaryAPI},
			Doc: "The allocation event log that streams resume from (`Last-Event-ID`) keeps events this long (each metalloc-api prunes every minute)."},
		{Name: "api.events_max_count", Default: DefaultAPIEventsMaxCount, Unit: "events", Readers: []Binary{BinaryAPI},
			Doc: "The allocation event log keeps at most this many events (pruned every minute, and at once whenever a tenth of this count more events came)."},
	}
	// metalloc-manage's API client (allocation, allocation-group) reads
	// the API's address, scheme and authentication strategy.
	ks = append(ks, accessKeys("api", true, []Binary{BinaryAPI})...)
	ks = append(ks, serverKeys("api", []Binary{BinaryAPI})...)
	for _, k := range ks {
		switch k.Name {
		case "api.auth_strategy", "api.tls_cert_file", "api.tls_key_file":
			k.Readers = apiReaders
		}
	}

	ks = append(ks,
		&Key{Name: "placement.listen", Default: DefaultPlacementListen, Readers: placeReaders,
			Doc: "Address and port metalloc-placement listens on."},
		&Key{Name: "placement.randomize_allocation_candidates", Default: false, Readers: placeReaders,
			Doc: "A limited `GET /allocation_candidates` returns a random sample instead of the first candidates (Placement's `randomize_allocation_candidates`)."},
		&Key{Name: "placement.max_allocation_candidates", Default: DefaultPlacementMaxAllocationCandidates, Unit: "candidates", Readers: placeReaders,
			Doc: "The most candidates one `GET /allocation_candidates` generates, before `limit` or a random sample (Placement's option of the same name, 2023.2 and later); -1: no bound. An answer in order is written as it is found (its memory does not grow with it); a randomized one is held whole, up to this bound."},
	)
	ks = append(ks, accessKeys("placement", false, placeReaders)...)
	ks = append(ks, serverKeys("placement", placeReaders)...)

	ks = append(ks,
		&Key{Name: "keystone.auth_url", Default: "", Readers: ksReaders,
			Doc: "Keystone's identity endpoint, with or without /v3 (`auth_strategy: keystone`, `placement_backend.auth_strategy: keystone`)."},
		&Key{Name: "keystone.username", Default: "", Readers: ksReaders,
			Doc: "metalloc's service user (needs the `service` role, or system reader, to validate tokens)."},
		&Key{Name: "keystone.password", Default: "", Secret: true, Readers: ksReaders,
			Doc: "The service user's password."},
		&Key{Name: "keystone.project_name", Default: DefaultKeystoneProjectName, Readers: ksReaders,
			Doc: "Project the service user's token is scoped to."},
		&Key{Name: "keystone.user_domain_name", Default: DefaultKeystoneDomainName, Readers: ksReaders,
			Doc: "Domain of the service user."},
		&Key{Name: "keystone.project_domain_name", Default: DefaultKeystoneDomainName, Readers: ksReaders,
			Doc: "Domain of the service user's project."},
		&Key{Name: "keystone.token_cache_time", Default: DefaultKeystoneTokenCacheTime, Readers: ksReaders,
			Doc: "How long a validated token (or a refused one) is trusted before asking Keystone again; a token revoked meanwhile works that long (as keystonemiddleware). At most 10,000 tokens are kept; 0 disables the cache."},
		&Key{Name: "keystone.ca_file", Default: "", Readers: ksReaders,
			Doc: "PEM bundle to verify an https Keystone with; empty: the system's roots."},
		&Key{Name: "keystone.timeout", Default: DefaultKeystoneTimeout, Readers: ksReaders,
			Doc: "Bound on each request to Keystone."},

		&Key{Name: "conductor.hostname", Default: "", DefaultText: "the host name", Readers: condReaders,
			Doc: "Unique name of this conductor, stored in the conductors table and in `allocations.conductor_affinity`. Run several conductors on one host by giving each its own."},
		&Key{Name: "conductor.group", Default: "", Readers: condReaders,
			Doc: "`conductor_group` reported by `GET /v1/conductors`."},
		&Key{Name: "conductor.workers", Default: DefaultConductorWorkers, Unit: "goroutines", Readers: condReaders,
			Doc: "Worker goroutines, each claiming and reserving in batches."},
		&Key{Name: "conductor.claim_batch", Default: DefaultConductorClaimBatch, Unit: "allocations", Readers: condReaders,
			Doc: "Most allocations one transaction claims and reserves."},
		&Key{Name: "conductor.poll_interval", Default: DefaultConductorPollInterval, Readers: condReaders,
			Doc: "How often to look for work when no notification arrives (LISTEN/NOTIFY is the normal wake-up)."},
		&Key{Name: "conductor.claim_delay", Default: DefaultConductorClaimDelay, Readers: condReaders,
			Doc: "After a notification, an idle worker waits this long so that rows arriving together are claimed by one query."},
		&Key{Name: "conductor.heartbeat_interval", Default: DefaultHeartbeatInterval, Readers: condReaders,
			Doc: "How often the conductor refreshes its heartbeat."},
		&Key{Name: "conductor.heartbeat_timeout", Default: DefaultHeartbeatTimeout, Readers: condReaders,
			Doc: "Every heartbeat writes the conductor's expiry, now plus this, into its row; once it has passed the conductor counts as dead for every reader alike (takeover, `GET /v1/conductors`, metrics), and a second process with the same hostname may start (at once, whatever the expiry, when the first one's process died: conductor/doc.go, \"Liveness\")."},
		&Key{Name: "conductor.shutdown_grace", Default: DefaultConductorShutdownGrace, Readers: condReaders,
			Doc: "On SIGTERM or SIGINT: stop claiming, wait this long for in-flight allocations, hand the rest back to the other conductors, go offline. A second signal exits at once."},
		&Key{Name: "conductor.locked_node_wait", Default: DefaultConductorLockedNodeWait, Readers: condReaders,
			Doc: "How long an allocation keeps retrying while every node that fits it is locked by others (other reservations, API updates of those nodes), or with the placement backend not offered by Placement yet (mirrored a moment after it changed), before it goes to `error`."},
		&Key{Name: "conductor.offline_retention", Default: DefaultConductorOfflineRetention, Readers: condReaders,
			Doc: "A conductor row whose expiry passed this long ago is deleted (hourly, by any live conductor): never a live conductor, one that still owns allocating rows or one with a database session open; negative: keep every row (see conductor.Pruner)."},
		&Key{Name: "conductor.takeover_schedule", Default: DefaultConductorTakeoverSchedule, Readers: condReaders,
			Doc: "When to take over the allocating rows of dead conductors (expiry passed, or offline): a robfig/cron spec (`@every 60s`, `*/2 * * * *`) or `off` (a dead conductor's rows then wait for it to come back)."},
		&Key{Name: "conductor.lease_ending_notice", Default: DefaultConductorLeaseEndingNotice, Readers: []Binary{BinaryConductor, BinaryAPI},
			Doc: "How long before an active lease's `end_time` the conductors send the event `lease.ending` on the allocation event stream (docs/leases.md), once per lease; metalloc-api shows it as Blazar's `before_end_date` (set it alike on both)."},
		&Key{Name: "conductor.metrics_listen", Default: DefaultConductorMetricsListen, Readers: condReaders,
			Doc: "Address and port of this conductor's Prometheus `/metrics` listener, which also answers `/healthz` and `/readyz`; give each conductor on a host its own port, or `off`."},
		&Key{Name: "conductor.metrics_tls_cert_file", Default: "", Readers: condReaders,
			Doc: "Serve the metrics listener over TLS with this PEM certificate (chain)."},
		&Key{Name: "conductor.metrics_tls_key_file", Default: "", Readers: condReaders,
			Doc: "The PEM key of `metrics_tls_cert_file`."},
		&Key{Name: "conductor.allocation_backend", Default: DefaultConductorAllocationBackend, Readers: condReaders,
			Values: []string{AllocationBackendDatabase, AllocationBackendPlacement},
			Doc:    "`database`: reserve nodes straight in PostgreSQL; `placement`: mirror nodes into a Placement service and claim through it with Selection objects and alternates (`placement_backend.*`, docs/operations.md \"Placement backend\")."},

		&Key{Name: "placement_backend.endpoint", Default: DefaultPlacementBackendEndpoint, Readers: pbReaders,
			Doc: "The Placement API root the placement backend uses (metalloc-placement or OpenStack Placement 8.0)."},
		&Key{Name: "placement_backend.mode", Default: DefaultPlacementBackendMode, Readers: pbReaders,
			Values: []string{PlacementModeAuto, PlacementModeLocal, PlacementModeHTTP},
			Doc:    "How claims reach Placement: `local` in-process (metalloc-placement's candidate search and allocation write run in the conductor, the claim and the node reservation in one transaction; only when metalloc-placement serves this very database), `http` through the API at `endpoint`, or `auto`: local when the endpoint's version document names this database (`X-Metalloc-Database-Identity`), http otherwise (asked again every 10 s while it cannot be reached)."},
		&Key{Name: "placement_backend.auth_strategy", Default: DefaultPlacementBackendAuthStrategy, Readers: pbReaders,
			Values: []string{PlacementAuthToken, auth.StrategyHTTPBasic, auth.StrategyKeystone},
			Doc:    "How the conductor authenticates to Placement: `token` (send `token` as `X-Auth-Token`), `http_basic` (`username` and `password`) or `keystone` (a token of the `keystone` section's user, renewed before it expires and after a 401)."},
		&Key{Name: "placement_backend.token", Default: DefaultPlacementBackendToken, Secret: true, Readers: pbReaders,
			Doc: "Sent as `X-Auth-Token` with `auth_strategy: token` (`admin` for a noauth Placement)."},
		&Key{Name: "placement_backend.username", Default: "", Readers: pbReaders,
			Doc: "User for `auth_strategy: http_basic`."},
		&Key{Name: "placement_backend.password", Default: "", Secret: true, Readers: pbReaders,
			Doc: "Password for `auth_strategy: http_basic`."},
		&Key{Name: "placement_backend.ca_file", Default: "", Readers: pbReaders,
			Doc: "PEM bundle to verify an https endpoint with; empty: the system's roots."},
		&Key{Name: "placement_backend.timeout", Default: DefaultPlacementBackendTimeout, Readers: pbReaders,
			Doc: "Bound on each Placement request."},
		&Key{Name: "placement_backend.max_alternates", Default: DefaultPlacementMaxAlternates, Unit: "nodes", Readers: pbReaders,
			Doc: "Alternates each Selection list carries besides the chosen node."},
		&Key{Name: "placement_backend.max_attempts", Default: DefaultPlacementMaxAttempts, Unit: "attempts", Readers: pbReaders,
			Doc: "How often one allocation asks Placement for candidates again once every alternate failed, before it goes to `error`."},
		&Key{Name: "placement_backend.sync_schedule", Default: DefaultPlacementSyncSchedule, Readers: pbReaders,
			Doc: "robfig/cron period of the resource tracker's periodic pass (leaked claims released, failed nodes retried; the first one after start is a full pass over every node), or `off` (node changes still sync promptly from the change log, after `sync_delay`)."},
		&Key{Name: "placement_backend.sync_delay", Default: DefaultPlacementSyncDelay, Readers: pbReaders,
			Doc: "Node changes are gathered this long before a prompt sync."},
		&Key{Name: "placement_backend.report_generic_resources", Default: false, Readers: pbReaders,
			Doc: "Also report VCPU, MEMORY_MB and DISK_GB from the node properties `cpus`, `memory_mb`, `local_gb`."},
	)
	for _, r := range []struct{ name, class string }{{"cpu", "VCPU"}, {"ram", "MEMORY_MB"}, {"disk", "DISK_GB"}} {
		ks = append(ks, &Key{Name: "placement_backend." + r.name + "_allocation_ratio", DefaultText: "unset", Readers: pbReaders,
			Example: map[string]string{"cpu": "4.0", "ram": "1.0", "disk": "1.0"}[r.name],
			Doc: "When set (above 0), the allocation ratio of " + r.class + " on every sync; unset keeps the ratio a provider has " +
				"(e.g. one an operator set through the Placement API). 0.0 is refused by `status upgrade-check`."})
	}
	initial := map[string]float64{"cpu": DefaultInitialCPUAllocationRatio, "ram": DefaultInitialRAMAllocationRatio, "disk": DefaultInitialDiskAllocationRatio}
	for _, r := range []struct{ name, class string }{{"cpu", "VCPU"}, {"ram", "MEMORY_MB"}, {"disk", "DISK_GB"}} {
		ks = append(ks, &Key{Name: "placement_backend.initial_" + r.name + "_allocation_ratio", Default: initial[r.name], Readers: pbReaders,
			Doc: "Allocation ratio of " + r.class + " used only when a provider's inventory of it is first created."})
	}
	ks = append(ks,
		&Key{Name: "placement_backend.allocation_ratios", DefaultText: "{}", Readers: pbReaders, Example: "{CUSTOM_BAREMETAL_GOLD: 1.0}",
			Doc: "`*_allocation_ratio` for any resource class, as a map from class to ratio; the named options win for VCPU, MEMORY_MB and DISK_GB. " +
				"In the environment or a flag: `CUSTOM_A=1.0,CUSTOM_B=2.0`."},
		&Key{Name: "placement_backend.initial_allocation_ratios", DefaultText: "{}", Readers: pbReaders, Example: "{}",
			Doc: "`initial_*_allocation_ratio` for any resource class, as a map from class to ratio."},

		&Key{Name: "ironic.endpoint", Default: "", Readers: ironicReaders, Example: "http://ironic.example.net:6385",
			Doc: "Ironic's API root: metalloc in front of that Ironic; empty: standalone metalloc (nothing else of this section is read)."},
		&Key{Name: "ironic.auth_strategy", Default: DefaultIronicAuthStrategy, Readers: ironicReaders, Values: authStrategys,
			Doc: "How metalloc itself authenticates to Ironic (the mirror, allocations, refreshes): `noauth`, `http_basic` (`username`, `password`) or `keystone` (the `keystone` section's user). Proxied requests carry the client's own credentials whatever this says."},
		&Key{Name: "ironic.username", Default: "", Readers: ironicReaders,
			Doc: "User for `auth_strategy: http_basic`."},
		&Key{Name: "ironic.password", Default: "", Secret: true, Readers: ironicReaders,
			Doc: "Password for `auth_strategy: http_basic`."},
		&Key{Name: "ironic.keystone_scope", Default: DefaultIronicKeystoneScope, Readers: ironicReaders,
			Values: []string{IronicScopeSystem, IronicScopeProject},
			Doc:    "Scope of the `keystone` user's token: `system` (Ironic's secure RBAC lists every node and allocation only to system-scoped users: give the user system admin) or `project` (`keystone.project_name`; enough for Ironic's legacy rules with the admin role)."},
		&Key{Name: "ironic.ca_file", Default: "", Readers: ironicReaders,
			Doc: "PEM bundle to verify an https Ironic with (metalloc's requests and proxied ones); empty: the system's roots."},
		&Key{Name: "ironic.timeout", Default: DefaultIronicTimeout, Readers: ironicReaders,
			Doc: "Bound on each request to Ironic, proxied or metalloc's own; a proxied request past it answers 503."},
		&Key{Name: "ironic.microversion", Default: "", DefaultText: "the highest both support", Readers: ironicReaders, Example: "1.82",
			Doc: "Microversion of metalloc's own requests to Ironic (at least 1.65)."},
		&Key{Name: "ironic.sync_schedule", Default: DefaultIronicSyncSchedule, Readers: ironicReaders,
			Doc: "robfig/cron period of the conductors' full sync of Ironic's nodes and allocations (one conductor at a time), or `off` (the sync when a conductor takes the lease, and prompt refreshes, only)."},
		&Key{Name: "ironic.sync_page_size", Default: DefaultIronicSyncPageSize, Unit: "nodes", Readers: ironicReaders,
			Doc: "Nodes per request of the full sync (Ironic's `[api]max_limit` caps it)."},
		&Key{Name: "ironic.max_in_flight", Default: DefaultIronicMaxInFlight, Unit: "requests", Readers: ironicReaders,
			Doc: "Most requests one conductor has in flight to Ironic for allocations at a time (creations, reads, deletions; more wait their turn), and the ceiling of its limit on allocations in flight in Ironic (from the POST to seeing the allocation settled; see `adaptive_limit`)."},
		&Key{Name: "ironic.adaptive_limit", Default: DefaultIronicAdaptiveLimit, Readers: ironicReaders,
			Doc: "Adapt each conductor's limit on allocations in flight in Ironic to Ironic's own settle time (its allocations' `updated_at` minus `created_at`; the confirm latency, POST to the read that finds it settled, when Ironic keeps whole seconds; TCP Vegas's rule between 2 and `max_in_flight`, starting at a quarter of it: 1-3 allocations per conductor kept waiting in Ironic beyond its time without a queue; every conductor probes at half of what it has in flight at once, in each period of the wall clock, and caps its limit when that cost Ironic less than 15 % of its rate), so that Ironic stays near its best rate whatever the load; `false` holds the limit at `max_in_flight`. Metrics: `metalloc_ironic_allocation_limit`, `metalloc_ironic_allocation_queue`, `metalloc_ironic_allocation_limit_cap`, `metalloc_ironic_allocation_in_ironic_seconds`, `metalloc_ironic_allocation_confirm_seconds`."},
		&Key{Name: "ironic.allocation_timeout", Default: DefaultIronicAllocationTimeout, Readers: ironicReaders,
			Doc: "How long one allocation keeps trying nodes in Ironic while Ironic refuses them (each refused node is read again from Ironic at once, so that it is not picked again while it is taken there) and other nodes fit; past it the allocation goes to `error` with Ironic's last reason. An allocation no node fits any more fails at once. Replaces `max_attempts` (removed: setting it is a configuration error saying so)."},

		&Key{Name: "log.level", Default: DefaultLogLevel, Readers: everyBinary,
			Values: []string{"debug", "info", "warn", "error"},
			Doc:    "Least severe level written."},
		&Key{Name: "log.format", Default: DefaultLogFormat, Readers: everyBinary,
			Values: []string{"json", "console"},
			Doc:    "`json` (one object per line) or `console` (metalloc-manage uses console unless told otherwise)."},
		&Key{Name: "log.flush_interval", Default: DefaultLogFlushInterval, Readers: everyBinary,
			Doc: "Buffer log writes and flush at least this often (one write per buffer instead of per line, cheaper under load; a crash loses at most this much); 0 writes every line at once."},
	)
	return ks
}

// accessKeys are the authentication and access-rule keys of one API
// (config.Access). secure gives Ironic's secure-RBAC defaults (api),
// otherwise Placement 8.0's legacy ones (placement).
func accessKeys(section string, secure bool, readers []Binary) []*Key {
	scopeDoc := "oslo.policy's `[oslo_policy] enforce_scope`, with `auth_strategy: keystone`: check each token's scope against the rule's scope types."
	newDoc := "oslo.policy's `[oslo_policy] enforce_new_defaults`: use only the secure-RBAC rules, no deprecated fallback."
	if secure {
		scopeDoc += " On by default, as Ironic from 2023.2 (false/false behaves as Ironic 21.4)."
		newDoc += " On by default, as Ironic from 2023.2."
	} else {
		scopeDoc += " Off by default, as Placement 8.0 (legacy rules: the admin role may do everything)."
		newDoc += " Off by default, as Placement 8.0."
	}
	return []*Key{
		{Name: section + ".auth_strategy", Default: DefaultAuthStrategy, Values: authStrategys, Readers: readers, Doc: strategyDoc},
		{Name: section + ".http_basic_auth_user_file", Default: "", Readers: readers,
			Doc: "Apache htpasswd file of bcrypt hashes (`htpasswd -B`), re-read when it changes; required with `http_basic`."},
		{Name: section + ".allow_insecure_noauth", Default: false, Readers: readers,
			Doc: "Allow `auth_strategy: noauth` on a non-loopback address (also `--insecure-noauth`): anybody who can reach the port is an administrator."},
		{Name: section + ".policy_file", Default: "", Readers: readers,
			Doc: "YAML file overriding single access rules in oslo.policy syntax (`\"baremetal:node:get\": \"role:admin\"`); empty: the defaults."},
		{Name: section + ".enforce_scope", Default: secure, Readers: readers, Doc: scopeDoc},
		{Name: section + ".enforce_new_defaults", Default: secure, Readers: readers, Doc: newDoc},
		{Name: section + ".max_request_body_size", Default: DefaultMaxRequestBodySize, Unit: "bytes", Readers: readers,
			Doc: "Largest request body; larger gets 413 and nothing is stored (oslo.middleware's `max_request_body_size`)."},
	}
}

// serverKeys are the listener keys of one API (web.ServerConfig) but listen.
func serverKeys(section string, readers []Binary) []*Key {
	return []*Key{
		{Name: section + ".tls_cert_file", Default: "", Readers: readers,
			Doc: "PEM certificate (chain); with `tls_key_file`, the API serves HTTPS only (TLS 1.3, or 1.2 with ECDHE AEAD suites only)."},
		{Name: section + ".tls_key_file", Default: "", Readers: readers, Doc: "The PEM key of `tls_cert_file`."},
		{Name: section + ".read_timeout", Default: DefaultReadTimeout, Readers: readers,
			Doc: "Bound on reading a whole request (headers and body); 0: none."},
		{Name: section + ".write_timeout", Default: DefaultWriteTimeout, Readers: readers,
			Doc: "Bound on writing an answer, from the end of the request headers; 0: none."},
		{Name: section + ".idle_timeout", Default: DefaultIdleTimeout, Readers: readers,
			Doc: "How long a keep-alive connection waits for its next request; 0: none."},
		{Name: section + ".shutdown_delay", Default: DefaultShutdownDelay, Readers: readers,
			Doc: "On SIGTERM or SIGINT: `/readyz` answers 503 (`\"server\": \"stopping\"`) at once while every other request is still served, this long, so that load balancers probing `/readyz` move traffic away; answers meanwhile carry `Connection: close` (docs/operations.md, Stopping an API). 0: no delay."},
		{Name: section + ".shutdown_grace", Default: DefaultShutdownGrace, Readers: readers,
			Doc: "After `shutdown_delay` the listener closes (new connections are refused) and the requests in flight get this long to finish (metalloc-api: `Prefer: wait` ones too, while event streams end at once and resume elsewhere with `Last-Event-ID`); at its end open waits are answered with the allocation as it is, and what still runs 5 s later is cut. A second signal exits at once."},
		{Name: section + ".trusted_proxies", Default: []string{}, Readers: readers,
			Doc: "Reverse proxies (addresses or CIDRs, `10.0.0.0/8,192.0.2.7`) whose `Forwarded`, `X-Forwarded-For` and `X-Forwarded-Proto` headers are believed (links, client addresses in logs); from anyone else they are ignored. Empty: nobody's."},
	}
}
