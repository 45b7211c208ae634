"""Integrity across shards on the PostgreSQL journal (issue 24 step 4; events/postgres/
checkpoints.py, verify.py): the holder of shard -1 (a lone node, or a cluster's checkpointer)
signs super-checkpoints over every shard's head into the integrity chain, appends each to its
witness file, and records its key in the roster; verify holds them against the shard chains, a
pinned roster and the witness. The attacks are made with raw SQL (tests/events/postgres_raw.py):
a shard chain rewritten whole and consistently, a shard cut short, a super-checkpoint edited,
the last super-checkpoint deleted, a journal signed by a key nobody pinned."""

from __future__ import annotations

import contextlib
import hashlib
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import msgspec
import psycopg
import pytest

from events import AppendRejected, JournalTampered, NodeKey, ShardNotOwned
from events.catalog import JournalNodeJoined, JournalSuperCheckpoint, RunOutput
from events.checkpoint import signature_valid
from events.codec import decode, encode
from events.note import verifier_key
from events.postgres.checkpoints import HEADS_SQL, encode_heads
from events.postgres.database import initialise
from events.postgres.homes import shard_of
from events.postgres.journal import PostgresJournal
from events.postgres.leases import LeaseKeeper, LeaseSettings
from events.postgres.reader import PostgresReader
from events.postgres.verify import verify_database, verify_shard
from events.witness import Witness, read_notes
from tests import processes
from tests.events.postgres_raw import delete_last_row, rewrite_shard
from tests.events.test_postgres_leases import Nodes
from tests.postgres_server import PostgresServer
from tests.processes import REEL
from transports.config import JournalConfig, NodeConfig
from transports.journal_open import open_postgres

SHARDS = 4
WAIT_S = 30.0


def out(text: str = "x") -> RunOutput:
    return RunOutput(run_id="r", turn=0, text=text)


@pytest.fixture
def dsn(postgres: PostgresServer) -> str:
    dsn = postgres.database()
    assert initialise(dsn, SHARDS)
    return dsn


@pytest.fixture
def key(tmp_path: Path) -> NodeKey:
    return NodeKey.load_or_create(tmp_path / "node.key")


@pytest.fixture
def witness_path(tmp_path: Path) -> Path:
    return tmp_path / "witness.notes"


def signing(dsn: str, key: NodeKey, witness: Path, **options: Any) -> PostgresJournal:
    return PostgresJournal(dsn, node_key=key, witness=Witness.open(witness), **options)


def fill(journal: PostgresJournal, streams: int = 8, each: int = 3) -> None:
    """Rows in every shard: ``streams`` streams of ``each`` events."""
    names = [f"run/{i}" for i in range(streams)]
    assert {shard_of(s, SHARDS) for s in names} == set(range(SHARDS))
    for name in names:
        journal.append(name, [out(f"{name}.{i}") for i in range(each)], expected_seq=0)


def reel(*args: str) -> subprocess.CompletedProcess[str]:
    return processes.run([str(REEL), "journal", *args], capture_output=True, text=True, timeout=60)


@pytest.fixture
def signed_journal(dsn: str, key: NodeKey, witness_path: Path) -> Iterator[str]:
    """A journal with rows in every shard, closed (a final super-checkpoint over every row)."""
    journal = signing(dsn, key, witness_path)
    fill(journal)
    journal.close()
    yield dsn


