"""Writing to the journal of a stopped node: every offline writer opens it here.

``reel chat --local`` opens a whole node (:func:`transports.runtime.open_runtime`); every other
command that appends to a data dir no node holds (``reel approvals``, ``memory``, ``sessions
restore``, ``tasks cancel``, ``tokens``, ``learning``) takes the journal from
:func:`journal_writer`. Both open it as ``reel node`` does (:func:`transports.runtime.
open_journal`: its key, the witness of its config, the start-up check, then every row), before the
first append: a journal the node refuses is refused with the node's own line (exit 2) and
nothing is written to it or to its witness. A command that fails appends nothing either: no
checkpoint is signed over what it found.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from transports.cli.errors import CliError

if TYPE_CHECKING:
    from events import Journal


@contextmanager
def journal_writer(data_dir: Path, instead: str) -> Iterator[Journal]:
    """The data dir's journal, checked, under its writer lock. When the block returns, the
    final checkpoint signs what it appended; when it raises, the journal is closed without one.
    A node holding the data dir is a :class:`CliError` ending "stop the node, or ``instead``"."""
    from events.errors import JournalLocked
    from transports.cli.data_dir import node_config
    from transports.config import load_config
    from transports.runtime import open_journal

    try:
        journal = open_journal(data_dir, load_config(node_config(data_dir)))
    except JournalLocked as exc:
        raise CliError(f"{exc}: stop the node, or {instead}") from exc
    done = False
    try:
        yield journal
        done = True
    finally:
        journal.close(checkpoint=done)
