// Package conductor is metalloc-conductor's engine: it registers the process
// in the conductors table and heartbeats, listens for new work, claims
// allocation rows and hands them to a reservation backend, and takes over
// the rows of dead conductors. This comment is the protocol; the code follows
// it in the order given here, and docs/architecture.md shows it from the
// outside.
//
// # Layout
//
// Everything a conductor runs is here and below; metalloc-api links none of
// it (cmd/api TestAPIDoesNotLinkTheEngine). Package allocation and
// allocgroup keep the model, the store, the HTTP handlers and the event hub.
//
//   - conductor.go: Service (Run: register, listen, heartbeat, housekeep,
//     takeover schedule, work, release on stop), Config;
//   - worker.go: the worker loop (worker: run, round, settle), the claim
//     (Service.claim), processing one row, the rows waiting for a locked
//     node (park), the resume; gate.go: claimGate, at most maxClaimers
//     claim statements at a time;
//   - liveness.go: heartbeats, PostOutageGrace, IdleInTransactionTimeout;
//     livelock.go: the liveness lock (registration, the peers' watch);
//   - rows.go: Rows, who owns a row (owned, dead owners, takeover,
//     release), takeover.go: the takeover schedule; drain.go: the drain
//     (RequestDrain, the conductor's side); groups.go: the claim and
//     processing of allocation groups;
//   - leases.go: leases (package lease) started and ended at their times
//     ("Leases" below); leases_backend.go: in front of Ironic and with the
//     placement backend; leases_replace.go, leases_refused.go: failed
//     and refused nodes replaced; leases_handover.go: back-to-back leases;
//   - signals.go: test signals; metrics.go; tracker*.go, ratios.go: the
//     Placement resource tracker;
//   - backend/ (package backend): the reservation backends behind one
//     interface, Backend (the database backend, the placement backend in
//     both modes), allocation groups (GroupReserver), and the SQL that moves
//     an owned row (backend/query.sql); the Ironic backend (backend.Ironic,
//     ironic*.go: in front of Ironic, "In front of Ironic" below);
//   - conductorapi/: GET /v1/conductors, linked by metalloc-api (not the
//     engine).
//
// # The life of an allocation
//
//	POST /v1/allocations                       (allocation.Handler.create)
//	        │  INSERT state=allocating, conductor_affinity=NULL;
//	        │  trigger allocations_notify: NOTIFY metalloc_allocations
//	        ▼
//	  allocating, unowned ──claim (one statement)──▶ allocating, owned by C
//	        ▲                                            │        │
//	        │ release on clean stop                      │        │ C dies:
//	        └────────────────────────────────────────────┘        │ takeover (CAS)
//	                                                     │        ▼
//	                                     reserve (CAS)   │   owned by C'
//	                                    ┌────────────────┤
//	                                    ▼                ▼ fail (CAS)
//	                                 active            error
//	                                    │
//	      DELETE, tear down, node delete│ (metalloc_deallocate)
//	                                    ▼
//	                                  gone
//
// States only move allocating → active | error (trigger
// allocations_state_guard). An active allocation and its node name each
// other (allocations.node_id, nodes.allocation_id and nodes.instance_uuid;
// constraint triggers check it at commit), and each side is unique.
//
// # Claim in one statement
//
// A worker (worker.run, worker.go) wakes on a notification, a queued row or
// its poll tick, and calls Backend.Claim. At most two workers of a
// conductor claim at a time (claimGate, gate.go); a worker that finds both
// busy leaves its claim to them, and one of them claims again as soon as
// its statement returns (Service.claim):
// a burst of notifications costs a few claims of several rows each, not one
// nearly empty claim per notification. Claiming is one UPDATE over a SELECT ...
// ORDER BY id LIMIT n FOR UPDATE SKIP LOCKED of unowned allocating rows,
// setting conductor_affinity to the conductor's id: two conductors never get
// the same row and never wait for each other (claimOnly;
// ClaimAllocations in backend/query.sql).
//
// # Fast and slow paths
//
// The database backend (backend.Database) claims and reserves in the same
// transaction: metalloc_claim_reserve (db/schema.sql) claims up to n rows and,
// for each, picks a free fitting node with metalloc_pick and activates the
// row together with the node (backend.Database.ClaimReserve). That is the
// fast path, one round trip for a batch. Rows for which no node was free at
// that moment come back claimed but unreserved, and the worker runs the slow
// path for each (backend.Database.Process): one short reservation
// transaction per attempt (metalloc_reserve), failing the row with a
// last_error that counts what each filter left (FitStats) when nothing
// fits. While every fitting node is locked by others, Process answers
// Waiting and the row waits without a worker (Service.park, worker.go): it
// stays in flight and is queued again when its retry is due, so the rows
// waiting for locked nodes wait together: each ends
// conductor.locked_node_wait after its first attempt, however many there
// are (BenchmarkLockedRowsTimeToError); the
// rows of one kind of request (class, traits, owner, candidate_nodes) wait
// for one attempt at a time (backend/wait.go: lockedKinds), the first
// after 5 ms, doubling up to 80 ms; a row that has waited locked_node_wait
// goes to error after a last attempt. If the
// fast path fails as a whole for another reason than an outage (a
// constraint race on one row rolls the whole batch back), the database
// backend claims the batch only and sends every row down the slow path,
// which fails the offending row with a reason instead of letting it block
// the batch at every attempt. The placement backend (backend.Placement), in
// mode local (metalloc-placement on this database), has the same fast path
// with Placement's writes in it (metalloc_claim_reserve_placement: for
// each row a free node that has a provider, locked with SKIP LOCKED; the
// picks' providers locked in id order and each pick verified against
// Placement in one statement (flat provider, capacity, traits; a failed
// pick picks again, up to 4 rounds: migration 00042); then, in one
// statement for the batch (migration 00037), the consumers, the
// allocations, the generation bumps, the claim log; then the
// reservations; the claim runs with metalloc.placement_claimed on, so
// that nodes_notify_instance, which would find each node's claim logged
// and log nothing for the resource tracker, is not called: migration
// 00041); the rows it leaves, and every row in mode http, go through
// selections from Placement
// (backend.Placement.ClaimBatch, then Process). A row for which Placement
// offers nothing while the database has nodes that fit it (made available
// a moment ago, not mirrored by the resource tracker yet) waits the same
// way as for locked nodes (Waiting, up to locked_node_wait; the rows of its
// kind together). The claim loop does not know which backend it drives.
//
// A node is picked with FOR UPDATE SKIP LOCKED among the free_nodes view
// (metalloc_node_free, metalloc_node_in_scope, metalloc_node_has_traits: the
// one definition of each predicate, used by the pick, by FitStats and
// FitNodes, by the partial index nodes_free_idx and by the tracker), starting
// at a random node id and wrapping around, so concurrent conductors spread
// over the nodes without sorting them. The pick is one SQL function,
// metalloc_pick (db/schema.sql; migrations/00019_one_pick.sql): the
// name-first rule, candidate_nodes, and the walk, with or without the
// Placement provider of mode local (p_placement_class). Every claim
// statement calls it: metalloc_reserve, metalloc_claim_reserve and
// metalloc_claim_reserve_placement. The walk's start is drawn by one
// function, metalloc_pick_start, uniform over the node id range (the claims
// read the range once per statement; metalloc_pick reads it when called
// without a start). A claimed row is read as a backend takes it through one
// view, allocation_requests (its request and traits), by the claims and by
// backend.Read (resume, takeover). The statements that lock given nodes in
// a given order (a group plan: LockPlanNodes; the local batch's selections:
// PickFirstFree) are not picks: they use the same predicates through
// free_nodes.
//
// # The compare-and-set guard
//
// Every write a conductor makes to a row it claimed is guarded by
// conductor_affinity = me AND state = 'allocating': reserve
// (metalloc_reserve), fail (backend FailAllocation), takeover, release. A
// conductor that lost its row (taken over while it was paused, deleted by the
// API) changes nothing: the update matches no row and the backend reports
// Lost.
//
// # Liveness
//
// Two rules make a conductor dead: its process is gone (the liveness lock,
// seconds), or it has been silent past its expiry (minutes).
//
// The expiry. A conductor writes its own expiry into its row: registration
// and every heartbeat (Service.heartbeat, liveness.go, every
// conductor.heartbeat_interval, default 10 s) set expires_at = now() + its
// conductor.heartbeat_timeout (default 60 s), by the database clock. It is
// alive while online and expires_at > now(): metalloc_conductor_alive(online,
// expires_at), the only definition (db/schema.sql;
// migrations/00020_conductor_expiry.sql), read the same way by registration,
// DeadOwners, TakeOver, the conductors API and its metrics. No reader applies
// a timeout of its own, so an API and a conductor configured differently
// agree on who is alive.
//
// The liveness lock (livelock.go). For its lifetime a conductor holds a
// session-level advisory lock, key (livenessLockClass, its id), on a
// connection of its own outside the pool; PostgreSQL releases it the
// moment that session ends. Every 500 ms (livenessPoll) each conductor
// reads on that connection which peers, alive by their expiry, have their
// lock held (LivenessLocks, pg_locks of this database). A peer it has seen
// holding its lock, under the same registration (id and started_at), and
// then sees free on two consecutive polls of one unbroken session has
// crashed: it ends its expiry now (MarkCrashed, a compare-and-set on that
// registration and on the lock being free still) and takes its rows over
// at once (Service.takeOverDead), again at each poll while rows may be left
// (still locked by the dead process's last statement, or beyond one run),
// without the takeover schedule or the post-outage grace. Once expired it is dead by metalloc_conductor_alive
// for everyone, and TakeOver's compare-and-set is the same as after an
// expiry. The cases:
//
//   - crash (SIGKILL, OOM kill, a reboot or power loss that closed its
//     sockets): the kernel closes the process's sockets, PostgreSQL ends
//     its sessions and frees the lock within milliseconds; peers judge it
//     dead within 0.5 to 1 s and take its rows over. Its supervisor's
//     restart (same hostname) takes the lock at registration and
//     registers at once (Reclaim), whatever the expiry says, with the same
//     id: it resumes those of its rows no peer took first. A process of a
//     hostname whose lock is held is refused (ErrHostnameTaken) while the
//     row is alive by its expiry;
//   - clean stop (SIGTERM): the conductor releases its rows and goes
//     offline, then closes its lock connection: nothing to take over;
//   - silent while its sessions live (SIGSTOP, a partition that leaves the
//     server's end of its connections open, a swap storm): the lock stays
//     held, so only the expiry makes it dead, as before (takeover on the
//     schedule, compare-and-set; its late writes match no row). A
//     process of its hostname registering after the expiry ends the
//     sessions holding that lock (TerminateLivenessHolders) and takes it;
//     the silent process, if it wakes, finds its lock session gone and
//     stops (below). A host whose network dies without closing its sockets
//     is this case until TCP keepalives end its sessions;
//   - PostgreSQL restart or failover (every session ends at once): every
//     lock is free for a moment. A conductor whose lock session broke
//     forgets what it had seen (livenessWatch), opens the connection again,
//     takes its own lock back and writes a heartbeat; it judges a peer
//     again only once it has seen that peer holding its lock anew, so
//     nobody is judged crashed by the restart (no takeover storm); a peer
//     that does not come back is dead by its expiry. The two-poll rule
//     covers a server ending the sessions one by one around a poll;
//   - a lock session that ends while its process lives (terminated by
//     hand, a proxy dropping it): the process takes its lock back within a
//     poll and goes on; peers may have taken its rows meanwhile (their
//     compare-and-set makes its writes to them fail). If another process
//     holds the lock or has registered its hostname since (started_at
//     changed), it stops at once (Run returns ErrLivenessLockLost) without
//     releasing rows or going offline, and its supervisor restarts it:
//     one process per conductor id writes. A write it had in flight at
//     that moment is still guarded by state = 'allocating', so no row is
//     reserved twice;
//   - a conductor of an older release takes no lock: it is never seen
//     holding one, so only its expiry judges it; nor is one that dies
//     before any peer polled after its registration (within 500 ms);
//   - the clock: the lock rule reads no clock (a session ends or it does
//     not); the expiry is now() of the database, never a process's clock.
//
// The lock's second key is the conductor's id as an int4 (lockID): a
// conductor whose id passes 2^31 fails to register.
//
// # Takeover
//
// Every conductor.takeover_schedule (robfig/cron, default @every 60s; runs
// never overlap) each live conductor lists the dead conductors that still own
// allocating rows (Rows.DeadOwners) and moves their rows to itself one at a
// time, in random order, with a compare-and-set: UPDATE ... SET
// conductor_affinity = me WHERE id = $id AND conductor_affinity = $dead AND
// $dead is still dead, skipping a row that is locked right now (Rows.TakeOver).
// One row updated: ours, queued for the workers; none: another conductor
// won, the dead one came back, or the row is busy and the next period
// retries. There is no leader: conductors racing for the same rows share
// them out. A conductor that sees a peer crash (Liveness: its lock free)
// runs the same takeover at once, outside the schedule.
//
// # Post-outage grace
//
// When a conductor could not reach the database, its peers likely could not
// either, and their expiries passed through no fault of theirs. So a
// conductor skips takeover until its own heartbeats have succeeded for
// PostOutageGrace (two heartbeat intervals; liveness.go) since it started
// or the database came back (Service.takeover, inGrace); by then the live
// peers have written theirs. The grace is the expiry rule's: the liveness
// lock rule has its own guard against outages (Liveness, PostgreSQL
// restart).
//
// # Locks a dead conductor holds
//
// Node and allocation row locks die with the database session that holds
// them. PostgreSQL ends the session when the process or its host dies; for a
// process that stalls inside a transaction (paused, swapping, partitioned),
// metalloc-conductor sets idle_in_transaction_session_timeout to
// IdleInTransactionTimeout (the heartbeat timeout; liveness.go) on its
// connections, so its locks are gone by the time its peers judge it dead. Takeover itself never waits on a lock.
//
// # Release on shutdown
//
// On SIGTERM a conductor stops claiming, gives in-flight rows
// conductor.shutdown_grace (default 30 s) to finish, waits for a claim
// statement under way to end, even past the grace (one given up could
// commit after the release: work, worker.go), hands the rest back
// unowned, the rows waiting for a locked node among them (Rows.Release:
// trigger allocations_notify_release wakes the others, who claim them at
// once), marks itself offline and exits. Tests
// wait for these events instead of sleeping: the test signals (signals.go:
// heartbeat, takeover, claimed, reserving, waiting, released), or, for
// conductors run as processes, the log lines each writes. A second
// signal exits at once; the rows are then taken over as a dead conductor's.
//
// # Drain
//
// `metalloc-manage conductor drain HOST` (RequestDrain, drain.go) hands a
// live conductor's rows over while its process keeps running: it sets
// drain_requested_at on the conductor's row (migration 00048) and sends
// NOTIFY on NotifyChannel with DrainNotifyPayload and the conductor's id.
// The conductor starts its drain on that notification (listen), or, if it
// missed it, at its next heartbeat or when its listener reconnects
// (checkDrain). A drain ends Run's work context, not the process's: the
// workers stop claiming and the takeover (schedule and liveness watch)
// stops, in-flight rows get conductor.shutdown_grace, and once a takeover
// run in progress has ended (takeoverMu) the rest are released as at a
// stop (Rows.Release: peers claim them at once; takeover of a drained
// conductor's rows never happens, it is alive, so the rows move only by
// the release and the claims, each a compare-and-set as ever). It then
// writes drained_at and how many rows it released (idleDrained) and idles:
// registered, heartbeating, holding its liveness lock, claiming nothing,
// until it is stopped (release of nothing, offline). A registration (a
// restart) clears the drain; there is no undrain.
//
// # Resume
//
// At start-up, after a database outage, and when the work queue overflowed,
// a conductor queues its own unfinished rows again (Rows.Owned,
// Service.requeueOwned).
//
// # Housekeeping
//
// The claim scans allocations_allocating_idx from its start, and every
// reserved allocation leaves a dead entry there until the table is vacuumed.
// Every housekeepInterval (5 s) each conductor reads the table's dead-row
// count and, at housekeepDeadRows (2,000) or more, runs VACUUM (SKIP_LOCKED)
// allocations (Service.housekeep): autovacuum alone comes once a minute, by
// when a busy system has left tens of thousands of entries for every claim
// to step over. The claim's own plan is fixed (metalloc_claim_reserve sets
// its planner options) so that it never depends on the table's statistics,
// and so is the pick's (metalloc_pick: with a Placement class, its joins
// in the order written over index scans; migration 00028), and the
// placement claim's writes read each inventory and provider by its key
// (migration 00040): a session keeps the plans it made at its first claim,
// perhaps on a fleet of a few nodes.
//
// Nor do the claims' plans depend on the node tables' statistics (issue
// 44, migration 00044). A connection warms up (metalloc_warm_up) when it
// opens, often before the fleet is enrolled, and keeps those plans until
// the next ANALYZE: made while nodes and node_traits were empty when last
// analyzed, every plan costs about the same and the ties went to whole
// scans. Three statements are written so that they have one plan on an
// empty table as on 1,000,000 nodes: each claim's id range (the start of
// the pick's walk) is the two ends of nodes_pkey (ORDER BY id LIMIT 1,
// each way, under the claims' enable_sort and enable_seqscan = off), not
// min and max, which planned on empty tables read all of
// nodes_topology_idx; the pick's trait test reads only the node's traits
// that were asked for (node_id and trait = ANY (p_traits)), so that either
// index of node_traits has a bound on its first column, where the view's
// traits column read all of node_traits_trait_idx for every node the
// walk visited; and the API's insert looks up a new row's node by
// nodes_pkey only when it has one (allocations_events_created, with
// enable_seqscan = off), where a hash join read all of nodes per insert.
// The API's event numbering (metalloc_sequence_allocation_events) has its
// planner options too (migration 00046), with jit = off, as every function
// whose options leave a scan at the disabled-path cost must have, or each
// call compiles its statements (about 100 ms). Options were not enough for
// its UPDATE joined to the unnumbered events: on an allocation_events
// analyzed empty, a join by key and a whole read of allocation_events_pkey
// with the unnumbered events rescanned per row cost the same, and a
// generic plan made then (the API numbers while no allocation exists yet)
// kept the second, 3.9 s a call by the end of a first burst; so it numbers
// each event by its key, one point update per event, the only plan
// (migration 00051). TestClaimPlansIgnoreNodeStatistics (package backend)
// compares every plan of an allocation's life that reads the node tables
// in a session warmed up on empty tables with a new session's on the
// analyzed fleet; TestEventNumberingPlanIgnoresStatistics (package
// allocation) numbers a burst with plans made on an empty table.
//
// # Allocation groups
//
// An allocation group (package allocgroup, table allocation_groups) is
// claimed, owned, taken over and released like an allocation, with the
// same statements on its own table (Rows.ClaimGroups, OwnedGroups,
// TakeOverGroups, Release; conductor/query.sql) and the same
// compare-and-set guard on every write. Groups notify with the payload
// GroupNotifyPayload; while one may be waiting (Service.groupsPending: a
// group notification, a poll tick, a reconnection, a group just claimed)
// each worker claims one group per round after its allocation batch
// (Service.claimGroups) and places it
// itself (backend.GroupReserver.Process): read the free candidates with their
// topology paths (no locks), choose the plans (best fit first), and try
// each in one transaction: lock the missing nodes FOR UPDATE SKIP LOCKED,
// then the group guarded by conductor_affinity = me AND state =
// 'allocating', insert the members already active holding their nodes,
// activate the group. The workers of one conductor share a read of the
// free candidates for up to 500 ms (a hint: the lock re-checks every node,
// a round whose plans all fell short reads afresh, and "nothing fits" is
// only concluded on a fresh read). A group never has part of its
// members: it is active with count members, or in error with none. An
// active group can be grown (PATCH count: back to allocating, unowned); a
// failed grow returns it to active with count = its members. With the
// placement backend the GroupReserver also claims the members in Placement
// (GroupReserver.Placement = the backend.Placement).
//
// # Leases
//
// A lease (package lease, docs/leases.md) has its next move owned like an
// allocation: leases.conductor_affinity. Every leasePoll (200 ms) each
// conductor with the database backend claims the leases whose move is due
// by the database clock (ClaimDueLeases: pending at start_time, active at
// end_time or conductor.lease_ending_notice before it), unowned, its own
// or a dead conductor's (metalloc_conductor_alive: the takeover is in the
// claim itself, no schedule), FOR UPDATE SKIP LOCKED; then makes each move
// in one transaction that starts with a compare-and-set on state and
// affinity (StartLease, EndLease, NoticeLeaseEnding), locks the lease's
// nodes in id order, writes the allocations (metalloc_hold) or lessee, or
// deletes them (metalloc_deallocate), and the event (lease.start,
// lease.ending, lease.end on the allocation event log). A stop or a crash
// mid-move rolls it back; the next claim makes it.
//
// With another backend (leases_backend.go) the start sets every booked
// node's lessee to the project and, under on_start allocate, inserts one
// allocating allocation per free node, that node its only candidate: the
// conductors claim them as any other (made in Ironic through the journal,
// claimed in Placement). In front of Ironic a move first does its part in
// Ironic, outside any transaction, in a goroutine of its own per lease:
// the start sets the lessee in Ironic (Ironic gives an allocation owned by
// a project only nodes that project owns or leases); the end undeploys the
// nodes the project deployed, waits (bounded) until Ironic has them
// available, removes the lessee; then the move's transaction as above. Each
// step is idempotent, read from what Ironic shows, so that the conductor
// that takes over a lease from a dead one simply makes them again; a node
// Ironic refuses to undeploy puts the lease in error (FailLease).
//
// A pending lease's failed nodes (in maintenance, deleted) are replaced
// by lease.Repair under the lease's row lock, in one transaction: found
// every leaseRepairPoll by LeasesToRepair (a node in maintenance at any
// time; a missing row or a flagged lease from leaseRepairAhead before the
// start), and at the start inside the start's transaction, before the
// compare-and-set (leases_replace.go); in front of Ironic also before
// the lessees are set, and again for a node their reads show failed.
// With a backend, a node the backend refuses at the start (its
// allocation in error) is replaced in an active lease by
// lease.ReplaceRefused (leases_refused.go): the swap with a mark on the
// refused allocation (extra lease_replaced_by) in one transaction, the
// replacement lent in Ironic, then its allocation and the refused one's
// deletion in another, each step made again from the mark by whichever
// conductor looks next (LeasesWithRefusedNodes, every leaseRepairPoll).
// Every move is counted once committed, with its lateness by the
// database clock (metrics.go: metalloc_conductor_lease_moves_total,
// metalloc_conductor_lease_lateness_seconds). No affinity is needed: the second
// conductor to check a lease finds nothing left to do. Back-to-back
// leases share a node at one second: the claim takes ends first and a
// claimed batch makes its ends first, and a start that finds a node still
// held by a lease whose end is due rolls back for the next poll
// (leases_handover.go, up to 5 s). A claim takes 4 leases (leaseBatch),
// then another at once while they come full: the moves due together
// spread over the conductors instead of queueing behind one.
//
// # In front of Ironic
//
// (The operator's guide is docs/ironic.md, the failure modes and metrics
// docs/operations.md "In front of Ironic"; this section is the protocol of
// the allocations, ironic/doc.go that of the mirror and the proxy.)
//
// With ironic.endpoint set, Ironic is the system of record for nodes:
// package ironic mirrors them into the nodes table (ironic/doc.go), and
// every allocation metalloc makes is made in Ironic too, with the same
// uuid, name, resource class, traits, owner and extra, on the node
// metalloc chose: backend.Ironic (conductor/backend/ironic*.go) replaces
// the database backend's activation. metalloc's allocation is active only
// once Ironic's copy is active on that node, so a node can be held twice
// neither within one system (each has its own unique constraints) nor
// across them (Ironic refuses a node it has given to another allocation,
// including one made directly in Ironic).
//
// The journal ironic_allocations (migrations/00026_ironic_allocations.sql)
// records what was sent to Ironic, one row per allocation uuid, written
// before the request. Its states:
//
//	creating  the allocation is allocating and holds node_uuid here; the
//	          POST with that node as the only candidate was sent, or is
//	          about to be; the conductor owning the allocation settles it
//	active    active in both, on node_uuid
//	error     in error in both (Ironic refused the last node tried and
//	          keeps its copy in error)
//	deleting  metalloc's allocation is gone; Ironic's copy must go
//	deleted   a tombstone: Ironic confirmed (kept an hour, then removed)
//
// The order of writes of one allocation, each write to metalloc a
// compare-and-set on conductor_affinity = me AND state = 'allocating':
//
//  1. claim and hold (metalloc_ironic_claim_hold, one statement for a
//     batch; metalloc_ironic_hold for one row): the row becomes the
//     conductor's, a free node is picked as standalone (metalloc_pick)
//     and held (metalloc_hold: the node names the allocation, the
//     allocation names the node) while the allocation stays allocating;
//     the journal row is written creating in the same statement;
//  2. POST /v1/allocations to Ironic, the held node the only candidate
//     (at most ironic.max_in_flight requests per conductor), then GET it
//     until Ironic has settled it (first after Ironic's recent settle
//     time, backing off to 1 s); each allocation holds a slot of the
//     conductor's adaptive limit from its POST to that read (below);
//  3. Ironic's copy active on the node: the allocation and its journal row
//     become active in one statement (IronicActivate). Ironic's copy in
//     error (the node taken there, in maintenance, gone, not available,
//     other traits): the node is let go and marked unavailable until
//     Ironic is read again (metalloc_ironic_unhold: maintenance with a
//     reason, its mirror read stamped now so that no older read undoes
//     it), the node is read again from Ironic at once (Mirror.Refresh: the
//     mark gives way to Ironic's word, its instance for a node taken there
//     directly, so that no pick sees it free and the no-fit counts say
//     what it is; a failed read leaves the mark), Ironic's copy in error is
//     deleted, and another node is held and tried (back to 2) while any
//     fits, for up to ironic.allocation_timeout from the first try (time,
//     not a count of nodes: other clients of Ironic taking nodes directly
//     would use a count up while many nodes fit); then the allocation goes
//     to error with Ironic's reason (Ironic keeps its copy in error:
//     journal error). No other node fitting ends in error with why nothing
//     fits (with nothing left in Ironic). A request Ironic refuses outright
//     (the name taken there) fails the allocation at once.
//
// Deletion: the journal's trigger (ironic_allocations_forget) turns the
// row deleting whenever the allocation is deleted in metalloc, whoever
// deletes it (the API, a group's deletion, the mirror's reconciliation),
// in the same transaction, and wakes the conductors (NOTIFY
// metalloc_ironic); each conductor's deleter (backend.Ironic.Run) deletes
// the copy in Ironic (404 counts as done), leasing rows for a round so
// that conductors share them, retrying a refusal (409: the node active or
// moving in Ironic) with back-off. metalloc-api's DELETE (and PATCH) of an
// allocation goes to Ironic first, with the client's credentials, so that
// Ironic's own checks apply and the client's answer comes after both
// systems let go (ironic.Front).
//
// Recovery of a half-way failure:
//
//   - a conductor that dies (or stops) after 1, before or after its POST
//     reached Ironic: the allocation stays allocating, holding its node and
//     owned by the dead conductor; the takeover (or the release on a clean
//     stop, then a claim, which keeps a held node) gives it to another
//     conductor, which repeats 2 for the same node: Ironic answers 201, or
//     409 for the copy already there, which it reads and follows. A copy
//     Ironic has on another node (the conductor died between a refusal and
//     its next try) is deleted and the allocation created again;
//   - a conductor that dies after its POST while the allocation is
//     deleted: the deleter deletes the copy; a POST that reaches Ironic
//     after the deletion (late) creates a copy again, which the full sync's
//     listing finds against the tombstone (backend.Ironic.Reconcile) and
//     which is deleted again;
//   - an allocation active in both that Ironic no longer has (deleted or
//     torn down directly in Ironic, its node deleted): the mirror, reading
//     the node after the activation, sees it without the allocation and
//     deletes metalloc's too (metalloc_ironic_reconcile_nodes); the full
//     sync's listing catches allocations settled in both (active or error)
//     that Ironic no longer lists (Reconcile);
//   - Ironic unreachable (refused, timed out, 5xx): nothing fails. The
//     allocation keeps its node and stays allocating and owned; claims stop
//     (the backend probes Ironic's root every second until it answers);
//     Process waits for Ironic up to 30 s, then leaves the row to a resume.
//     metalloc-api answers 503 for proxied requests; metalloc's own routes
//     go on. When Ironic is back, the held allocations are settled and the
//     unowned ones claimed.
//
// The adaptive limit (backend/ironic_limit.go; issue 44): past some
// concurrency Ironic's conductors congest and settle fewer allocations
// per second, not only later, so each conductor bounds its allocations
// in flight in Ironic (POST sent, not yet seen settled; a cap on HTTP
// requests does not, as an allocation between two reads holds none). The
// limit follows Ironic's own settle time (the allocation's updated_at
// minus its created_at, as Ironic shows it settled: its RPC queue and
// conductor, without the API's round trips nor the pauses between
// metalloc's reads, which muted the signal; the confirm latency, POST
// sent to the read that finds it settled, when Ironic's timestamps keep
// whole seconds, as on MySQL): TCP Vegas's rule, keeping 1-3
// allocations per conductor waiting in Ironic beyond its time without a
// queue (Little's law: the window's rate times what each allocation
// waited past the least recent window mean), with a probe at half of
// what is in flight so that the latency with less queued is measured
// again (one window, then the limit resumes: a probe that went on
// halving while the latency fell took the limit to 1-2 every 10-20 s, as
// Ironic's latency falls with every allocation fewer in flight);
// halved when Ironic fails (down, timed out, 5xx). Every conductor
// probes at once, in each period of the wall clock (a power of two
// seconds, about 16 slot times): a conductor that probed alone kept
// the others' load in Ironic and measured a baseline with a queue
// (the limits' sum at 12-15 where Ironic's knee was at 4). Together,
// a probe also shows whether the upper half of what was in flight
// gained Ironic any rate: when it gained less than 15 %, a cap holds
// the limit's growth at three quarters of it until a later probe shows
// a gain (an Ironic whose rate is flat past its knee gets no more from
// the 1-3 allocations per conductor the queue rule keeps). A bound on the
// queue rather than on the latency's rise, because Ironic's rate keeps
// growing while its latency doubles (bench ironic, whole minutes: best
// with 8 per conductor, its settle time then 6× the least; on a faster
// machine the rate was flat from 2 per conductor, and the limit, at 6-9
// in flight each, within 7 % of the best). It stays
// between 2 and ironic.max_in_flight (its ceiling;
// ironic.adaptive_limit false holds it there). Per conductor: the sum is
// at most conductors × max_in_flight, and since every conductor sees
// Ironic's queue grow and backs off, together they hold Ironic near its
// best concurrency as TCP Vegas flows share a link, with no round trip
// to the database per allocation. Claims are unchanged (up to
// conductor.workers rows per conductor): the rows above the limit wait
// in the conductor, holding their nodes.
//
// Allocation groups: the GroupReserver in Hold mode inserts the members
// allocating, holding the plan's nodes, and leaves the group allocating
// (its domain recorded); every member is then made in Ironic at once
// (backend.Ironic.Groups). All active: the members, then the group, are
// activated in one transaction. Any refused: every held member is removed
// (metalloc_ironic_drop_members: the refused nodes marked, the copies in
// Ironic deleted, the refused nodes read again from Ironic) and the group
// placed again while a placement fits, for up to
// ironic.allocation_timeout, then it fails with Ironic's reason. Members still
// allocating are the group's: a resume or takeover of one drops it (Lost),
// and the group adopts them (AdoptGroupMembers).
//
// Lock order: the mirror's rows (ironic_nodes), nodes, allocations, the
// journal; a mirror write that creates nodes first takes an advisory lock,
// so that creators take turns (migration 00035). The mirror writes ironic_nodes then nodes; the unhold and the
// group drop lock the node's mirror row and the node before the
// allocation; the reconciliation of nodes takes mirror row and node with
// SKIP LOCKED, then the allocation; the journal is written after its
// allocation (the trigger, the activation).
//
// # Lock order
//
// Every path that locks both a node and an allocation takes the node first,
// then the allocation:
//
//   - reservation (metalloc_reserve, metalloc_claim_reserve): the node with
//     FOR UPDATE SKIP LOCKED, then the allocation it activates; the fast
//     path locks its allocation rows first, but with SKIP LOCKED, picks a
//     node for every row (SKIP LOCKED; the batch's own picks passed as
//     metalloc_pick's p_exclude, since its locks do not hide them), then
//     updates the rows and the nodes it already holds in one statement each
//     (metalloc_reserve_batch, migration 00039); it never waits on a node
//     either, so it cannot close a cycle;
//   - DELETE /v1/allocations and DELETE /v1/nodes/{node}/allocation
//     (allocation.Handler.destroy): the allocation is read without a lock,
//     then one statement (metalloc_destroy_allocations, shared by the
//     DELETEs an API receives together) locks every node of the batch in
//     id order, then each allocation (and its group, for a member); if an
//     allocation got a node in between, its request reads and tries again
//     (db.ErrRestart);
//   - node delete, tear down (provision target deleted), removing
//     instance_uuid (package node): the node, then metalloc_deallocate;
//   - backfill (POST /v1/allocations with node): the node, then the new row;
//   - group reservation (backend.GroupReserver): the plan's nodes with FOR
//     UPDATE SKIP LOCKED, then the group row (waiting), then the new
//     member rows; it never waits on a node;
//   - group DELETE (allocgroup.Handler.delete): the members' nodes in id
//     order, the member rows, then the group; if members were added in
//     between, the transaction starts over (db.ErrRestart);
//   - releasing one member (metalloc_deallocate): the node (the caller's),
//     the allocation row, then its group (count lowered, or the group
//     deleted with its last member), then, when the claim log names the
//     allocation, its consumer in this database's metalloc-placement and
//     the providers it allocated from (metalloc_placement_release, as
//     DELETE /allocations/{consumer} locks them: consumer, then providers);
//   - takeover and release touch allocation rows only, with SKIP LOCKED or
//     waiting on nothing else; maintenance changes touch the node only; the
//     placement backend over HTTP claims in Placement first and then
//     reserves through metalloc_reserve; the resource tracker only reads
//     nodes, and in-process (placement.MirrorRead) locks the providers it
//     writes with SKIP LOCKED, waiting for none;
//   - the local Placement fast path (metalloc_claim_reserve_placement): its
//     allocation rows with SKIP LOCKED, then a node for each with SKIP
//     LOCKED (the batch's own picks are passed as metalloc_pick's
//     p_exclude, since its locks do not hide them), then the picks'
//     providers in id order, waiting, as Placement's API writers lock
//     them (none of those waits for a node: metalloc_deallocate locks its
//     node before its providers, the tracker skips locked providers); a
//     failed pick's next rounds lock their providers with SKIP LOCKED,
//     never waiting out of id order (migration 00042); then Placement's
//     rows of the whole batch in one statement, then the rows' and nodes'
//     updates (metalloc_reserve_batch);
//     the local batch (localRound):
//     nodes with SKIP LOCKED, the rows with SKIP LOCKED, then the picked
//     nodes' providers in id order;
//   - a new connection's warm-up (metalloc_warm_up, db.PoolOptions.WarmUp)
//     locks only the node and allocation it inserted itself, node first,
//     nobody else can see them, and it rolls them back; it waits at most
//     100 ms for a table lock.
//
// metalloc_deallocate is the one deallocation. db.InTx retries a
// transaction that still fails with a serialization failure, a deadlock or
// a lock timeout, a bounded number of times, so clients never see them as a
// 500. The race matrix (e2e/racematrix_test.go) runs every pair of these
// operations against each other and checks PostgreSQL's deadlock counter.
//
// Migrations applied while these run (db sync during a rolling upgrade)
// take table locks in their own order (an expand migration may alter
// allocation_events, then replace free_nodes and metalloc_pick), so they
// can deadlock with a pick that goes on to write an event. They run with a
// lock_timeout of 2 s and db sync applies a migration again after a
// deadlock or a lock timeout (db/upgrade.go, upTo): the running
// transaction, if it is the one aborted, is retried by db.InTx.
package conductor