def test_a_lone_node_signs_every_shard_head_while_it_appends_and_at_close(
    dsn: str, key: NodeKey, witness_path: Path
) -> None:
    journal = signing(dsn, key, witness_path, checkpoint_every_s=0.1)
    try:
        assert journal.checkpoint() is None  # nothing to sign: every shard is empty
        assert journal.checkpoints() == []
        assert journal.roster() == {key.public_key}  # the key joined before anything signed
        fill(journal)
        deadline = time.monotonic() + WAIT_S
        while not journal.checkpoints() or journal.checkpoints()[-1].position < 24:
            assert time.monotonic() < deadline, "no super-checkpoint over the appends was signed"
            time.sleep(0.05)
        signed = journal.checkpoints()
        idle = len(signed)
        time.sleep(0.5)  # five intervals without an append: nothing new is signed
        assert len(journal.checkpoints()) == idle
        last = signed[-1]
        assert signature_valid(last, key.public_key)
        (row,) = journal.read(after_position=last.row_position - 1, limit=1)
        assert (row.shard, row.stream, row.kind) == (-1, "journal", "journal.super_checkpoint")
        journal.append("run/0", [out("late")], expected_seq=3)
        journal.checkpoint()  # signs it, unless its interval had passed and it was signed
        assert journal.checkpoints()[-1].position == 25
        assert journal.checkpoint() is None  # never twice over one head
    finally:
        journal.close()
    notes, _ = read_notes(witness_path)
    reader = PostgresReader(dsn)
    try:
        assert [(n.size, n.hash) for n in notes] == [
            (c.position, c.hash) for c in reader.checkpoints()
        ]
    finally:
        reader.close()
    assert all(n.signed_by(key.public_key) for n in notes)
    report = verify_database(dsn, roster={key.public_key}, witness=notes)
    assert report.ok, report.fault
    assert (report.anchored, report.anchor) == (True, "pinned roster + witness")
    assert (report.last_checkpoint_position, report.unsigned_rows) == (25, 0)


def test_close_signs_what_is_unsigned_and_a_restart_signs_nothing_twice(
    signed_journal: str, key: NodeKey, witness_path: Path
) -> None:
    reader = PostgresReader(signed_journal)
    try:
        (only,) = reader.checkpoints()
        assert only.position == 24
    finally:
        reader.close()
    again = signing(signed_journal, key, witness_path)
    again.close()
    reader = PostgresReader(signed_journal)
    try:
        assert reader.checkpoints() == [only]
        assert reader.roster() == {key.public_key}  # joined once
    finally:
        reader.close()


def test_a_shard_rewritten_whole_is_caught_naming_the_shard(
    signed_journal: str, key: NodeKey, witness_path: Path, tmp_path: Path
) -> None:
    shard = shard_of("run/5", SHARDS)
    rewrite_shard(signed_journal, shard, encode(out("forged")))
    report = verify_database(signed_journal)  # even against the roster it records
    assert report.fault is not None
    assert report.fault.kind == "rewritten_chain"
    assert f"shard {shard} was rewritten" in report.fault.message
    roster = tmp_path / "roster.pem"
    roster.write_text(key.public_pem())
    cli = reel("verify", "--dsn", signed_journal, "--roster", str(roster))
    assert cli.returncode == 1, cli.stdout + cli.stderr
    assert "TAMPERED" in cli.stdout and f"shard {shard} was rewritten" in cli.stdout
    config = NodeConfig(journal=JournalConfig(backend="postgres", dsn=signed_journal))
    with pytest.raises(JournalTampered, match=f"shard {shard} was rewritten"):
        open_postgres(config, tmp_path)  # the node refuses to sign over it
    with pytest.raises(JournalTampered, match=f"shard {shard} was rewritten"):
        signing(signed_journal, key, witness_path)


def test_a_super_checkpoint_edited_with_its_chain_recomputed_fails_its_signature(
    signed_journal: str,
) -> None:
    """Whoever rewrites a shard and then the integrity chain too, the super-checkpoint's heads
    made to match and every hash after recomputed, cannot sign it again."""
    shard = shard_of("run/2", SHARDS)
    rewrite_shard(signed_journal, shard, encode(out("forged")))
    with psycopg.connect(signed_journal, autocommit=True) as conn:
        row = conn.execute(
            "SELECT version, payload FROM events WHERE shard = -1 AND shard_pos = 2"
        ).fetchone()
        heads = conn.execute(HEADS_SQL).fetchall()
    assert row is not None
    signed = decode("journal.super_checkpoint", row[0], bytes(row[1]))
    assert isinstance(signed, JournalSuperCheckpoint)
    data = encode_heads(heads)
    forged = msgspec.structs.replace(signed, heads=data, hash=hashlib.sha256(data).digest())
    rewrite_shard(signed_journal, -1, encode(forged), at=2)
    report = verify_database(signed_journal)
    assert report.fault is not None
    assert report.fault.kind == "bad_checkpoint_signature"
    assert "row 2 of the integrity chain" in report.fault.message


