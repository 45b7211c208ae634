"""The data dir is private: it holds every conversation (the journal and the views), the node's
signing key and the admin token, so no other user of the machine may read it.

:func:`make_private` runs before a node or an offline command opens anything in the data dir.
A new data dir is created 0700. An existing one (an operator's ``mkdir``, a data dir from an
older reel) is made so: the dir 0700, and group and other bits dropped from every regular file
directly in it (the journal and views with their SQLite ``-wal``/``-shm`` files, the admin
token, ``node.json``, the lock), with one warning naming the path and what was wider. The files
reel creates later are 0600 from the start (SQLite's side files take their database's mode).

A dir that holds files but nothing of a data dir's (:data:`DATA_DIR_NAMES`) is refused
instead (``ConfigError``, exit 2), before anything in it changes: ``--data ~`` or ``--data
/tmp``, mistyped, would otherwise take every file in it from the other users (``/tmp`` itself
made 0700 stops every other program on the machine).

Left as they are: ``node.key``, whose loader refuses a key others could read (it may have been
copied: the operator replaces it or tightens it knowingly); the operator's own files
(``config.toml``, what is in ``plugins/`` and ``policies/``: the dirs are created 0700); and the
workspace and everything below it (the shell sandbox binds it; reel creates it 0700 and its
mode after that is the operator's choice).
"""

from __future__ import annotations

import logging
import os
import stat
from pathlib import Path

from transports.cli.last_chat import LAST_CHAT
from transports.node.node_file import NODE_FILE

log = logging.getLogger("reel.node")

DIR_MODE = 0o700
OPEN_BITS = stat.S_IRWXG | stat.S_IRWXO
"""What no file or dir of the data dir keeps: any access by group or others."""

LEFT_ALONE = frozenset({"node.key", "config.toml"})
"""Files never tightened here: the node key refuses itself when others could read it, and the
config is the operator's file."""


DATA_DIR_NAMES = frozenset(
    {
        *("journal.db", "journal.db.lock", "views.db", "node.key", "admin.token", NODE_FILE),
        *("config.toml", "vault", "vault.key", "workspace", "plugins", "policies", LAST_CHAT),
    }
)
"""What reel or its operator puts in a data dir: a dir holding one of them is a data dir."""


def make_private(data_dir: Path) -> None:
    """Create ``data_dir`` 0700, or make an existing one private (one warning when it was not).
    A mode that cannot be changed (another user's dir) is warned about, never fatal. A dir
    that holds files and none of :data:`DATA_DIR_NAMES` is a ``ConfigError`` naming it, and
    nothing in it is changed."""
    try:
        data_dir.mkdir(parents=True, mode=DIR_MODE)
        return
    except FileExistsError:
        if not data_dir.is_dir():
            return  # not a dir: opening the journal in it says so
    _refuse_a_foreign_dir(data_dir)
    wider: list[str] = []
    try:
        _tighten(data_dir, "the dir", wider)
        with os.scandir(data_dir) as entries:
            for entry in entries:
                if entry.is_file(follow_symlinks=False) and entry.name not in LEFT_ALONE:
                    _tighten(Path(entry.path), entry.name, wider)
    except OSError as exc:
        log.warning("data dir %s: could not make it private (%s)", data_dir, exc.strerror)
        return
    if wider:
        log.warning(
            "data dir %s was open to other users (%s): made private (the dir 0700, its files 0600)",
            data_dir,
            ", ".join(wider),
        )


def _tighten(path: Path, shown: str, wider: list[str]) -> None:
    """Drop group and other bits from ``path``, noting its old mode in ``wider``."""
    mode = stat.S_IMODE(path.stat().st_mode)
    if mode & OPEN_BITS:
        os.chmod(path, mode & ~OPEN_BITS)
        wider.append(f"{shown} was {mode:04o}")


def _refuse_a_foreign_dir(data_dir: Path) -> None:
    """A ``ConfigError`` when ``data_dir`` holds files (an empty dir, or one of dirs only, such
    as a volume's ``lost+found``, is a new data dir) and none of :data:`DATA_DIR_NAMES`."""
    try:
        with os.scandir(data_dir) as entries:
            names = {e.name: e.is_dir(follow_symlinks=False) for e in entries}
    except OSError:
        return  # unreadable: making it private warns, opening the journal says why
    if DATA_DIR_NAMES.isdisjoint(names):
        files = sorted(name for name, is_dir in names.items() if not is_dir)
        if files:
            # Imported here: transports.config imports every section's settings (0.15 s), and
            # every client command makes its data dir private (`reel tokens list`: row 16).
            from transports.config import ConfigError

            shown = ", ".join(files[:3]) + (", ..." if len(files) > 3 else "")
            raise ConfigError(
                f"data dir {data_dir}: holds files that are not reel's ({shown}) and no "
                "journal, key or config: not made private, nothing written; name a new or "
                "empty dir, or one a node has used"
            )
