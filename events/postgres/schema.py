"""The journal database's schema and ``shard_append()``, the one way rows get in.

Tables (docs/journal-format.md section 9): ``cluster`` (one row: the fixed shard count S and the
schema version), ``nodes`` (one liveness row per node of a cluster: its incarnation and when its
lease on life lapses, on the database clock), ``shard_lease`` (each shard's owner and fencing
token), ``shard_head`` (each shard chain's last ``shard_pos`` and hash), ``log_head`` (the last
global position), ``events`` and ``idempotency``. ``events`` rows are append-only (triggers
refuse updates and deletes).

``shard_append(shard, token, ...)`` appends one batch of requests to one shard in one statement,
in this order: ``pg_advisory_xact_lock`` on the shard (it serialises the shard's appenders before
the transaction has an id, so within a shard id order is commit order); the lease row ``FOR
SHARE`` and a refusal (SQLSTATE ``RL001``) when the token is not the current one or the node the
lease names has a ``nodes`` row that lapsed or belongs to another incarnation (a lease is only as
live as its node: :mod:`events.postgres.leases`); then per request the idempotency key,
``expected_seq``, that the stream's rows are in this shard (else outcome ``misplaced``:
:mod:`events.postgres.homes`), and the chain computed in SQL (:sql:`reel_row_hash`, byte for
byte :func:`events.chain.shard_identity`), stamped with the database clock.
"""

from __future__ import annotations

from typing import Any

SCHEMA_VERSION = 7
"""The PostgreSQL schema's version, kept in ``cluster.schema_version``: 2 added ``nodes`` and
the liveness check in ``shard_append``, 3 the integrity chain's lease and head rows (shard -1),
4 the refusal of an append naming another shard than its stream's rows are in (``misplaced``),
5 each node's internal address and public key in its ``nodes`` row (forwarding, step 3),
6 the ``singletons`` table (named singleton leases: the watchdog, channel connectors),
7 the idempotency key checked under ``log_head``'s lock (one key appended in two shards at
once: the second is a duplicate, not a ``unique_violation``) and each node's ``config_hash``.
An older journal is upgraded in place by :func:`events.postgres.database.upgrade`."""
INTEGRITY_SHARD = -1
"""The shard of the integrity chain: the roster of node keys and the super-checkpoints over
every other shard's head (:mod:`events.postgres.checkpoints`). Chained like any shard."""

LOCK_CLASS = "hashtext('reel.' || current_schema())"
"""The first key of every advisory lock reel takes (SQL): one per schema holding a journal, so
locks of journals in different schemas of one database never meet (the tests keep one per
schema). The second key is the shard, or one of the keys below."""
WRITER_LOCK = -2
"""The second key of the session-level advisory lock the one writing node holds (shard -1 is
reserved for the super-checkpoints of step 4)."""
INIT_LOCK = -3
"""The second key of the lock ``reel journal init`` holds while it creates the schema."""
FENCED = "RL001"
"""The SQLSTATE ``shard_append`` raises when the token is not the shard's current one."""