def test_a_deleted_last_super_checkpoint_is_caught_by_the_witness(
    signed_journal: str, key: NodeKey, witness_path: Path
) -> None:
    delete_last_row(signed_journal, -1)  # the final super-checkpoint: the journal's last row
    report = verify_database(signed_journal)
    assert report.ok and report.checkpoints == 0  # the chains alone cannot tell
    assert report.unsigned_rows == 24
    notes, _ = read_notes(witness_path)
    report = verify_database(signed_journal, witness=notes)
    assert report.fault is not None and report.fault.kind == "truncated_tail"
    assert "super-checkpoints were removed" in report.fault.message
    cli = reel("verify", "--dsn", signed_journal, "--witness", str(witness_path))
    assert cli.returncode == 1 and "truncated_tail" in cli.stdout, cli.stdout + cli.stderr
    with pytest.raises(JournalTampered, match="truncated_tail"):
        signing(signed_journal, key, witness_path)


def test_rows_removed_from_the_end_of_a_signed_shard_are_caught(signed_journal: str) -> None:
    """A shard cut short with its head moved back and the global positions closed up (every
    link, hash and position checks out) ends before the head a super-checkpoint signed."""
    shard = shard_of("run/7", SHARDS)
    delete_last_row(signed_journal, shard)
    report = verify_database(signed_journal)
    assert report.fault is not None and report.fault.kind == "truncated_tail"
    assert f"shard {shard} ends at row" in report.fault.message


class _CountingConnection:
    """A connection that counts the event rows its statements return (the walk's cost)."""

    def __init__(self, conn: psycopg.Connection[Any]) -> None:
        self.conn = conn
        self.rows = 0

    def execute(self, sql: str, args: tuple[Any, ...] = ()) -> Any:
        rows = self.conn.execute(sql, args).fetchall()
        if "FROM events" in sql and "shard = %s" in sql:
            self.rows += len(rows)
        return _Fetched(rows)


class _Fetched:
    def __init__(self, rows: list[Any]) -> None:
        self._rows = rows

    def fetchall(self) -> list[Any]:
        return self._rows


def test_acquisition_walks_a_shard_from_the_head_a_super_checkpoint_signed(
    signed_journal: str,
) -> None:
    """A node taking a shard walks only the rows since the last super-checkpoint (plus the
    signed row itself), yet refuses the shard when an unsigned row was edited, when the shard
    was rewritten whole (a walk from genesis finds that chain consistent) or cut short, and
    when the super-checkpoint's signature is not the roster's."""
    shard = shard_of("run/5", SHARDS)
    unsigned = PostgresJournal(signed_journal)  # no key: its rows stay unsigned
    unsigned.append("run/5", [out("late"), out("later")], expected_seq=3)
    unsigned.close()
    with psycopg.connect(signed_journal, autocommit=True) as conn:
        counting = _CountingConnection(conn)
        assert verify_shard(counting, SHARDS, shard) is None
        assert counting.rows == 1 + 2  # the signed row, then the two after it
        conn.execute("ALTER TABLE events DISABLE TRIGGER events_append_only")
        conn.execute(
            "UPDATE events SET payload = payload || '\\x00'::bytea "
            "WHERE stream = 'run/5' AND stream_seq = 4"
        )
        fault = verify_shard(conn, SHARDS, shard)
        assert fault is not None and fault.kind == "altered_payload"
    other = shard_of("run/2", SHARDS)
    rewrite_shard(signed_journal, other, encode(out("forged")))
    with psycopg.connect(signed_journal, autocommit=True) as conn:
        fault = verify_shard(conn, SHARDS, other)
        assert fault is not None and fault.kind == "rewritten_chain"
        assert f"shard {other} was rewritten: its row" in fault.message
    cut = shard_of("run/7", SHARDS)
    delete_last_row(signed_journal, cut)
    with psycopg.connect(signed_journal, autocommit=True) as conn:
        fault = verify_shard(conn, SHARDS, cut)
        assert fault is not None and "is missing" in fault.message
        (position,) = conn.execute(
            "SELECT max(shard_pos) FROM events WHERE shard = -1"
        ).fetchone() or (0,)
    with psycopg.connect(signed_journal, autocommit=True) as conn:
        conn.execute("ALTER TABLE events DISABLE TRIGGER events_append_only")
        conn.execute(
            # one byte flipped (set to 0 it changed nothing when it was 0 already: 1 run in 256)
            "UPDATE events SET payload = set_byte(payload, octet_length(payload) - 4, "
            "get_byte(payload, octet_length(payload) - 4) # 255) "
            "WHERE shard = -1 AND shard_pos = %s",
            (position,),
        )
        fault = verify_shard(conn, SHARDS, shard)
        assert fault is not None and fault.kind == "bad_checkpoint_signature"


