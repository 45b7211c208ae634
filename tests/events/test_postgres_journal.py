"""What only the PostgreSQL journal has (events/postgres): the chain computed in SQL equal to
events/chain.py, fencing tokens, the writer lock, the horizon reader, a shard count fixed at
creation, verify over every shard chain, and errors that are one line without the password."""

from __future__ import annotations

import contextlib
import subprocess
import sys
import threading
from typing import Any

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from events import (
    AppendRejected,
    Fenced,
    JournalError,
    JournalLocked,
    JournalTampered,
    JournalUnavailable,
    NotAJournal,
    ShardsFixed,
)
from events.catalog import RunOutput
from events.chain import row_hash, shard_identity
from events.postgres.database import initialise
from events.postgres.homes import REMEMBERED, StreamHomes, shard_of
from events.postgres.journal import PostgresJournal
from events.postgres.reader import PostgresReader
from events.postgres.schema import FENCED
from events.postgres.verify import verify_database
from tests import processes
from tests.events.postgres_raw import raw_append
from tests.postgres_server import PostgresServer
from tests.processes import REEL
from transports.config import ConfigError, JournalConfig, NodeConfig
from transports.journal_open import open_postgres

SHARDS = 4


def out(text: str = "x") -> RunOutput:
    return RunOutput(run_id="r", turn=0, text=text)


@pytest.fixture
def dsn(postgres: PostgresServer) -> str:
    dsn = postgres.database()
    assert initialise(dsn, SHARDS)
    return dsn


@pytest.fixture
def journal(dsn: str) -> Any:
    journal = PostgresJournal(dsn)
    try:
        yield journal
    finally:
        journal.close()


# --- the chain in SQL --------------------------------------------------------------------------

text = st.text(st.characters(exclude_characters="\x00", exclude_categories=["Cs"]), max_size=40)
"""Every code point UTF-8 carries (no surrogates) but NUL, which PostgreSQL's text cannot hold
(an append naming one is refused before it is queued: see below)."""
optional = st.none() | text
int64 = st.integers(min_value=-(2**63), max_value=2**63 - 1)


@pytest.fixture(scope="module")
def sql(postgres: PostgresServer) -> Any:
    dsn = postgres.database()
    initialise(dsn, 1)
    with psycopg.connect(dsn, autocommit=True) as conn:
        yield conn


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    shards=st.sampled_from([1, 2, 64]),
    shard=st.integers(min_value=0, max_value=4095),
    shard_pos=int64,
    fields=st.tuples(text, text, int64, text, st.integers(-(2**31), 2**31 - 1), int64, text),
    links=st.tuples(optional, optional),
    prev=st.binary(min_size=32, max_size=32),
    payload=st.binary(max_size=64),
)
def test_the_chain_computed_in_sql_is_events_chain_byte_for_byte(
    sql: Any,
    shards: int,
    shard: int,
    shard_pos: int,
    fields: tuple[str, str, int, str, int, int, str],
    links: tuple[str | None, str | None],
    prev: bytes,
    payload: bytes,
) -> None:
    (got,) = sql.execute(
        "SELECT reel_row_hash(%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)",
        (prev, shards, shard, shard_pos, *fields, *links, payload),
    ).fetchone()
    identity = shard_identity(shards, shard, shard_pos, *fields, *links)
    assert bytes(got) == row_hash(prev, identity, payload)


def test_one_shard_chains_exactly_as_format_v2() -> None:
    """A journal of one shard (every SQLite journal) hashes what v2 hashed: nothing to migrate."""
    from events.chain import identity_bytes

    fields = ("01J", "run/1", 0, "run.output", 1, 5, "system", None, "c")
    assert shard_identity(1, 0, 7, *fields) == identity_bytes(7, *fields)
    assert shard_identity(4, 0, 7, *fields) == (0).to_bytes(8, "big") + identity_bytes(7, *fields)


# --- fencing and the writer lock ---------------------------------------------------------------


def test_a_stale_token_is_refused_and_nothing_is_written(dsn: str) -> None:
    first = PostgresJournal(dsn)
    first.append("run/1", [out()], expected_seq=0)
    stale = dict(first._tokens)
    first.close()
    second = PostgresJournal(dsn)  # takes every shard over: each token bumped
    try:
        shard = shard_of("zombie", SHARDS)
        assert second._tokens[shard] == stale[shard] + 1
        with pytest.raises(psycopg.Error) as refused:
            raw_append(dsn, shard, stale[shard])
        assert refused.value.sqlstate == FENCED
        assert second.read_stream("zombie") == []
        raw_append(dsn, shard, second._tokens[shard])  # the current token is let through
        assert len(second.read_stream("zombie")) == 1
        second._tokens[shard] = stale[shard]  # the writer itself holding a stale token
        with pytest.raises(Fenced, match=f"shard {shard}"):
            second.append("zombie", [out()], expected_seq=None)
        assert second.head().position == 2
    finally:
        second.close()
    assert verify_database(dsn).ok


