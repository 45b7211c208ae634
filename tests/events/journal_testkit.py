"""Helpers the journal tests share: a realistic journal, raw access for tampering, and checks.

Tampering goes through raw APSW on a *closed* journal file, exactly as an attacker with write
access to the data dir would: drop the append-only triggers, then edit rows. Forged hashes are
computed with :mod:`events.chain` (an attacker can read the format document too).
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import cast

import apsw

from events import Journal, JournalReader, JournalReadPort, NodeKey, StoredEvent, Witness
from events.catalog import (
    RunAccepted,
    RunCompleted,
    RunOutput,
    RunStarted,
    RunTurnCompleted,
    SessionCreated,
    ToolCompleted,
    ToolDecided,
    ToolProposed,
)
from events.chain import GENESIS, identity_bytes, payload_digest, row_hash

JOURNAL = "journal.db"
KEY = "node.key"


def build_journal(
    data: Path, *, runs: int = 13, checkpoint_every: int = 40, witness: Path | None = None
) -> NodeKey:
    """Write a journal of ``10 * runs + 1`` events over several streams into ``data``.

    Streams: one session, ``runs`` run streams and one tool stream per run; some events carry
    correlation and causation ids, some do not; principals vary. The writer adds a checkpoint
    row every ``checkpoint_every`` rows and one at close; with ``witness`` each is also
    appended there. Returns the node key.
    """
    data.mkdir(parents=True, exist_ok=True, mode=0o700)  # as reel makes one: no warning
    key = NodeKey.load_or_create(data / KEY)
    outside = Witness.open(witness, data_dir=data) if witness is not None else None
    with Journal(
        data / JOURNAL, node_key=key, witness=outside, checkpoint_every_events=checkpoint_every
    ) as j:
        j.append(
            "session/s1",
            [SessionCreated(session_id="s1", session_key="main", label="demo")],
            expected_seq=0,
            principal="user:alice",
        )
        for r in range(runs):
            run, tool = f"r{r}", f"t{r}"
            j.append(
                "session/s1",
                [RunAccepted(run_id=run, session_id="s1", text=f"question {r}")],
                expected_seq=r + 1,
                principal="user:alice",
                correlation_id=run,
            )
            j.append(
                f"run/{run}",
                [
                    RunStarted(run_id=run, max_turns=4, max_tool_calls=4, wall_clock_s=60.0),
                    RunOutput(run_id=run, turn=0, text="let me look"),
                    RunOutput(run_id=run, turn=0, text=" at that"),
                ],
                expected_seq=0,
                correlation_id=run,
            )
            j.append(
                f"tool/{tool}",
                [
                    ToolProposed(
                        invocation_id=tool,
                        run_id=run,
                        session_id="s1",
                        call_id=f"c{r}",
                        tool="fs.read",
                        arguments={"path": f"notes/{r}.txt", "lines": [1, 2, 3]},
                    ),
                    ToolDecided(
                        invocation_id=tool,
                        run_id=run,
                        tool="fs.read",
                        outcome="allow",
                        reason="posture",
                        policy_ids=("baseline",),
                    ),
                    ToolCompleted(
                        invocation_id=tool,
                        run_id=run,
                        tool="fs.read",
                        ok=True,
                        output="hello",
                        duration_ms=3,
                    ),
                ],
                expected_seq=0,
                correlation_id=run,
                causation_id=f"call-{r}",
                principal="actor:run",
            )
            j.append(
                f"run/{run}",
                [
                    RunTurnCompleted(
                        run_id=run,
                        turn=0,
                        prompt_tokens=120,
                        completion_tokens=9,
                        tool_calls=1,
                        finish_reason="tool_calls",
                    ),
                    RunOutput(run_id=run, turn=1, text="done"),
                    RunCompleted(run_id=run, answer=f"answer {r}", turns=2, tool_calls=1),
                ],
                expected_seq=3,
                correlation_id=run,
            )
    return key


def copy_journal(source: Path, target: Path) -> Path:
    """Copy a closed journal (and node key) into ``target``; returns the copied journal path."""
    target.mkdir(parents=True, exist_ok=True, mode=0o700)
    for name in (JOURNAL, KEY):
        shutil.copy2(source / name, target / name)
    return target / JOURNAL


@contextmanager
def tamper(path: Path) -> Iterator[apsw.Connection]:
    """A raw read-write connection with the append-only triggers dropped; commits on exit."""
    conn = apsw.Connection(str(path))
    try:
        conn.execute("DROP TRIGGER IF EXISTS events_append_only_update")
        conn.execute("DROP TRIGGER IF EXISTS events_append_only_delete")
        with conn:
            yield conn
    finally:
        conn.close()


Row = dict[str, object]

ROW_COLUMNS = (
    "position",
    "event_id",
    "stream",
    "stream_seq",
    "kind",
    "version",
    "recorded_at_ms",
    "principal",
    "correlation_id",
    "causation_id",
    "payload",
    "payload_sha256",
    "prev_hash",
    "hash",
)


def fetch_row(conn: apsw.Connection, position: int) -> Row:
    """Every column of the row at ``position``."""
    values = conn.execute(
        f"SELECT {', '.join(ROW_COLUMNS)} FROM events WHERE position = ?", (position,)
    ).fetchall()
    assert values, f"no row at {position}"
    return dict(zip(ROW_COLUMNS, values[0], strict=True))


def insert_row(conn: apsw.Connection, row: Row) -> None:
    """Insert a row as given (no hashing)."""
    marks = ", ".join("?" * len(ROW_COLUMNS))
    conn.execute(
        f"INSERT INTO events({', '.join(ROW_COLUMNS)}) VALUES ({marks})",
        tuple(row[c] for c in ROW_COLUMNS),
    )


def seal(row: Row, prev_hash: bytes) -> Row:
    """``row`` with ``payload_sha256``, ``prev_hash`` and ``hash`` computed as the journal does."""
    identity = identity_bytes(
        row["position"],  # type: ignore[arg-type]
        row["event_id"],  # type: ignore[arg-type]
        row["stream"],  # type: ignore[arg-type]
        row["stream_seq"],  # type: ignore[arg-type]
        row["kind"],  # type: ignore[arg-type]
        row["version"],  # type: ignore[arg-type]
        row["recorded_at_ms"],  # type: ignore[arg-type]
        row["principal"],  # type: ignore[arg-type]
        row["correlation_id"],  # type: ignore[arg-type]
        row["causation_id"],  # type: ignore[arg-type]
    )
    payload = row["payload"]
    assert isinstance(payload, bytes)
    return {
        **row,
        "payload_sha256": payload_digest(payload),
        "prev_hash": prev_hash,
        "hash": row_hash(prev_hash, identity, payload),
    }


def head_hash(conn: apsw.Connection) -> tuple[int, bytes]:
    """The last position and its stored hash (0 and genesis when empty)."""
    rows = conn.execute("SELECT position, hash FROM events ORDER BY position DESC LIMIT 1")
    for position, hash_ in rows:
        return int(position), bytes(hash_)
    return 0, GENESIS


def shift_positions(conn: apsw.Connection, from_position: int, delta: int) -> None:
    """Renumber every row at or after ``from_position`` by ``delta`` (via negative positions,
    so the primary key never collides mid-update)."""
    conn.execute("UPDATE events SET position = -position WHERE position >= ?", (from_position,))
    conn.execute("UPDATE events SET position = -position + ? WHERE position < 0", (delta,))


def all_events(reader: JournalReadPort) -> list[StoredEvent]:
    """Every stored row, in position order."""
    out: list[StoredEvent] = []
    while batch := reader.read(after_position=out[-1].position if out else 0, limit=5000):
        out.extend(batch)
    return out


def assert_dense(reader: JournalReader) -> list[StoredEvent]:
    """Positions are 1..head without gaps and every stream's seqs are 0..n-1; returns the rows."""
    rows = all_events(reader)
    assert [e.position for e in rows] == list(range(1, len(rows) + 1))
    assert reader.head().position == len(rows) == reader.count()
    seqs: dict[str, list[int]] = {}
    for event in rows:
        seqs.setdefault(event.stream, []).append(event.stream_seq)
    for stream, got in seqs.items():
        assert got == list(range(len(got))), f"stream {stream} is not dense: {got}"
    return rows