def test_a_journal_signed_by_a_key_outside_the_pinned_roster_fails(
    dsn: str, tmp_path: Path, witness_path: Path
) -> None:
    """Someone who can write the database opens it with a key of their own: its key joins the
    recorded roster, so only a pinned roster tells."""
    impostor = NodeKey.load_or_create(tmp_path / "impostor.key")
    journal = signing(dsn, impostor, witness_path)
    fill(journal)
    journal.close()
    unpinned = verify_database(dsn)
    assert unpinned.ok and not unpinned.anchored  # UNANCHORED: it records its own key
    real = NodeKey.load_or_create(tmp_path / "real.key")
    report = verify_database(dsn, roster={real.public_key})
    assert report.fault is not None
    assert report.fault.kind == "bad_checkpoint_signature"
    assert "not in the pinned roster" in report.fault.message
    assert verify_database(dsn, roster={real.public_key, impostor.public_key}).anchored
    roster = tmp_path / "roster"  # a PEM block and a verifier key line, as pubkey prints them
    roster.write_text(real.public_pem() + verifier_key(real.origin, real.public_key) + "\n")
    cli = reel("verify", "--dsn", dsn, "--roster", str(roster))
    assert cli.returncode == 1 and "bad_checkpoint_signature" in cli.stdout
    cli = reel("verify", "--dsn", dsn)
    assert cli.returncode == 0 and "UNANCHORED" in cli.stdout, cli.stdout + cli.stderr


def test_a_witness_of_another_key_is_refused(
    signed_journal: str, tmp_path: Path, witness_path: Path
) -> None:
    other = NodeKey.load_or_create(tmp_path / "other.key")
    with pytest.raises(JournalTampered, match="not by this node's key"):
        signing(signed_journal, other, witness_path)


def test_the_witness_catches_up_with_checkpoints_it_missed(
    signed_journal: str, key: NodeKey, witness_path: Path
) -> None:
    """A crash between a super-checkpoint's commit and its witness append: the next start
    appends it from the journal."""
    witness_path.write_text("")
    signing(signed_journal, key, witness_path).close(checkpoint=False)
    notes, _ = read_notes(witness_path)
    assert [n.size for n in notes] == [24]


def test_verify_usage_errors_are_one_line(signed_journal: str, tmp_path: Path) -> None:
    private = tmp_path / "node.key"
    assert private.exists()
    for args, said in (
        (["--dsn", signed_journal, "--roster", str(private)], "private key"),
        (["--dsn", signed_journal, "--roster", str(tmp_path / "absent")], "cannot read"),
        (["--roster", str(private)], "--roster: only with --dsn"),
    ):
        cli = reel("verify", *args)
        assert cli.returncode == 2, (args, cli.stdout, cli.stderr)
        assert cli.stderr.count("\n") == 1 and said in cli.stderr, cli.stderr
    empty = tmp_path / "empty"
    empty.write_text("# nobody\n")
    cli = reel("verify", "--dsn", signed_journal, "--roster", str(empty))
    assert cli.returncode == 2 and "holds no public key" in cli.stderr