def test_one_key_appended_in_two_shards_at_once_is_a_duplicate_the_second_time(
    dsn: str,
) -> None:
    """Two appends with one idempotency key into two shards (two advisory locks), the first's
    transaction still open when the second arrives: the second waits for it and answers a
    duplicate of it, never a ``unique_violation``."""
    holder = PostgresJournal(dsn)  # holds the leases whose tokens the raw appends use
    try:
        tokens = dict(holder._tokens)
        first, second = 0, 1
        with psycopg.connect(dsn) as conn:  # a transaction left open after its append
            assert raw_append(dsn, first, tokens[first], stream="a", key="k", conn=conn)[0] == "ok"
            answers: list[tuple[str, int] | BaseException] = []

            def racing() -> None:
                try:
                    answers.append(raw_append(dsn, second, tokens[second], stream="b", key="k"))
                except BaseException as exc:
                    answers.append(exc)

            thread = threading.Thread(target=racing)
            thread.start()
            thread.join(0.5)
            assert thread.is_alive(), f"the second append did not wait for the first: {answers}"
            conn.commit()
            thread.join(10)
        assert answers == [("duplicate", 0)], answers
        assert holder.read_stream("b") == [] and len(holder.read_stream("a")) == 1
    finally:
        holder.close()
    assert verify_database(dsn).ok


def test_a_second_writer_is_refused_while_one_holds_the_journal(journal: PostgresJournal) -> None:
    with pytest.raises(JournalLocked, match="another reel node"):
        PostgresJournal(journal.dsn)
    assert journal.append("run/1", [out()], expected_seq=0).first_position == 1


def test_a_nul_in_an_envelope_field_is_refused_alone(journal: PostgresJournal) -> None:
    """PostgreSQL's text holds no NUL: such an append is refused before it is queued, so it
    never fails the other appends of its batch."""
    neighbour = journal.submit("run/1", [out()], expected_seq=0)
    for field in ("principal", "correlation_id", "causation_id", "idempotency_key"):
        with pytest.raises(AppendRejected, match=f"{field} holds a NUL"):
            journal.submit("run/1", [out()], expected_seq=None, **{field: "a\x00b"})
    with pytest.raises(AppendRejected, match="stream holds a NUL"):
        journal.submit("run/\x00", [out()], expected_seq=None)
    assert neighbour.result().first_position == 1


def test_appends_commit_in_the_order_they_were_submitted(journal: PostgresJournal) -> None:
    """Appends queued together on streams of different shards keep their submission order."""
    streams = [f"run/{i}" for i in range(8)]
    assert len({shard_of(s, SHARDS) for s in streams}) > 1
    futures = [journal.submit(streams[i % 8], [out()], expected_seq=None) for i in range(200)]
    positions = [f.result().first_position for f in futures]
    assert positions == list(range(1, 201))


def test_the_writer_connects_again_after_the_server_dropped_it(journal: PostgresJournal) -> None:
    journal.append("run/1", [out()], expected_seq=0)
    with psycopg.connect(journal.dsn, autocommit=True) as admin:
        admin.execute("SELECT pg_terminate_backend(%s)", (journal._wconn.info.backend_pid,))
    with pytest.raises(JournalUnavailable, match="may or may not be written"):
        journal.append("run/1", [out()], expected_seq=1)  # the statement met the dead link
    assert journal.append("run/1", [out()], expected_seq=1).first_position == 2


def test_rows_are_append_only(journal: PostgresJournal) -> None:
    journal.append("run/1", [out()], expected_seq=0)
    with psycopg.connect(journal.dsn, autocommit=True) as conn:
        for statement in ("UPDATE events SET kind = 'x'", "DELETE FROM events", "TRUNCATE events"):
            with pytest.raises(psycopg.errors.RaiseException, match="append-only"):
                conn.execute(statement)


# --- where streams live -------------------------------------------------------------------------


def _shards_of_streams(dsn: str) -> dict[str, set[int]]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        rows = conn.execute("SELECT stream, shard FROM events WHERE shard >= 0").fetchall()
    found: dict[str, set[int]] = {}
    for stream, shard in rows:
        found.setdefault(stream, set()).add(shard)
    return found