# --- forging: what an attacker who can write the data dir does ------------------------------

CHECKPOINT_KIND = "journal.checkpoint"


def checkpoint_rows(conn: apsw.Connection) -> list[int]:
    """Positions of the checkpoint rows (kind ``journal.checkpoint``), in order."""
    return [
        cast(int, p)
        for (p,) in conn.execute(
            "SELECT position FROM events WHERE kind = ? ORDER BY position", (CHECKPOINT_KIND,)
        ).fetchall()
    ]


def renumber_dense(conn: apsw.Connection) -> None:
    """Renumber every row to 1..n in position order (closing the gaps a deletion left)."""
    positions = [int(p) for (p,) in conn.execute("SELECT position FROM events ORDER BY position")]
    conn.execute("UPDATE events SET position = -position - 1")
    for new, old in enumerate(positions, start=1):
        conn.execute("UPDATE events SET position = ? WHERE position = ?", (new, -old - 1))


def delete_checkpoints(conn: apsw.Connection, *, renumber: bool = False) -> list[int]:
    """Delete every checkpoint row (and any legacy ``checkpoints`` table row); with
    ``renumber`` the rows after them move down so positions stay dense. Returns the deleted
    positions."""
    deleted = checkpoint_rows(conn)
    conn.execute("DELETE FROM events WHERE kind = ?", (CHECKPOINT_KIND,))
    legacy = conn.execute(
        "SELECT count(*) FROM sqlite_schema WHERE type = 'table' AND name = 'checkpoints'"
    ).fetchall()[0][0]
    if legacy:
        conn.execute("DELETE FROM checkpoints")
    if renumber:
        renumber_dense(conn)
    return deleted


