"""The admin bearer token: created on first start (mode 0600), required by HTTP and gRPC.

Comparison is constant-time. The token is never logged: transports log only that a request was
refused, never what it carried.
"""

from __future__ import annotations

import hmac
import os
import secrets
from pathlib import Path

TOKEN_FILE = "admin.token"


def token_path(data_dir: Path) -> Path:
    """Where the data dir keeps its admin token."""
    return data_dir / TOKEN_FILE


def load_or_create_token(data_dir: Path) -> str:
    """The data dir's admin token, created (43 url-safe characters, mode 0600) if absent."""
    path = token_path(data_dir)
    if not path.exists():
        token = secrets.token_urlsafe(32)
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


def bearer_matches(header: str | None, token: str) -> bool:
    """Whether an ``Authorization`` header value carries ``Bearer <token>`` (constant time)."""
    if not header:
        return False
    scheme, _, value = header.strip().partition(" ")
    if scheme.lower() != "bearer":
        return False
    return hmac.compare_digest(value.strip().encode(), token.encode())