def test_a_session_and_its_streams_live_in_the_session_shard_whoever_appends_later(
    dsn: str,
) -> None:
    """Streams created naming a session as their home go to its shard; later appends name no
    home, from a writer that remembers nothing (a restart) or has forgotten (a bound of 2),
    and still land where each stream's rows are; a stream with no home goes by its name."""
    sessions = [f"s{i}" for i in range(12)]
    first = PostgresJournal(dsn)
    try:
        for sid in sessions:
            first.append(f"session/{sid}", [out()], expected_seq=0, home=sid)
            first.append(f"run/r{sid}", [out()], expected_seq=0, home=sid)
            first.append(f"loose/{sid}", [out()], expected_seq=0)
    finally:
        first.close()
    for remembered in (REMEMBERED, 2):
        journal = PostgresJournal(dsn)
        journal._homes = StreamHomes(SHARDS, remembered=remembered)
        try:
            for sid in sessions:
                for stream in (f"run/r{sid}", f"session/{sid}", f"loose/{sid}"):
                    journal.append(stream, [out()], expected_seq=None)
                journal.submit(f"run/r{sid}", [out()], expected_seq=None).result()
        finally:
            journal.close()
    found = _shards_of_streams(dsn)
    for sid in sessions:
        assert found[f"session/{sid}"] == found[f"run/r{sid}"] == {shard_of(sid, SHARDS)}
        assert found[f"loose/{sid}"] == {shard_of(f"loose/{sid}", SHARDS)}
    assert len({shard_of(sid, SHARDS) for sid in sessions}) > 1
    assert verify_database(dsn).ok


def test_an_append_naming_another_shard_than_its_stream_is_refused(
    journal: PostgresJournal,
) -> None:
    """The database keeps a stream's rows in one shard chain: an append sent to another shard
    (a writer guessing wrong) writes nothing, says where the stream is, and the next goes
    there."""
    journal.append("run/1", [out()], expected_seq=0, home="s1")
    home = shard_of("s1", SHARDS)
    other = (home + 1) % SHARDS
    assert raw_append(journal.dsn, other, journal._tokens[other], stream="run/1") == (
        "misplaced",
        home,
    )
    journal._homes.remember("run/1", other)
    with pytest.raises(JournalError, match=f"run/1 lives in shard {home}, not {other}"):
        journal.append("run/1", [out()], expected_seq=1)
    assert journal.append("run/1", [out()], expected_seq=1).first_seq == 1
    assert _shards_of_streams(journal.dsn) == {"run/1": {home}}
    assert verify_database(journal.dsn).ok


# --- the horizon reader ------------------------------------------------------------------------


def test_the_horizon_reader_returns_every_committed_row_in_shard_order(
    journal: PostgresJournal,
) -> None:
    def writer(t: int) -> None:
        for i in range(15):
            journal.append(f"run/{t}.{i % 5}", [out(), out()], expected_seq=None)

    threads = [threading.Thread(target=writer, args=(t,)) for t in range(4)]
    for thread in threads:
        thread.start()
    seen: list[tuple[Any, Any]] = []
    while any(t.is_alive() for t in threads) or len(seen) < 120:
        seen += journal.horizon(seen[-1][0] if seen else None, limit=7)
        assert len(seen) <= 120
    for thread in threads:
        thread.join()
    assert sorted(e.position for _, e in seen) == list(range(1, 121))
    keys = [k for k, _ in seen]
    assert keys == sorted(keys)
    for shard in range(SHARDS):
        mine = [e.shard_pos for _, e in seen if e.shard == shard]
        assert mine == list(range(1, len(mine) + 1))
    assert len({e.shard for _, e in seen}) > 1


def test_an_open_transaction_holds_the_horizon_until_its_idle_timeout(
    journal: PostgresJournal,
) -> None:
    journal.append("run/1", [out("before")], expected_seq=0)
    (key, _), *_ = journal.horizon()
    stalled = psycopg.connect(journal.dsn)
    try:
        stalled.execute("SET idle_in_transaction_session_timeout = '1s'")
        stalled.execute("SELECT pg_current_xact_id()")  # an open transaction with an id
        journal.append("run/1", [out("after")], expected_seq=1)
        assert journal.read_stream("run/1")[-1].stream_seq == 1  # committed...
        assert journal.horizon(key) == []  # ...but not below the horizon yet
        waited = 0
        while not journal.horizon(key):  # until the server ends the idle transaction
            waited += 1
            assert waited < 600, "the idle timeout never ended the stall"
            threading.Event().wait(0.05)
        (_, row), *_ = journal.horizon(key)
        assert row.stream_seq == 1
        assert waited > 0
    finally:
        with contextlib.suppress(psycopg.Error):
            stalled.close()


# --- init, shard count, verify -----------------------------------------------------------------