TABLES = r"""
CREATE TABLE cluster(
    id int PRIMARY KEY CHECK (id = 1),
    shards int NOT NULL CHECK (shards BETWEEN 1 AND 4096),
    schema_version int NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now()
);
CREATE TABLE shard_lease(
    shard int PRIMARY KEY,
    node text,
    incarnation bigint NOT NULL DEFAULT 0,
    token bigint NOT NULL DEFAULT 0
);
CREATE TABLE shard_head(
    shard int PRIMARY KEY,
    pos bigint NOT NULL,
    hash bytea NOT NULL
);
CREATE TABLE log_head(
    id int PRIMARY KEY CHECK (id = 1),
    position bigint NOT NULL
);
CREATE TABLE events(
    shard int NOT NULL,
    shard_pos bigint NOT NULL,
    position bigint NOT NULL UNIQUE,
    event_id text NOT NULL,
    stream text NOT NULL,
    stream_seq bigint NOT NULL,
    kind text NOT NULL,
    version int NOT NULL,
    recorded_at_ms bigint NOT NULL,
    principal text NOT NULL,
    correlation_id text,
    causation_id text,
    payload bytea NOT NULL,
    payload_sha256 bytea NOT NULL,
    prev_hash bytea NOT NULL,
    hash bytea NOT NULL,
    xid xid8 NOT NULL DEFAULT pg_current_xact_id(),
    PRIMARY KEY (shard, shard_pos),
    UNIQUE (stream, stream_seq)
);
CREATE INDEX events_by_correlation ON events(correlation_id, position)
    WHERE correlation_id IS NOT NULL;
CREATE INDEX events_by_kind ON events(kind, position);
CREATE INDEX events_by_log_key ON events(xid, shard, shard_pos);
CREATE TABLE idempotency(
    key text PRIMARY KEY,
    stream text NOT NULL,
    first_position bigint NOT NULL,
    last_position bigint NOT NULL,
    first_seq bigint NOT NULL,
    last_seq bigint NOT NULL
);
CREATE FUNCTION reel_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN RAISE EXCEPTION 'journal rows are append-only'; END $$;
CREATE TRIGGER events_append_only BEFORE UPDATE OR DELETE ON events
    FOR EACH ROW EXECUTE FUNCTION reel_append_only();
CREATE TRIGGER events_no_truncate BEFORE TRUNCATE ON events
    FOR EACH STATEMENT EXECUTE FUNCTION reel_append_only();
"""

NODES = r"""
CREATE TABLE IF NOT EXISTS nodes(
    node text PRIMARY KEY,
    incarnation bigint NOT NULL,
    expires_at timestamptz NOT NULL,
    ready boolean NOT NULL DEFAULT false,
    started_at timestamptz NOT NULL DEFAULT clock_timestamp()
);
ALTER TABLE nodes ADD COLUMN IF NOT EXISTS address text NOT NULL DEFAULT '';
ALTER TABLE nodes ADD COLUMN IF NOT EXISTS public_key bytea NOT NULL DEFAULT ''::bytea;
ALTER TABLE nodes ADD COLUMN IF NOT EXISTS config_hash text NOT NULL DEFAULT '';
"""
"""Version 2's table: one row per node of a cluster (:mod:`events.postgres.leases`); version 5
added where the node's internal service listens and the key it signs forwarded commands with
(:mod:`transports.cluster`), version 7 the digest of its shared config and policies
(:mod:`transports.cluster.config_hash`)."""

SINGLETONS = r"""
CREATE TABLE IF NOT EXISTS singletons(
    name text PRIMARY KEY,
    node text,
    incarnation bigint NOT NULL DEFAULT 0,
    token bigint NOT NULL DEFAULT 0
);
"""
"""Version 6's table: one row per named singleton a node ever wanted (made by the first to take
it), held like a shard's lease: live exactly while the ``nodes`` row it names is live with that
incarnation (:mod:`events.postgres.leases`)."""

INTEGRITY_ROWS = (
    f"INSERT INTO shard_lease(shard) VALUES ({INTEGRITY_SHARD}) ON CONFLICT DO NOTHING; "
    f"INSERT INTO shard_head(shard, pos, hash) VALUES ({INTEGRITY_SHARD}, 0, "
    "decode(repeat('00', 32), 'hex')) ON CONFLICT DO NOTHING"
)
"""Version 3's rows: the integrity chain's lease and head (its hash: 32 zero bytes)."""

