-- +goose Up
-- Kind: expand. New tables, functions and a trigger only.
-- The Ironic allocation backend (conductor/backend.Ironic; the protocol is
-- conductor/doc.go, "In front of Ironic"): every allocation metalloc makes
-- in front of Ironic is made in Ironic too, with the same uuid, on the node
-- metalloc chose, and is active in metalloc only once it is active in
-- Ironic on that node.
--
-- ironic_allocations is the journal of what metalloc has (or may have)
-- sent to Ironic, one row per allocation uuid, written before the request:
--   creating  metalloc holds node_uuid for the allocation (allocating) and
--             has sent, or is about to send, POST /v1/allocations with it as
--             the only candidate; the conductor that owns the allocation
--             settles it;
--   active    active in both, on node_uuid (written with the activation);
--   error     in error in both (Ironic refused the last node tried and keeps
--             its allocation in error, as metalloc does);
--   deleting  metalloc's allocation is gone (any path: the API, a group's
--             deletion, the mirror's reconciliation): Ironic's must be
--             deleted; conductors do it (retry_at paces them);
--   deleted   a tombstone: Ironic answered the DELETE. Kept for a while so
--             that the full sync can delete a copy a late POST created
--             after all (a request of a conductor that died may reach
--             Ironic after its deletion), then removed.
-- The trigger below turns a row into deleting when its allocation is
-- deleted, in the same transaction, whoever deletes it.
CREATE TABLE ironic_allocations (
    uuid        uuid PRIMARY KEY,
    node_uuid   uuid,
    state       text NOT NULL
                CHECK (state IN ('creating', 'active', 'error', 'deleting', 'deleted')),
    attempts    integer NOT NULL DEFAULT 1,
    last_error  text,
    retry_at    timestamptz NOT NULL DEFAULT now(),
    created_at  timestamptz NOT NULL DEFAULT now(),
    updated_at  timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX ironic_allocations_deleting_idx ON ironic_allocations (retry_at) WHERE state = 'deleting';
CREATE INDEX ironic_allocations_deleted_idx ON ironic_allocations (updated_at) WHERE state = 'deleted';

-- +goose StatementBegin
-- Allocations deleted in metalloc: their Ironic copies must go (deleting),
-- and the conductors are told (NOTIFY metalloc_ironic).
CREATE FUNCTION ironic_allocations_forget() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    UPDATE ironic_allocations j
       SET state = 'deleting', retry_at = now(), updated_at = now()
      FROM gone g
     WHERE j.uuid = g.uuid AND j.state IN ('creating', 'active', 'error');
    IF FOUND THEN
        PERFORM pg_notify('metalloc_ironic', 'delete');
    END IF;
    RETURN NULL;
END;
$$;
-- +goose StatementEnd

CREATE TRIGGER allocations_ironic_forget AFTER DELETE ON allocations
    REFERENCING OLD TABLE AS gone
    FOR EACH STATEMENT EXECUTE FUNCTION ironic_allocations_forget();

-- +goose StatementBegin
-- metalloc_ironic_intent records that allocation p_id (allocating, owned by
-- p_me, holding node p_node_id) is about to be sent to Ironic on that node:
-- a new journal row, or a creating one (or an old tombstone of the same
-- uuid) moved to this node, counting the nodes tried. It returns the
-- attempts, or NULL when the allocation is no longer p_me's on that node
-- (lost) and -1 when an earlier allocation with the same uuid is still
-- being deleted in Ironic (try again later).
CREATE FUNCTION metalloc_ironic_intent(p_id bigint, p_me bigint, p_node_id bigint)
RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    v_uuid uuid;
    v_node uuid;
    v_attempts integer;
BEGIN
    SELECT a.uuid, n.uuid INTO v_uuid, v_node
      FROM allocations a JOIN nodes n ON n.id = a.node_id
     WHERE a.id = p_id AND a.conductor_affinity = p_me AND a.state = 'allocating' AND a.node_id = p_node_id;
    IF v_uuid IS NULL THEN
        RETURN NULL;
    END IF;
    INSERT INTO ironic_allocations AS j (uuid, node_uuid, state)
    VALUES (v_uuid, v_node, 'creating')
    ON CONFLICT (uuid) DO UPDATE
       SET node_uuid = EXCLUDED.node_uuid, state = 'creating', last_error = NULL, updated_at = now(),
           attempts = CASE WHEN j.state = 'deleted' THEN 1
                           WHEN j.node_uuid IS DISTINCT FROM EXCLUDED.node_uuid THEN j.attempts + 1
                           ELSE j.attempts END
     WHERE j.state IN ('creating', 'deleted')
    RETURNING j.attempts INTO v_attempts;
    RETURN coalesce(v_attempts, -1);
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- metalloc_ironic_claim_hold is the Ironic backend's claim: up to p_batch
-- unowned allocating rows (not group members: their group places them)
-- become p_me's, oldest first (FOR UPDATE SKIP LOCKED), and each gets a
-- free node held for it (metalloc_pick, metalloc_hold) without being
-- activated: it stays allocating, naming the node, until Ironic's copy is
-- active there. The journal row is written in the same statement
-- (metalloc_ironic_intent). A row that already holds a node (handed back
-- by a stopping conductor) keeps it. out_node_id is NULL for a row left
-- without a node (none free now, or an earlier allocation with its uuid
-- still being deleted in Ironic): the backend processes it further.
CREATE FUNCTION metalloc_ironic_claim_hold(p_me bigint, p_batch integer)
RETURNS TABLE (out_id bigint, out_node_id bigint)
LANGUAGE plpgsql
SET plan_cache_mode = force_generic_plan
SET enable_bitmapscan = off
SET enable_sort = off
SET jit = off
AS $$
DECLARE
    r record;
    v_node bigint;
    v_lo bigint;
    v_hi bigint;
BEGIN
    SELECT coalesce(min(n.id), 0), coalesce(max(n.id), 0) INTO v_lo, v_hi FROM nodes n;
    FOR r IN
        SELECT v.*, c.node_id AS held
          FROM (SELECT a.id, a.node_id FROM allocations a
                 WHERE a.state = 'allocating' AND a.conductor_affinity IS NULL AND a.group_id IS NULL
                 ORDER BY a.id
                 LIMIT p_batch
                   FOR UPDATE OF a SKIP LOCKED) c
          CROSS JOIN LATERAL (SELECT q.* FROM allocation_requests q WHERE q.id = c.id OFFSET 0) v
    LOOP
        v_node := r.held;
        IF v_node IS NULL AND NOT EXISTS (SELECT 1 FROM ironic_allocations j
                                           WHERE j.uuid = r.uuid AND j.state = 'deleting') THEN
            SELECT p.node_id INTO v_node
              FROM metalloc_pick(r.resource_class, r.traits, r.candidate_nodes, r.owner, r.name,
                                 p_start => metalloc_pick_start(v_lo, v_hi)) p;
        END IF;
        UPDATE allocations a SET conductor_affinity = p_me, node_id = v_node WHERE a.id = r.id;
        IF v_node IS NOT NULL AND r.held IS NULL THEN
            PERFORM metalloc_hold(v_node, r.id, r.uuid, r.traits);
        END IF;
        IF v_node IS NOT NULL AND metalloc_ironic_intent(r.id, p_me, v_node) IS DISTINCT FROM -1 THEN
            out_node_id := v_node;
        ELSE
            out_node_id := NULL;
        END IF;
        out_id := r.id;
        RETURN NEXT;
    END LOOP;
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- metalloc_ironic_hold holds a node for allocation p_id, allocating and
-- owned by p_me: the node it already holds, else a free one picked now
-- (metalloc_pick, without the name-first rule after the first try:
-- p_name), held (metalloc_hold) and journaled (metalloc_ironic_intent).
-- lost: the row is no longer p_me's allocating row; node_id NULL: no
-- unlocked node fits now, or (blocked) an earlier allocation with its uuid
-- is still being deleted in Ironic. Locks: the node (SKIP LOCKED), then the
-- allocation (node, then allocation).
CREATE FUNCTION metalloc_ironic_hold(p_id bigint, p_me bigint, p_name text,
    OUT node_id bigint, OUT node_uuid uuid, OUT lost boolean, OUT blocked boolean)
LANGUAGE plpgsql AS $$
DECLARE
    r record;
BEGIN
    lost := false; blocked := false;
    SELECT q.*, a.node_id AS held INTO r
      FROM allocations a JOIN allocation_requests q ON q.id = a.id
     WHERE a.id = p_id AND a.conductor_affinity = p_me AND a.state = 'allocating';
    IF NOT FOUND THEN
        lost := true;
        RETURN;
    END IF;
    IF r.held IS NOT NULL THEN
        node_id := r.held;
    ELSIF EXISTS (SELECT 1 FROM ironic_allocations j WHERE j.uuid = r.uuid AND j.state = 'deleting') THEN
        blocked := true;
        RETURN;
    ELSE
        SELECT p.node_id INTO node_id
          FROM metalloc_pick(r.resource_class, r.traits, r.candidate_nodes, r.owner, p_name) p;
        IF node_id IS NULL THEN
            RETURN;
        END IF;
        UPDATE allocations a SET node_id = metalloc_ironic_hold.node_id
         WHERE a.id = p_id AND a.conductor_affinity = p_me AND a.state = 'allocating' AND a.node_id IS NULL;
        IF NOT FOUND THEN
            node_id := NULL;
            lost := true;
            RETURN;
        END IF;
        PERFORM metalloc_hold(node_id, p_id, r.uuid, r.traits);
    END IF;
    SELECT n.uuid INTO node_uuid FROM nodes n WHERE n.id = metalloc_ironic_hold.node_id;
    IF metalloc_ironic_intent(p_id, p_me, node_id) = -1 THEN
        blocked := true;
    END IF;
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- metalloc_ironic_unhold lets go of node p_node_id held by allocation p_id
-- (allocating, owned by p_me) after Ironic refused it there, or fails the
-- allocation. With p_mark the node becomes unavailable until the next read
-- of Ironic (sync or refresh): maintenance with p_mark as the reason, its
-- mirror read stamped now, so that no older read undoes the mark. With
-- p_error the allocation goes to error with that last_error, and its
-- journal row to error (p_keep: Ironic keeps its copy in error) or away
-- (nothing of it is in Ironic). p_node_id NULL: no node held. Returns
-- 'released', 'failed' or 'lost' (not p_me's allocating row on that node:
-- nothing written). Locks: the node's mirror row and the node, then the
-- allocation (the mirror's order: ironic_nodes, nodes, allocations).
CREATE FUNCTION metalloc_ironic_unhold(p_id bigint, p_me bigint, p_node_id bigint, p_mark text, p_error text,
    p_keep boolean)
RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
    v_uuid uuid;
BEGIN
    IF p_node_id IS NOT NULL THEN
        PERFORM 1 FROM ironic_nodes m WHERE m.node_id = p_node_id FOR UPDATE;
        PERFORM 1 FROM nodes n WHERE n.id = p_node_id FOR UPDATE;
    END IF;
    UPDATE allocations a
       SET node_id = NULL,
           state = CASE WHEN p_error IS NULL THEN a.state ELSE 'error' END,
           last_error = coalesce(p_error, a.last_error),
           updated_at = CASE WHEN p_error IS NULL THEN a.updated_at ELSE now() END
     WHERE a.id = p_id AND a.conductor_affinity = p_me AND a.state = 'allocating'
       AND a.node_id IS NOT DISTINCT FROM p_node_id
    RETURNING a.uuid INTO v_uuid;
    IF v_uuid IS NULL THEN
        RETURN 'lost';
    END IF;
    IF p_node_id IS NOT NULL THEN
        UPDATE nodes n
           SET allocation_id = NULL, instance_uuid = NULL, updated_at = now(),
               maintenance = n.maintenance OR p_mark IS NOT NULL,
               maintenance_reason = CASE WHEN p_mark IS NULL THEN n.maintenance_reason ELSE p_mark END
         WHERE n.id = p_node_id AND n.allocation_id = p_id;
        IF p_mark IS NOT NULL THEN
            UPDATE ironic_nodes m SET read_at = greatest(m.read_at, clock_timestamp()) WHERE m.node_id = p_node_id;
        END IF;
    END IF;
    IF p_error IS NULL THEN
        RETURN 'released';
    END IF;
    IF p_keep THEN
        UPDATE ironic_allocations j SET state = 'error', last_error = p_error, updated_at = now()
         WHERE j.uuid = v_uuid AND j.state = 'creating';
    ELSE
        DELETE FROM ironic_allocations j WHERE j.uuid = v_uuid AND j.state = 'creating';
    END IF;
    RETURN 'failed';
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- metalloc_ironic_reconcile_nodes applies what the mirror just read of
-- nodes p_uuids to the allocations metalloc holds there: an allocation
-- active in both (journal active) whose node Ironic, in a read started
-- after the activation, shows without it (another instance, or none: the
-- allocation was deleted in Ironic, the node torn down) is deleted in
-- metalloc too (metalloc_deallocate; Ironic is the system of record).
-- Nodes are taken with SKIP LOCKED (a busy one is reconciled by a later
-- read). Returns how many allocations were deleted.
CREATE FUNCTION metalloc_ironic_reconcile_nodes(p_uuids uuid[])
RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    r record;
    n integer := 0;
BEGIN
    FOR r IN
        SELECT a.id
          FROM nodes nd
          JOIN ironic_nodes m ON m.node_id = nd.id
          JOIN allocations a ON a.id = nd.allocation_id
          JOIN ironic_allocations j ON j.uuid = a.uuid
         WHERE nd.uuid = ANY (p_uuids) AND a.state = 'active' AND j.state = 'active'
           AND m.read_at > j.updated_at AND m.instance_uuid IS DISTINCT FROM a.uuid
         ORDER BY nd.id
           FOR UPDATE OF m, nd SKIP LOCKED
    LOOP
        PERFORM metalloc_deallocate(r.id);
        n := n + 1;
    END LOOP;
    RETURN n;
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- metalloc_ironic_reconcile_allocations applies a complete listing of
-- Ironic's allocations (p_listed: their uuids), started at p_at, to the
-- journal: a copy Ironic still has of an allocation metalloc deleted (a
-- tombstone: a late POST created it after the deletion) is to be deleted
-- again; an allocation active or in error in both whose copy Ironic no
-- longer lists (deleted directly in Ironic after it was settled) is
-- deleted in metalloc too. Returns the tombstones revived and the
-- allocations deleted.
CREATE FUNCTION metalloc_ironic_reconcile_allocations(p_listed uuid[], p_at timestamptz,
    OUT revived integer, OUT forgotten integer)
LANGUAGE plpgsql AS $$
DECLARE
    r record;
BEGIN
    UPDATE ironic_allocations j SET state = 'deleting', retry_at = now(), updated_at = now()
     WHERE j.state = 'deleted' AND j.uuid = ANY (p_listed);
    GET DIAGNOSTICS revived = ROW_COUNT;
    IF revived > 0 THEN
        PERFORM pg_notify('metalloc_ironic', 'delete');
    END IF;
    forgotten := 0;
    FOR r IN
        SELECT a.id, a.node_id
          FROM ironic_allocations j JOIN allocations a ON a.uuid = j.uuid
         WHERE j.state IN ('active', 'error') AND j.updated_at < p_at
           AND a.state IN ('active', 'error') AND j.uuid <> ALL (p_listed)
         ORDER BY a.node_id NULLS LAST, a.id
    LOOP
        IF r.node_id IS NOT NULL THEN
            PERFORM 1 FROM nodes n WHERE n.id = r.node_id FOR UPDATE;
        END IF;
        PERFORM metalloc_deallocate(r.id);
        forgotten := forgotten + 1;
    END LOOP;
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- metalloc_ironic_drop_members removes members p_ids of group p_group
-- still allocating (held, not yet active in Ironic) after Ironic refused
-- some of them: their nodes are let go (p_marks[k], when not NULL, marks
-- member k's node unavailable until Ironic is read again, as
-- metalloc_ironic_unhold does) and the rows deleted, so that their copies
-- in Ironic are deleted too (the journal's trigger); '' marks nothing. The group's count is
-- left alone (the group is placed again, or fails). Returns how many were
-- removed. Locks: the nodes' mirror rows, the nodes, then the members
-- (the mirror's order; a group deletion takes nodes, then members).
CREATE FUNCTION metalloc_ironic_drop_members(p_group bigint, p_ids bigint[], p_marks text[])
RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    v_nodes bigint[];
    n integer;
BEGIN
    SELECT coalesce(array_agg(a.node_id ORDER BY a.node_id), '{}') INTO v_nodes
      FROM allocations a
     WHERE a.id = ANY (p_ids) AND a.group_id = p_group AND a.state = 'allocating' AND a.node_id IS NOT NULL;
    PERFORM 1 FROM ironic_nodes m WHERE m.node_id = ANY (v_nodes) ORDER BY m.node_id FOR UPDATE;
    PERFORM 1 FROM nodes nd WHERE nd.id = ANY (v_nodes) ORDER BY nd.id FOR UPDATE;
    WITH k AS (
        SELECT p_ids[i] AS id, nullif(p_marks[i], '') AS mark FROM generate_subscripts(p_ids, 1) i
    )
    UPDATE nodes nd
       SET allocation_id = NULL, instance_uuid = NULL, updated_at = now(),
           maintenance = nd.maintenance OR k.mark IS NOT NULL,
           maintenance_reason = CASE WHEN k.mark IS NULL THEN nd.maintenance_reason ELSE k.mark END
      FROM allocations a JOIN k ON k.id = a.id
     WHERE nd.allocation_id = a.id AND a.group_id = p_group AND a.state = 'allocating';
    UPDATE ironic_nodes m SET read_at = greatest(m.read_at, clock_timestamp())
      FROM generate_subscripts(p_ids, 1) i JOIN allocations a ON a.id = p_ids[i]
     WHERE nullif(p_marks[i], '') IS NOT NULL AND m.node_id = a.node_id;
    DELETE FROM allocations a
     WHERE a.id = ANY (p_ids) AND a.group_id = p_group AND a.state = 'allocating';
    GET DIAGNOSTICS n = ROW_COUNT;
    RETURN n;
END;
$$;
-- +goose StatementEnd

-- +goose Down
DROP FUNCTION metalloc_ironic_drop_members(bigint, bigint[], text[]);
DROP FUNCTION metalloc_ironic_reconcile_allocations(uuid[], timestamptz);
DROP FUNCTION metalloc_ironic_reconcile_nodes(uuid[]);
DROP FUNCTION metalloc_ironic_unhold(bigint, bigint, bigint, text, text, boolean);
DROP FUNCTION metalloc_ironic_hold(bigint, bigint, text);
DROP FUNCTION metalloc_ironic_claim_hold(bigint, integer);
DROP FUNCTION metalloc_ironic_intent(bigint, bigint, bigint);
DROP TRIGGER allocations_ironic_forget ON allocations;
DROP FUNCTION ironic_allocations_forget();
DROP TABLE ironic_allocations;