def test_a_version_2_journal_gains_the_integrity_chain_and_is_signed(
    dsn: str, key: NodeKey, witness_path: Path
) -> None:
    """A journal written before step 4 (no shard -1 rows, schema version 2) is upgraded in
    place by the first signing writer, which signs the rows already there."""
    old = PostgresJournal(dsn)
    fill(old)
    old.close()
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("DELETE FROM shard_lease WHERE shard = -1")
        conn.execute("DELETE FROM shard_head WHERE shard = -1")
        conn.execute("UPDATE cluster SET schema_version = 2")
    signing(dsn, key, witness_path).close()
    report = verify_database(dsn, roster={key.public_key})
    assert report.ok, report.fault
    assert (report.checkpoints, report.last_checkpoint_position) == (1, 24)


def test_only_the_journal_writes_the_integrity_chain(dsn: str, tmp_path: Path) -> None:
    """Through the port a roster entry can only land on an ordinary stream of a data shard,
    where verify reads no keys: it joins nobody to the roster."""
    intruder = NodeKey.load_or_create(tmp_path / "intruder.key")
    forged = JournalNodeJoined(node="evil", public_key=intruder.public_key)
    journal = PostgresJournal(dsn)
    try:
        with pytest.raises(AppendRejected, match="journal"):
            journal.append("journal", [forged], expected_seq=None)
        journal.append("run/x", [forged], expected_seq=0)
        assert journal.roster() == set()
    finally:
        journal.close()


def wait_until(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.05)


def holds(keeper: LeaseKeeper, shard: int) -> bool:
    try:
        keeper.token(shard)
    except ShardNotOwned:
        return False
    return True


def test_in_a_cluster_the_holder_of_the_integrity_chain_signs_and_a_drain_hands_it_over(
    dsn: str, tmp_path: Path
) -> None:
    """Two nodes share the shards; the one holding shard -1 (the checkpointer) signs every
    shard's head, the other's appends included; drained, it signs a last one and the other
    takes shard -1 over, joins the roster and signs on. Each witness holds what its node
    signed, and everything verifies against the roster of both keys, and not of one."""
    settings = LeaseSettings(ttl_s=2.0, ready_ticks=0)
    keys = {n: NodeKey.load_or_create(tmp_path / f"{n}.key") for n in "ab"}
    witnesses = {n: tmp_path / f"{n}.witness" for n in "ab"}
    keepers = {n: LeaseKeeper(dsn, n, settings=settings, integrity=True) for n in "ab"}
    journals: dict[str, PostgresJournal] = {}

    def open_node(n: str) -> None:
        keepers[n].start()
        journals[n] = PostgresJournal(
            dsn,
            node=n,
            leases=keepers[n],
            node_key=keys[n],
            witness=Witness.open(witnesses[n]),
            checkpoint_every_s=0.1,
        )

    def append(stream: str, text: str) -> None:
        """Through whichever node holds the stream's shard (it may be moving)."""
        for _ in range(200):
            for n, journal in journals.items():
                if shard_of(stream, SHARDS) in keepers[n].owned():
                    with contextlib.suppress(ShardNotOwned):
                        journal.append(stream, [out(text)], expected_seq=None)
                        return
            time.sleep(0.05)
        raise AssertionError(f"no node took the shard of {stream}")

    def signed_up_to(rows: int, key: NodeKey) -> bool:
        last = journals["b"].last_checkpoint()
        return last is not None and last.position == rows and last.public_key == key.public_key

    try:
        open_node("a")
        wait_until(lambda: holds(keepers["a"], -1), "a never took the integrity chain")
        open_node("b")
        wait_until(lambda: bool(keepers["b"].owned()), "b was given no shard")
        for i in range(16):
            append(f"run/{i}", "first")
        wait_until(lambda: signed_up_to(16, keys["a"]), "a did not sign b's appends too")
        assert not holds(keepers["b"], -1)
        journals.pop("a").close()  # its last super-checkpoint, then the drain
        keepers["a"].drain()
        wait_until(lambda: holds(keepers["b"], -1), "b never took the integrity chain over")
        for i in range(16):
            append(f"run/{i}", "second")
        wait_until(lambda: signed_up_to(32, keys["b"]), "b did not sign after the takeover")
    finally:
        for journal in journals.values():
            journal.close()
        for keeper in keepers.values():
            keeper.drain()
    notes = {n: read_notes(witnesses[n])[0] for n in "ab"}
    assert notes["a"] and notes["b"]
    for n in "ab":
        assert all(note.signed_by(keys[n].public_key) for note in notes[n])
    both = {keys["a"].public_key, keys["b"].public_key}
    for n in "ab":
        report = verify_database(dsn, roster=both, witness=notes[n])
        assert report.ok and report.anchored, report.fault
    reader = PostgresReader(dsn)
    try:
        assert reader.roster() == both
    finally:
        reader.close()
    report = verify_database(dsn, roster={keys["a"].public_key})
    assert report.fault is not None and report.fault.kind == "bad_checkpoint_signature"


