"""Crash cycles: a real child process appends from many threads and is killed with SIGKILL at a
random moment; after each kill every acknowledged append is there, unchanged, and nothing half
written is visible. The data dir is reused, so the journal grows across cycles.

``REEL_CRASH_CYCLES`` raises the number of cycles (default 12).
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from events import Journal, JournalReader, NodeKey, StoredEvent, verify
from events.catalog import RunOutput
from tests.events.journal_testkit import JOURNAL, KEY, assert_dense

CHILD = Path(__file__).with_name("crash_writer.py")
CYCLES = int(os.environ.get("REEL_CRASH_CYCLES", "12"))
THREADS = 8


def run_until_killed(data: Path, cycle: int, acks_wanted: int, rng: random.Random) -> list[Any]:
    """Start the writer, read ``acks_wanted`` acknowledgements, SIGKILL it; return every
    acknowledgement it printed in full (including any the kill raced with)."""
    with open(data.parent / f"child-{cycle}.stderr", "wb") as errors:
        child = subprocess.Popen(
            [sys.executable, str(CHILD), str(data), str(cycle), str(THREADS)],
            stdout=subprocess.PIPE,
            stderr=errors,
        )
        assert child.stdout is not None
        lines: list[bytes] = []
        try:
            while len(lines) < acks_wanted:
                line = child.stdout.readline()
                if not line:
                    child.wait()
                    stderr = (data.parent / f"child-{cycle}.stderr").read_text()
                    pytest.fail(f"writer exited early ({child.returncode}): {stderr}")
                lines.append(line)
            time.sleep(rng.random() * 0.02)  # let it run on a little: a random moment
        finally:
            child.send_signal(signal.SIGKILL)
            child.wait()
        assert child.returncode == -signal.SIGKILL
        rest = child.stdout.read()
        child.stdout.close()
    complete = rest.split(b"\n")[:-1]  # a last line without its newline was never acknowledged
    return [json.loads(line) for line in [*lines, *complete]]


def check_acknowledged(events: list[StoredEvent], acks: list[Any]) -> None:
    for ack in acks:
        rows = events[ack["first_position"] - 1 : ack["last_position"]]
        assert [e.event_id for e in rows] == ack["event_ids"], ack
        assert [e.position for e in rows] == list(
            range(ack["first_position"], ack["last_position"] + 1)
        )
        assert {e.stream for e in rows} == {ack["stream"]}
        assert [e.stream_seq for e in rows] == list(
            range(ack["first_seq"], ack["first_seq"] + len(rows))
        )


def check_whole_appends(events: list[StoredEvent]) -> None:
    """Every append is all there or not at all: contiguous positions, turns 0..size-1."""
    appends: dict[str, list[tuple[StoredEvent, RunOutput]]] = {}
    for stored in events:
        event = stored.decode()
        if stored.stream == "journal":  # a checkpoint row, between appends
            continue
        assert isinstance(event, RunOutput)
        appends.setdefault(event.run_id, []).append((stored, event))
    for name, parts in appends.items():
        size = int(parts[0][1].text)
        assert [e.turn for _, e in parts] == list(range(size)), f"append {name} is partial"
        positions = [s.position for s, _ in parts]
        assert positions == list(range(positions[0], positions[0] + size)), name
        assert len({s.stream for s, _ in parts}) == 1


def test_acknowledged_appends_survive_sigkill(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    rng = random.Random(int(os.environ.get("REEL_CRASH_SEED", "0")) or None)
    acknowledged: list[Any] = []
    for cycle in range(CYCLES):
        acks = run_until_killed(data, cycle, rng.randint(1, 150), rng)
        acknowledged.extend(acks)
        # A new process may take the writer lock at once: kill -9 released it. Opening for
        # writing also recovers the WAL the killed writer left behind.
        key = NodeKey.load(data / KEY)
        Journal(data / JOURNAL, node_key=key).close(checkpoint=False)
        reader = JournalReader.open(data / JOURNAL)
        try:
            report = verify(reader, trusted_public_key=key.public_key)
            assert report.ok, (cycle, report.fault)
            events = assert_dense(reader)
        finally:
            reader.close()
        check_acknowledged(events, acknowledged)
        check_whole_appends(events)
        assert len(events) >= sum(len(a["event_ids"]) for a in acknowledged)
    assert len({a["name"] for a in acknowledged}) == len(acknowledged) >= CYCLES
