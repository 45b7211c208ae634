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

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from transports.cli.errors import NO_OPTIONS, CliError, failed

if TYPE_CHECKING:
    from events import Journal


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
    except Exception as exc:
        error = failed(exc, options)
        if error is None:
            raise
        raise error from exc
    finally:
        journal.close(checkpoint=done)