def test_the_checkpointer_killed_another_node_process_takes_over_and_signs_on(
    dsn: str, tmp_path: Path
) -> None:
    """Two node processes (tests/events/lease_node.py) sign: a, first, holds shard -1. SIGKILL
        a: b takes shard -1 over once a's lease lapses and signs what both appended; stopped, b
        signs a last one. Each witness holds only its node's signatures, and the whole journal
        verifies against the roster of both keys with either witness, or both in one run (which
    tell the last super-checkpoint's deletion)."""
    nodes = Nodes(dsn, tmp_path)
    reader = PostgresReader(dsn)

    def last_signer() -> tuple[bytes, int]:
        last = reader.last_checkpoint()
        return (last.public_key, last.position) if last is not None else (b"", 0)

    try:
        nodes.start("a", str(tmp_path))
        nodes.wait("a holds the integrity chain", lambda: nodes.owners().get(-1) == "a")
        nodes.start("b", str(tmp_path))
        nodes.wait("b holds a shard", lambda: "b" in nodes.owners().values())
        a = NodeKey.load(tmp_path / "a.key").public_key
        nodes.wait("a signed", lambda: last_signer()[0] == a)
        nodes.procs["a"].kill()
        nodes.procs["a"].wait()
        signed_by_a = last_signer()[1]
        nodes.wait("b took the integrity chain", lambda: nodes.owners().get(-1) == "b")
        b = NodeKey.load(tmp_path / "b.key").public_key
        nodes.wait("b signed on", lambda: last_signer()[0] == b and last_signer()[1] > signed_by_a)
    finally:
        nodes.close()
        reader.close()
    notes = {n: read_notes(tmp_path / f"{n}.witness")[0] for n in "ab"}
    assert notes["a"] and notes["b"]
    assert all(note.signed_by(a) for note in notes["a"])
    assert all(note.signed_by(b) for note in notes["b"])
    for n in "ab":
        report = verify_database(dsn, roster={a, b}, witness=notes[n])
        assert report.ok and report.anchored, report.fault
    roster = tmp_path / "roster.pem"
    roster.write_text(
        NodeKey.load(tmp_path / "a.key").public_pem()
        + NodeKey.load(tmp_path / "b.key").public_pem()
    )
    both = ["--witness", str(tmp_path / "a.witness"), "--witness", str(tmp_path / "b.witness")]
    cli = reel("verify", "--dsn", dsn, "--roster", str(roster), *both)
    assert cli.returncode == 0, cli.stdout + cli.stderr
    assert (
        f"{len(notes['a']) + len(notes['b'])} witnessed super-checkpoints all present" in cli.stdout
    )
    delete_last_row(dsn, -1)  # b's last super-checkpoint: only b's witness knew it
    cli = reel("verify", "--dsn", dsn, "--roster", str(roster), *both)
    assert cli.returncode == 1 and "truncated_tail" in cli.stdout, cli.stdout + cli.stderr
