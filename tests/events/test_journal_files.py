"""Opening files that are not (usable) journals, and the writer lock between real processes."""

from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import sys
import textwrap
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import apsw
import pytest

from events import (
    Journal,
    JournalError,
    JournalLocked,
    JournalReader,
    JournalUnavailable,
    NotAJournal,
    SchemaTooNew,
    SchemaTooOld,
    verify,
)
from events.catalog import RunAccepted, RunCompleted, RunOutput
from events.sqlite.schema import INDEXES, SCHEMA_VERSION

IS_ROOT = os.geteuid() == 0


def out(text: str = "x") -> RunOutput:
    return RunOutput(run_id="r", turn=0, text=text)


def make_journal(path: Path, events: int = 3) -> None:
    with Journal(path) as journal:
        for i in range(events):
            journal.append("run/1", [out(str(i))], expected_seq=i)


def random_bytes(path: Path) -> None:
    path.write_bytes(os.urandom(8192))


def other_database(path: Path) -> None:
    conn = apsw.Connection(str(path))
    conn.execute("CREATE TABLE notes(id INTEGER PRIMARY KEY, body TEXT)")
    conn.execute("INSERT INTO notes(body) VALUES ('not a journal')")
    conn.close()


def newer_schema(path: Path) -> None:
    make_journal(path)
    conn = apsw.Connection(str(path))
    conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    conn.close()


def older_schema(path: Path) -> None:
    """Version 1: checkpoints in a table beside the chain, where deleting them went unseen."""
    make_journal(path)
    conn = apsw.Connection(str(path))
    conn.execute("PRAGMA user_version = 1")
    conn.close()


def directory(path: Path) -> None:
    path.mkdir()


BAD_FILES: list[tuple[Callable[[Path], None], type[JournalError], str]] = [
    (random_bytes, NotAJournal, "not an SQLite database"),
    (other_database, NotAJournal, "application_id 0x0"),
    (newer_schema, SchemaTooNew, f"schema version {SCHEMA_VERSION + 1}"),
    (older_schema, SchemaTooOld, "schema version 1"),
    (directory, JournalUnavailable, "is a directory"),
]


def fingerprint(path: Path) -> str | None:
    return hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else None


@pytest.mark.parametrize(
    ("make", "error", "words"), BAD_FILES, ids=lambda v: getattr(v, "__name__", "")
)
@pytest.mark.parametrize("opener", [Journal, JournalReader.open], ids=["writer", "reader"])
def test_bad_file_is_refused_with_one_clear_line(
    tmp_path: Path,
    make: Callable[[Path], None],
    error: type[JournalError],
    words: str,
    opener: Callable[[Path], object],
) -> None:
    path = tmp_path / "journal.db"
    make(path)
    before = fingerprint(path)
    with pytest.raises(error) as info:
        opener(path)
    message = str(info.value)
    assert words in message
    assert str(path) in message
    assert "\n" not in message
    assert fingerprint(path) == before  # the file was not touched


def test_missing_file_for_a_reader(tmp_path: Path) -> None:
    with pytest.raises(JournalUnavailable, match="no journal at"):
        JournalReader.open(tmp_path / "journal.db")
    assert not (tmp_path / "journal.db").exists()


def test_empty_database_is_not_a_journal_for_a_reader(tmp_path: Path) -> None:
    path = tmp_path / "journal.db"
    path.touch()
    with pytest.raises(NotAJournal, match="empty database"):
        JournalReader.open(path)


def test_read_only_journal(tmp_path: Path) -> None:
    path = tmp_path / "journal.db"
    make_journal(path)
    before = fingerprint(path)
    path.chmod(0o444)
    try:
        if not IS_ROOT:  # root ignores file modes: there is no refusal to observe
            with pytest.raises(JournalUnavailable, match="read-only") as info:
                Journal(path)
            assert "\n" not in str(info.value)
        reader = JournalReader.open(path)
        try:
            assert reader.count() == 3
            assert verify(reader).ok
        finally:
            reader.close()
        assert fingerprint(path) == before
    finally:
        path.chmod(0o644)


# --- the writer lock, between real processes ----------------------------------------------

HOLDER = textwrap.dedent(
    """
    import sys
    from pathlib import Path
    from events import Journal
    from events.catalog import RunAccepted, RunCompleted, RunOutput
    journal = Journal(Path(sys.argv[1]))
    journal.append("run/holder", [RunOutput(run_id="h", turn=0, text="held")], expected_seq=None)
    print("ready", flush=True)
    sys.stdin.read()  # hold the lock until the parent closes our stdin
    journal.close()
    """
)

OPENER = textwrap.dedent(
    """
    import sys
    from pathlib import Path
    from events import Journal
    from events.catalog import RunAccepted, RunCompleted, RunOutput
    with Journal(Path(sys.argv[1])) as journal:
        result = journal.append("run/next", [RunOutput(run_id="n", turn=0, text="mine")],
                                expected_seq=0)
    print("appended", result.first_position)
    """
)


@contextmanager
def holder(path: Path) -> Iterator[subprocess.Popen[str]]:
    child = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(path)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert child.stdout is not None and child.stdin is not None
    try:
        assert child.stdout.readline().strip() == "ready"
        yield child
    finally:
        if child.poll() is None:
            child.kill()
        child.wait()
        child.stdin.close()
        child.stdout.close()


def test_second_process_gets_journal_locked_naming_the_holder(tmp_path: Path) -> None:
    path = tmp_path / "journal.db"
    make_journal(path)
    with holder(path) as child:
        before = fingerprint(path)
        with pytest.raises(JournalLocked) as info:
            Journal(path)
        assert info.value.holder_pid == child.pid
        assert f"process {child.pid}" in str(info.value)
        assert "\n" not in str(info.value)
        assert fingerprint(path) == before
        reader = JournalReader.open(path)  # readers never need the lock
        try:
            assert reader.count() == 4
        finally:
            reader.close()
        assert child.stdin is not None
        child.stdin.close()
        assert child.wait() == 0
    with Journal(path) as journal:  # released on close
        assert journal.count() == 4


