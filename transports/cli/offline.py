"""Writing to the journal of a stopped node: every offline writer opens it here.

``reel chat --local`` opens a whole node (:func:`transports.runtime.open_runtime`); every other
command that appends to a data dir no node holds (``reel approvals``, ``memory``, ``sessions
restore``, ``tasks cancel``, ``tokens``, ``learning``) takes the journal from
:func:`journal_writer`. Both open it as ``reel node`` does (:func:`transports.journal_open.
open_journal`: its key, the witness of its config, the start-up check, then every row), before the
first append: a journal the node refuses is refused with the node's own line (exit 2) and
nothing is written to it or to its witness. A command that fails appends nothing either: no
checkpoint is signed over what it found.

Inside it a command does what the node's actor would: fold the aggregate's streams with the
aggregate's own ``apply`` (:func:`recorded` reads them as stored), ask the aggregate's own
decider for the events, and :func:`commit` them at the seq that fold expects, as ``cli``. No
command builds an event itself (tests/transports/cli/test_cli_builds_no_events.py); a task,
a token, a memory item and a learning review go through their aggregate's own writer, which
does the same.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from transports.cli.errors import NO_OPTIONS, CliError, failed

if TYPE_CHECKING:
    from actors.stream import Recorded
    from events import Event, Journal, JournalReadPort, StoredEvent

CLI_PRINCIPAL = "cli"
"""Whom an offline command's events name: the person at the machine's console."""


@contextmanager
def journal_writer(
    data_dir: Path, instead: str, options: Mapping[str, str] = NO_OPTIONS
) -> Iterator[Journal]:
    """The data dir's journal, checked, under its writer lock. When the block returns, the
    final checkpoint signs what it appended; when it raises, the journal is closed without one,
    and one of reel's own exceptions is the :class:`CliError` of its kind
    (:func:`transports.cli.errors.failed`; ``options`` names a bad field as the command line
    does). A node holding the data dir is a :class:`CliError` ending "stop the node, or
    ``instead``"."""
    from events import Journal
    from events.errors import JournalLocked
    from transports.cli.data_dir import node_config
    from transports.config import load_config
    from transports.journal_open import open_journal

    config = load_config(node_config(data_dir))
    if config.journal.backend != "sqlite":
        raise CliError(
            f"journal.backend is {config.journal.backend}: offline commands write the data "
            f"dir's SQLite journal only; {instead}"
        )
    try:
        journal = open_journal(data_dir, config)
    except JournalLocked as exc:
        raise CliError(f"{exc}: stop the node, or {instead}") from exc
    assert isinstance(journal, Journal)
    done = False
    try:
        yield journal
        done = True
    except Exception as exc:
        error = failed(exc, options)
        if error is None:
            raise
        raise error from exc
    finally:
        journal.close(checkpoint=done)


def recorded(reader: JournalReadPort, *streams: str) -> list[Recorded]:
    """The events of ``streams`` as stored, in journal order: what an aggregate folds."""
    from actors.stream import Recorded

    rows = sorted((row for s in streams for row in reader.read_stream(s)), key=_position)
    return [Recorded.of(row) for row in rows]


def commit(
    journal: Journal,
    stream: str,
    expected_seq: int,
    events: Sequence[Event],
    *,
    correlation_id: str | None = None,
    causation_id: str | None = None,
) -> list[Recorded]:
    """Append what an aggregate decided, as ``cli``, at the seq its fold expects (the journal
    refuses it when the stream moved since); returns the events as stored (redacted)."""
    from actors.stream import OwnedStream

    owned = OwnedStream(
        journal,
        stream,
        principal=CLI_PRINCIPAL,
        correlation_id=correlation_id,
        causation_id=causation_id,
    )
    return owned.append(expected_seq, *events)


def _position(row: StoredEvent) -> int:
    return row.position