FUNCTIONS = r"""
CREATE OR REPLACE FUNCTION reel_text(v text) RETURNS bytea
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS
$$ SELECT int4send(octet_length(convert_to(v, 'UTF8'))) || convert_to(v, 'UTF8') $$;

CREATE OR REPLACE FUNCTION reel_optional(v text) RETURNS bytea
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS
$$ SELECT CASE WHEN v IS NULL THEN '\xffffffff'::bytea ELSE reel_text(v) END $$;

CREATE OR REPLACE FUNCTION reel_row_hash(
    prev bytea, shards int, shard int, shard_pos bigint, event_id text, stream text,
    stream_seq bigint, kind text, version int, recorded_at_ms bigint, principal text,
    correlation_id text, causation_id text, payload bytea
) RETURNS bytea LANGUAGE sql IMMUTABLE PARALLEL SAFE AS
$$ SELECT sha256(
    prev
    || CASE WHEN shards > 1 THEN int8send(shard::bigint) ELSE ''::bytea END
    || int8send(shard_pos) || reel_text(event_id) || reel_text(stream) || int8send(stream_seq)
    || reel_text(kind) || int8send(version::bigint) || int8send(recorded_at_ms)
    || reel_text(principal) || reel_optional(correlation_id) || reel_optional(causation_id)
    || payload) $$;

CREATE OR REPLACE FUNCTION shard_append(
    p_shard int, p_token bigint,
    p_streams text[], p_counts int[], p_expected bigint[], p_principals text[],
    p_correlations text[], p_causations text[], p_keys text[],
    p_event_ids text[], p_kinds text[], p_versions int[], p_payloads bytea[]
) RETURNS TABLE(
    o_request int, o_outcome text, o_first_position bigint, o_last_position bigint,
    o_first_seq bigint, o_last_seq bigint, o_recorded_at_ms bigint, o_event_ids text[]
) LANGUAGE plpgsql AS $$
DECLARE
    v_token bigint;
    v_node text;
    v_incarnation bigint;
    v_live boolean;
    v_shards int;
    v_pos bigint;
    v_hash bytea;
    v_gpos bigint;
    v_locked boolean := false;
    v_now bigint := (extract(epoch FROM clock_timestamp()) * 1000)::bigint;
    v_event int := 0;
    v_seq bigint;
    v_home int;
    v_key record;
    v_digest bytea;
BEGIN
    PERFORM pg_advisory_xact_lock(hashtext('reel.' || current_schema()), p_shard);
    SELECT token, node, incarnation INTO v_token, v_node, v_incarnation
        FROM shard_lease WHERE shard = p_shard FOR SHARE;
    IF NOT FOUND OR v_token IS DISTINCT FROM p_token THEN
        RAISE EXCEPTION 'shard % is fenced: token % is not its current one', p_shard, p_token
            USING ERRCODE = 'RL001';
    END IF;
    -- A lease is only as live as its node: a node of a cluster whose row lapsed (or was
    -- replaced by a restart) writes nothing, whether or not another took the shard yet. A
    -- lease naming no nodes row is the one writer's of a single node (it holds WRITER_LOCK).
    SELECT n.incarnation = v_incarnation AND n.expires_at > clock_timestamp() INTO v_live
        FROM nodes n WHERE n.node = v_node;
    IF FOUND AND NOT v_live THEN
        RAISE EXCEPTION 'shard % is fenced: the lease of node % lapsed', p_shard, v_node
            USING ERRCODE = 'RL001';
    END IF;
    SELECT shards INTO v_shards FROM cluster;
    SELECT pos, hash INTO v_pos, v_hash FROM shard_head WHERE shard = p_shard;
    FOR i IN 1 .. coalesce(array_length(p_streams, 1), 0) LOOP
        o_request := i - 1;
        IF p_keys[i] IS NOT NULL AND NOT v_locked THEN
            -- A key is read under log_head's lock, which every insert takes: an append of the
            -- same key to another shard (another advisory lock) has committed or not begun to
            -- insert, and this statement's next snapshot sees its key.
            SELECT position INTO v_gpos FROM log_head FOR UPDATE;
            v_locked := true;
        END IF;
        IF p_keys[i] IS NOT NULL THEN
            SELECT * INTO v_key FROM idempotency WHERE key = p_keys[i];
            IF FOUND THEN
                o_outcome := 'duplicate';
                o_first_position := v_key.first_position;
                o_last_position := v_key.last_position;
                o_first_seq := v_key.first_seq;
                o_last_seq := v_key.last_seq;
                SELECT array_agg(e.event_id ORDER BY e.position), min(e.recorded_at_ms)
                    INTO o_event_ids, o_recorded_at_ms
                    FROM events e
                    WHERE e.position BETWEEN v_key.first_position AND v_key.last_position;
                RETURN NEXT;
                v_event := v_event + p_counts[i];
                CONTINUE;
            END IF;
        END IF;
        SELECT e.stream_seq + 1, e.shard INTO v_seq, v_home
            FROM events e WHERE e.stream = p_streams[i] ORDER BY e.stream_seq DESC LIMIT 1;
        IF NOT FOUND THEN
            v_seq := 0;
            v_home := p_shard;
        END IF;
        IF (p_expected[i] IS NOT NULL AND p_expected[i] <> v_seq) OR v_home <> p_shard THEN
            IF p_expected[i] IS NOT NULL AND p_expected[i] <> v_seq THEN
                o_outcome := 'conflict';
                o_first_seq := v_seq;
            ELSE  -- a stream's rows stay in one shard, whose lock orders them
                o_outcome := 'misplaced';
                o_first_seq := v_home;
            END IF;
            o_first_position := NULL; o_last_position := NULL; o_last_seq := NULL;
            o_recorded_at_ms := NULL; o_event_ids := NULL;
            RETURN NEXT;
            v_event := v_event + p_counts[i];
            CONTINUE;
        END IF;
        IF NOT v_locked THEN
            -- One node, one global position (step 1): taken after the shard's advisory lock.
            SELECT position INTO v_gpos FROM log_head FOR UPDATE;
            v_locked := true;
        END IF;
        o_outcome := 'ok';
        o_first_position := v_gpos + 1;
        o_first_seq := v_seq;
        o_recorded_at_ms := v_now;
        o_event_ids := p_event_ids[v_event + 1 : v_event + p_counts[i]];
        FOR j IN 1 .. p_counts[i] LOOP
            v_event := v_event + 1;
            v_pos := v_pos + 1;
            v_gpos := v_gpos + 1;
            v_digest := reel_row_hash(
                v_hash, v_shards, p_shard, v_pos, p_event_ids[v_event], p_streams[i], v_seq,
                p_kinds[v_event], p_versions[v_event], v_now, p_principals[i],
                p_correlations[i], p_causations[i], p_payloads[v_event]);
            INSERT INTO events(shard, shard_pos, position, event_id, stream, stream_seq, kind,
                version, recorded_at_ms, principal, correlation_id, causation_id, payload,
                payload_sha256, prev_hash, hash)
            VALUES (p_shard, v_pos, v_gpos, p_event_ids[v_event], p_streams[i], v_seq,
                p_kinds[v_event], p_versions[v_event], v_now, p_principals[i],
                p_correlations[i], p_causations[i], p_payloads[v_event],
                sha256(p_payloads[v_event]), v_hash, v_digest);
            v_hash := v_digest;
            v_seq := v_seq + 1;
        END LOOP;
        o_last_position := v_gpos;
        o_last_seq := v_seq - 1;
        IF p_keys[i] IS NOT NULL THEN
            INSERT INTO idempotency VALUES
                (p_keys[i], p_streams[i], o_first_position, o_last_position, o_first_seq,
                 o_last_seq);
        END IF;
        RETURN NEXT;
    END LOOP;
    IF v_locked THEN
        UPDATE shard_head SET pos = v_pos, hash = v_hash WHERE shard = p_shard;
        UPDATE log_head SET position = v_gpos;
    END IF;
END $$;
"""


def create(conn: Any, shards: int) -> None:
    """Create every table, function and per-shard row for ``shards`` shards in the caller's
    transaction (``conn`` is not in autocommit; the caller commits)."""
    conn.execute(TABLES)
    conn.execute(NODES)
    conn.execute(SINGLETONS)
    conn.execute(FUNCTIONS)
    conn.execute(
        "INSERT INTO cluster(id, shards, schema_version) VALUES (1, %s, %s)",
        (shards, SCHEMA_VERSION),
    )
    conn.execute("INSERT INTO shard_lease(shard) SELECT generate_series(0, %s - 1)", (shards,))
    conn.execute(
        "INSERT INTO shard_head(shard, pos, hash) SELECT generate_series(0, %s - 1), 0, %s",
        (shards, bytes(32)),
    )
    conn.execute(INTEGRITY_ROWS)
    conn.execute("INSERT INTO log_head VALUES (1, 0)")