def reseal(conn: apsw.Connection, start: int, resign: object | None = None) -> None:
    """Recompute ``payload_sha256``, ``prev_hash`` and ``hash`` of every row from ``start`` on,
    as the format document says: the rewrite an attacker who read it can do. With ``resign``
    (an Ed25519 private key), every checkpoint row from ``start`` on is re-signed with it over
    the forged chain (the attacker replaced ``node.key``)."""
    head = cast(int, conn.execute("SELECT max(position) FROM events").fetchall()[0][0])
    prev = fetch_row(conn, start - 1)["hash"] if start > 1 else GENESIS
    for position in range(start, head + 1):
        assert isinstance(prev, bytes)
        row = fetch_row(conn, position)
        if resign is not None and row["kind"] == CHECKPOINT_KIND:
            row["payload"] = resigned_payload(row["payload"], position, prev, resign)  # type: ignore[arg-type]
        sealed = seal(row, prev)
        conn.execute(
            "UPDATE events SET payload = ?, payload_sha256 = ?, prev_hash = ?, hash = ? "
            "WHERE position = ?",
            (
                sealed["payload"],
                sealed["payload_sha256"],
                sealed["prev_hash"],
                sealed["hash"],
                position,
            ),
        )
        prev = sealed["hash"]


def resigned_payload(payload: bytes, position: int, prev: bytes, key: object) -> bytes:
    """A checkpoint row's payload signed again by ``key`` over ``(position - 1, prev)``."""
    import msgspec
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    from events import note

    assert isinstance(key, Ed25519PrivateKey)
    public = key.public_key().public_bytes(
        serialization.Encoding.Raw, serialization.PublicFormat.Raw
    )
    fields = msgspec.msgpack.decode(payload)
    origin = note.origin_for(public)
    fields.update(
        origin=origin,
        size=position - 1,
        hash=prev,
        public_key=public,
        signature=key.sign(note.checkpoint_body(origin, position - 1, prev)),
    )
    return msgspec.msgpack.encode(fields)


def replace_payload(conn: apsw.Connection, position: int, payload: bytes, kind: str) -> None:
    """Put another event at ``position`` (kind and payload), leaving hashes for :func:`reseal`."""
    conn.execute(
        "UPDATE events SET kind = ?, version = 1, payload = ? WHERE position = ?",
        (kind, payload, position),
    )
