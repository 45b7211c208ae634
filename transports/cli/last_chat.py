"""The session ``reel chat`` continues: the last chat's on the same data dir, kept in
``<data>/chat.session`` (mode 0600, the session id alone: no secret) unless ``--session``,
``--key`` or ``--new`` says otherwise. A remembered session the node no longer has, or the
token may not use, is not an error: chat says so and starts a new one."""

from __future__ import annotations

import contextlib
import os
import re
from pathlib import Path

LAST_CHAT = "chat.session"
_SESSION_ID = re.compile(r"^[0-9A-HJKMNP-TV-Z]{26}$")


def remembered(data_dir: Path) -> str | None:
    """The last chat's session id, or None (none yet, or the file holds no session id)."""
    try:
        text = (data_dir / LAST_CHAT).read_text(encoding="ascii").strip()
    except (OSError, UnicodeDecodeError):
        return None
    return text if _SESSION_ID.match(text) else None


def remember(data_dir: Path, session_id: str) -> None:
    """Keep ``session_id`` for the next chat (written whole; a failure to write is not the
    chat's failure)."""
    path = data_dir / LAST_CHAT
    tmp = path.with_name(f"{LAST_CHAT}.tmp{os.getpid()}")
    with contextlib.suppress(OSError):
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            os.write(fd, session_id.encode() + b"\n")
        finally:
            os.close(fd)
        os.replace(tmp, path)
