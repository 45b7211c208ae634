"""The admin bearer token: created on first start (mode 0600), required by HTTP and gRPC.

Comparison is constant-time. The token is never logged: transports log only that a request was
refused, never what it carried.
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path

from events.redaction.redact import looks_secret

TOKEN_FILE = "admin.token"


def token_path(data_dir: Path) -> Path:
    """Where the data dir keeps its admin token."""
    return data_dir / TOKEN_FILE


ADMIN_TOKEN_PREFIX = "reel_admin_"
"""What an admin token starts with: redaction knows the shape (events.redaction.detectors), so one
pasted into a message, a session key or a sender id never reaches the journal in clear."""


def load_or_create_token(data_dir: Path) -> str:
    """The data dir's admin token, created (``reel_admin_`` and 43 url-safe characters, mode
    0600) if absent. A token file written before the prefix keeps working, but redaction cannot
    tell its bare text from other text: :func:`is_recognisable` says which it is."""
    path = token_path(data_dir)
    if not path.exists():
        token = ADMIN_TOKEN_PREFIX + secrets.token_urlsafe(32)
        tmp = path.with_name(f"{TOKEN_FILE}.tmp{os.getpid()}")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            os.write(fd, (token + "\n").encode())
            os.fsync(fd)
        finally:
            os.close(fd)
        try:
            os.link(tmp, path)
        except FileExistsError:
            pass
        finally:
            tmp.unlink()
    return path.read_text(encoding="utf-8").strip()


def is_recognisable(admin_token: str) -> bool:
    """Whether redaction recognises ``admin_token`` (one made with the prefix is)."""
    return looks_secret(admin_token)
