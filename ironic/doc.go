// Package ironic puts metalloc in front of an existing OpenStack Ironic
// (21.4 or later; configuration section ironic, docs/ironic.md): Ironic is the system of record for nodes and drives the
// hardware; metalloc's conductors mirror Ironic's nodes and decide
// allocations; metalloc-api answers for both. This comment is the
// protocol of the mirror and of the proxy; the allocation backend that
// writes metalloc's allocations into Ironic (the journal, the order of
// writes, recovery) is conductor/doc.go's ("In front of Ironic").
// Operators read docs/ironic.md and docs/operations.md "In front of
// Ironic".
//
// # Client
//
// Client is gophercloud's bare-metal client with metalloc's own
// credentials (ironic.auth_strategy: noauth, http_basic, or keystone with
// the keystone section's service user, system-scoped by default), TLS
// verified with ironic.ca_file, one microversion for all its requests
// (ironic.microversion, or the highest both sides support, at least 1.65),
// and Ironic's errors as *Error carrying Ironic's faultstring (IsNotFound,
// IsConflict, IsUnavailable: unreachable, 502, 503, 504). It contacts
// Ironic only when first used: a process starts while Ironic is down.
//
// # The node mirror
//
// The conductors copy Ironic's nodes into metalloc's tables: nodes (uuid,
// name, driver, resource_class, provision and power states and their
// targets, maintenance and its reason, fault, last_error, owner, lessee,
// instance_uuid, conductor_group, properties, extra, description,
// protected, retired, shard), node_traits, and ironic_nodes (per node:
// when Ironic's answer was read, and Ironic's own instance_uuid and
// allocation_uuid). The allocation code reads the mirror as it reads
// standalone nodes: the free predicate, the pick and the traits are the
// same. Two paths write it, both through the SQL function
// metalloc_ironic_mirror (migrations/00025_ironic_mirror.sql):
//
//   - the full sync (Mirror.FullSync): Ironic's allocations (node lists
//     cannot carry allocation_uuid), then every node page by page
//     (ironic.sync_page_size, Ironic's order), then the removal of the
//     nodes Ironic no longer lists (metalloc_ironic_prune);
//   - the refresh of one node (Mirror.Refresh), which metalloc-api runs
//     after every change it proxies for that node, before it answers, so
//     that the next allocation decision sees the change.
//
// Every read of Ironic is stamped with the database clock taken just
// before the request is sent (read_at). A write never replaces a node
// whose stored read is newer: a page read before a refresh cannot undo
// the refresh. A read started after a change Ironic committed sees the
// change, so ordering by read_at orders by what was seen. Unchanged nodes
// are not written (only their read_at), and only changed nodes are
// locked: picks, which skip locked nodes, are not held up by a sync.
//
// Ironic's word wins, except where metalloc holds a node: a node whose
// allocation_id is set keeps metalloc's instance_uuid (Ironic's is in
// ironic_nodes, for the allocation backend to reconcile). A name Ironic
// gives a node is taken from any mirrored node that still has it (a
// rename or a swap in Ironic; that node's own row is corrected when it is
// read). An instance Ironic gives a node is taken likewise from a node
// metalloc does not hold; if metalloc holds it on another node, this node
// gets no instance and is put into maintenance with a reason saying so,
// until a later read finds the two agreeing ("unavailable until the next
// sync": the next read writes Ironic's maintenance back).
//
// A node gone from Ironic (absent from a complete listing that started
// after its last read, or 404 to a refresh by uuid) is removed, with the
// allocation it holds if that is active (Ironic's node deletion takes the
// node's allocation with it). A node held by an allocation still
// allocating is kept: the allocation backend is between its two writes,
// learns from Ironic that the node is gone, and lets go; a later prune
// removes it. Nothing is removed when the listing failed, or when it was
// empty while the mirror is not (credentials that see no node must not
// empty the mirror; a warning is logged).
//
// # The sync lease
//
// One conductor runs the full sync at a time. The lease is the one row of
// ironic_sync_lease, naming its holder (a conductors id). Every conductor
// runs a Syncer: every RenewInterval (conductor.heartbeat_interval) it
// takes or keeps the lease with one compare-and-set (AcquireLease: the
// lease is free, or already its own, or its holder's last renewal is older
// than LeaseTimeout (conductor.heartbeat_timeout), or its holder is a dead
// conductor by metalloc_conductor_alive, the one liveness definition of
// conductor/doc.go). The holder syncs at once when it takes the lease
// (a sync may have died with the previous holder), then on
// ironic.sync_schedule, retrying a failed sync every RenewInterval. Every
// write of the full sync renews the lease in the same statement and
// writes nothing unless its conductor still holds it: a holder that was
// paused and taken for dead changes nothing when it wakes (ErrLeaseLost)
// and stands by. A conductor that stops cleanly releases the lease, so a
// standby takes it at its next try. Refreshes are not guarded: any
// metalloc-api may refresh any node at any time, and read_at orders them
// with the sync's pages.
//
// # The proxy
//
// Front.Middleware is metalloc-api's route-level switch, placed after
// request ids, the access log, CanonicalPaths, the body limit and
// authentication, and before metalloc's handlers. Every request passes
// metalloc's own authentication (api.auth_strategy) before anything is
// forwarded, but the version documents and Ironic's agent routes
// (/v1/lookup, /v1/heartbeat/{node}: PublicRoute), which Ironic serves
// without credentials too. A request metalloc owns (Owned: its
// allocations, a node's allocation, allocation groups, topology, the
// operator page and its summary, metrics) goes on to metalloc's
// handlers, and only at its canonical spelling: a path Ironic would
// resolve to an owned route (IronicPath: repeated slashes, a .json
// suffix, dot segments, percent-encoding, letter case) but spelt
// otherwise is 404 (CanonicalPaths), so metalloc's router and Ironic's
// never disagree about who answers. / and /v1 are Ironic's documents
// with the pair's microversion range (metalloc's own documents while
// Ironic cannot be reached); everything else goes to Ironic whatever
// metalloc registers for it standalone, so routes added to metalloc
// later do not shadow Ironic's. Every /v1 request's microversion is
// checked against the pair's range (406 in Ironic's words outside it;
// "latest" is sent as the pair's highest), and answers carry the pair's
// minimum and maximum.
//
// Proxied requests keep method, path, query, body (already read whole,
// within api.max_request_body_size: a larger one is 413, a shorter one
// than its Content-Length the client's 400) and headers but Expect, and
// carry the credentials Forwarding gives for api.auth_strategy: keystone
// the client's token (Ironic's own rules apply to the caller), http_basic
// metalloc's own ironic.* credentials (the client's password stays in
// metalloc), noauth the request as sent. They gain X-Forwarded-For,
// -Host, -Proto (-Prefix), and metalloc's request id as Ironic's global
// request id; the answer carries metalloc's request id only, an
// informational status (100 Continue) never replaces the final one, and
// links in a JSON answer (and Location) that name Ironic (its endpoint as
// metalloc reaches it, or the base its root document names) are rewritten
// to name metalloc as the client reached it. An Ironic that refuses the
// connection or does not answer within ironic.timeout gives 503 in
// Ironic's error format; nothing is retried or restarted. After a
// successful change to a node (any method but GET, HEAD, OPTIONS under
// /v1/nodes; the node resolved to its uuid through the mirror before the
// request, as the change may rename or delete it) the node is refreshed
// before the answer goes out, and read again with back-off while Ironic
// is still moving it.
package ironic