def test_lock_is_released_by_kill_9(tmp_path: Path) -> None:
    path = tmp_path / "journal.db"
    with holder(path) as child:
        child.send_signal(signal.SIGKILL)
        child.wait()
    done = subprocess.run(
        [sys.executable, "-c", OPENER, str(path)], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["appended", "2"]
    reader = JournalReader.open(path)
    try:
        assert verify(reader).ok
    finally:
        reader.close()


def test_lock_in_the_same_process(tmp_path: Path) -> None:
    path = tmp_path / "journal.db"
    with Journal(path):
        with pytest.raises(JournalLocked) as info:
            Journal(path)
        assert info.value.holder_pid == os.getpid()


def _kind_index(path: Path) -> list[str]:
    conn = apsw.Connection(str(path), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        return [
            str(row[0])
            for row in conn.execute(
                "SELECT name FROM sqlite_schema WHERE type = 'index' AND name = 'events_by_kind'"
            )
        ]
    finally:
        conn.close()


def test_a_journal_from_before_the_kind_index_gets_it_when_a_writer_opens_it(
    tmp_path: Path,
) -> None:
    """A file written before ``events_by_kind`` existed (the index dropped by hand, as such a
    file has none) is indexed at its next writable open, its rows and chain unchanged; a
    reader neither needs nor creates the index, and a kind read answers the same through it."""
    path = tmp_path / "journal.db"
    make_journal(path, events=5)
    with Journal(path) as journal:
        journal.append("session/s", [out("other")], expected_seq=0)
    conn = apsw.Connection(str(path))
    conn.execute("DROP INDEX events_by_kind")
    conn.close()
    assert _kind_index(path) == []
    reader = JournalReader.open(path)
    before = reader.events_of_kinds(("run.output",))
    scan_plan = reader._rows(
        "EXPLAIN QUERY PLAN SELECT position FROM events WHERE kind IN ('run.output')"
    )
    reader.close()
    assert _kind_index(path) == []  # a reader never writes the file
    assert not any("events_by_kind" in str(row) for row in scan_plan)
    with Journal(path) as journal:
        assert journal.events_of_kinds(("run.output",)) == before
        plan = journal._rows(
            "EXPLAIN QUERY PLAN SELECT position FROM events WHERE kind IN ('run.output')"
        )
        assert any("events_by_kind" in str(row) for row in plan), plan
    assert _kind_index(path) == ["events_by_kind"]
    report = verify(JournalReader.open(path))
    assert report.ok and report.events == 6, report


def test_open_runs_come_from_the_open_index_which_a_writer_adds_to_an_older_file(
    tmp_path: Path,
) -> None:
    """Which runs are open is read from ``events_open`` (both sides of the join are index
    ranges: no row of an ended run is read); a file from before the index answers the same
    the slow way, and its next writable open adds the index."""
    path = tmp_path / "journal.db"
    with Journal(path) as journal:
        for run in ("r1", "r2"):
            accepted = RunAccepted(run_id=run, session_id="s", text="hi")
            journal.append(f"session/{run}", [accepted], expected_seq=0, correlation_id=run)
        journal.append("run/r1", [RunCompleted(run_id="r1", answer="a")], expected_seq=0,
                       correlation_id="r1")  # fmt: skip
    ended = ("run.cancelled", "run.completed", "run.failed")

    def open_runs() -> tuple[list[str | None], str]:
        """The open runs, and SQLite's plan for the query that found them."""
        reader = JournalReader.open(path)
        asked: list[str] = []
        rows = reader._rows

        def spy(sql: str, args: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
            asked.append(sql)
            return rows(sql, args)

        reader._rows = spy  # type: ignore[method-assign]
        try:
            found = reader.open_events("run.accepted", ended, "correlation_id")
            plan = rows("EXPLAIN QUERY PLAN " + asked[0], ("run.accepted", *ended))
        finally:
            reader.close()
        return [e.correlation_id for e in found], " ".join(str(row) for row in plan)

    found, plan = open_runs()
    assert found == ["r2"]
    assert "COVERING INDEX events_open" in plan, plan
    assert "events_by_kind" not in plan, plan
    conn = apsw.Connection(str(path))
    conn.execute("DROP INDEX events_open")
    conn.close()
    found, plan = open_runs()
    assert found == ["r2"]
    assert "events_open" not in plan, plan
    with Journal(path):
        pass
    found, plan = open_runs()
    assert found == ["r2"]
    assert "COVERING INDEX events_open" in plan, plan


def test_an_index_defined_otherwise_by_an_older_reel_is_built_again(tmp_path: Path) -> None:
    """``events_open`` over fewer kinds (what a reel before a new ending kind made) would be
    used by no query: a writer's open replaces it with today's definition, rows unchanged."""
    path = tmp_path / "journal.db"
    make_journal(path, events=3)
    conn = apsw.Connection(str(path))
    conn.execute("DROP INDEX events_open")
    conn.execute("CREATE INDEX events_open ON events(kind) WHERE kind IN ('run.accepted')")
    conn.close()
    with Journal(path):
        pass
    conn = apsw.Connection(str(path), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        held = conn.execute("SELECT sql FROM sqlite_schema WHERE name = 'events_open'").get
    finally:
        conn.close()
    assert held == INDEXES[1].replace("IF NOT EXISTS ", "")
    report = verify(JournalReader.open(path))
    assert report.ok and report.events == 3, report