def test_init_fixes_the_shard_count(dsn: str) -> None:
    assert initialise(dsn, SHARDS) is False  # already there: nothing to do
    with pytest.raises(ShardsFixed, match=r"^shards: .* created with 4 shards"):
        initialise(dsn, 8)
    cli = processes.run(
        [str(REEL), "journal", "init", "--dsn", dsn, "--shards", "8"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert cli.returncode == 2
    assert cli.stderr.count("\n") == 1 and "shards" in cli.stderr and "Traceback" not in cli.stderr


def test_the_node_refuses_settings_the_database_does_not_match(dsn: str) -> None:
    def node(**journal: Any) -> NodeConfig:
        return NodeConfig(journal=JournalConfig(backend="postgres", **journal))

    with pytest.raises(ConfigError, match=r"journal\.shards: 8, but .* created with 4"):
        open_postgres(node(dsn=dsn, shards=8))
    with pytest.raises(ConfigError, match=r"journal\.dsn"):
        open_postgres(node())
    open_postgres(node(dsn=dsn, shards=SHARDS)).close()


def test_verify_reads_one_snapshot_while_the_node_appends(journal: PostgresJournal) -> None:
    """The walk never half-sees an append that commits while it reads (a shard's head read
    before rows appended after it would look like a truncated chain)."""
    stop = threading.Event()

    def writer() -> None:
        i = 0
        while not stop.is_set():
            journal.append(f"run/{i % 8}", [out(), out()], expected_seq=None)
            i += 1

    thread = threading.Thread(target=writer)
    thread.start()
    try:
        reports = [verify_database(journal.dsn) for _ in range(8)]
    finally:
        stop.set()
        thread.join()
    assert [r.fault for r in reports] == [None] * 8
    assert reports[-1].events > reports[0].events  # rows landed while it walked


def test_verify_finds_an_edited_payload_and_a_deleted_row(journal: PostgresJournal) -> None:
    for i in range(6):
        journal.append(f"run/{i}", [out(str(i)), out(str(i))], expected_seq=0)
    assert verify_database(journal.dsn).ok
    with psycopg.connect(journal.dsn, autocommit=True) as conn:
        conn.execute("ALTER TABLE events DISABLE TRIGGER events_append_only")
        conn.execute("UPDATE events SET payload = payload || '\\x00'::bytea WHERE position = 5")
        report = verify_database(journal.dsn)
        assert report.fault is not None
        assert (report.fault.kind, report.fault.position) == ("altered_payload", 5)
        conn.execute(
            "UPDATE events SET payload = substring(payload for length(payload) - 1) "
            "WHERE position = 5"
        )
        assert verify_database(journal.dsn).ok
        conn.execute("DELETE FROM events WHERE position = 12")
    report = verify_database(journal.dsn)
    assert report.fault is not None and report.fault.kind in ("truncated_tail", "deleted_row")
    journal.close()
    config = NodeConfig(journal=JournalConfig(backend="postgres", dsn=journal.dsn))
    with pytest.raises(JournalTampered, match="fails verification"):
        open_postgres(config)  # the node refuses to write over it


# --- errors: one line, never the password -------------------------------------------------------


def test_bad_dsns_are_one_line_without_the_password(postgres: PostgresServer, dsn: str) -> None:
    wrong = dsn.replace(postgres.password, "not-the-Secret-4711")
    cases: list[tuple[str, str]] = [
        (wrong, "password authentication failed"),
        ("postgresql://reel:not-the-Secret-4711@127.0.0.1:1/x", "cannot use the journal"),
        ("host=127.0.0.1 password=not-the-Secret-4711 port=nonsense", "cannot use the journal"),
        ("postgresql://reel:not-the-Secret-4711@[broken", "not a PostgreSQL connection string"),
    ]
    for bad, said in cases:
        with pytest.raises(JournalUnavailable) as info:
            PostgresReader(bad)
        message = str(info.value)
        assert said in message and "\n" not in message
        assert "not-the-Secret-4711" not in message
    cli = subprocess.run(  # the CLI once (a process start costs a second or two)
        [str(REEL), "journal", "verify"],
        env={"REEL_JOURNAL_DSN": wrong, "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert cli.returncode == 2, cli.stderr
    assert cli.stderr.count("\n") == 1 and "password authentication failed" in cli.stderr
    assert "Traceback" not in cli.stderr
    assert "not-the-Secret-4711" not in cli.stderr + cli.stdout


def test_a_database_without_a_journal_says_how_to_make_one(postgres: PostgresServer) -> None:
    with pytest.raises(NotAJournal, match="reel journal init"):
        PostgresReader(postgres.database())


def test_nothing_imports_psycopg_unless_the_backend_is_postgres() -> None:
    """The node, its APIs and the CLI load without psycopg (it is an extra)."""
    probe = (
        "import sys, events, transports.runtime, transports.http.journal, "
        "transports.grpc.journal, transports.cli.journal_cmd; events.Journal; events.verify; "
        "assert not [m for m in sys.modules if m.startswith(('psycopg', 'events.postgres'))]"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
