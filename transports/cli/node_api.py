"""Client commands asking a running node's HTTP API, when the node holds the data dir.

The node's address comes from the ``node.json`` it wrote once it listened, else from
``REEL_HTTP_PORT`` / ``REEL_HTTP_HOST`` when the caller sets one (it points the command at a
node itself), never from the config alone: the data dir is known to be held (:func:`online`), a
holder with an API writes ``node.json``, and an address guessed from the config (the default
port) could be another node's or any local process's, which would be sent this data dir's
token. A holder without ``node.json`` is starting, or runs without an API: the command says so.
The token comes from ``--token-file``, else ``REEL_TOKEN``, else the data dir's ``admin.token``;
it is sent, never printed.
"""

from __future__ import annotations

import http.client
import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, cast
from urllib.parse import urlsplit

from transports.cli.errors import NO_OPTIONS, CliError, refusal
from transports.cli.node_address import http_base, require_published
from transports.failures import ALL_KINDS, Kind


def node_token(data_dir: Path, token_file: Path | None) -> str:
    """The token a client command sends."""
    if token_file is not None:
        try:
            return token_file.read_text(encoding="utf-8").strip()
        except OSError as exc:
            raise CliError(f"cannot read --token-file {token_file}: {exc.strerror}") from None
    env = os.environ.get("REEL_TOKEN", "").strip()
    if env:
        return env
    try:
        return (data_dir / "admin.token").read_text(encoding="utf-8").strip()
    except OSError:
        raise CliError(
            f"no token: pass --token-file, set REEL_TOKEN, or use a data dir with admin.token "
            f"({data_dir})"
        ) from None


def call(
    data_dir: Path, token_file: Path | None, method: str, path: str, body: Any = None
) -> tuple[int, Any]:
    """``(status, decoded JSON)`` of one request to the node holding ``data_dir``; a 401 or
    403 is a :class:`CliError` with the node's message (a 403, Cedar's denial, exits
    :data:`EXIT_DENIED`)."""
    status, raw = _request(data_dir, token_file, method, path, body)
    try:
        decoded = json.loads(raw) if raw else None
    except ValueError:
        decoded = None
    if status in (401, 403):
        kind: Kind = "permission_denied" if status == 403 else "unauthenticated"
        raise refusal(kind, f"the node refused: {error_message(decoded, status)}")
    return status, decoded


def text(data_dir: Path, token_file: Path | None, path: str) -> str:
    """The text body of ``GET path`` (``/metrics``), which must answer 200."""
    status, raw = _request(data_dir, token_file, "GET", path, None)
    if status != 200:
        try:
            decoded = json.loads(raw) if raw else None
        except ValueError:
            decoded = None
        raise refused(decoded, status)
    return raw.decode("utf-8", "replace")


def _request(
    data_dir: Path, token_file: Path | None, method: str, path: str, body: Any
) -> tuple[int, bytes]:
    require_published(data_dir, "HTTP", "REEL_HTTP_PORT")
    base = http_base(data_dir)
    parts = urlsplit(base)
    token = node_token(data_dir, token_file)
    conn = http.client.HTTPConnection(parts.hostname or "127.0.0.1", parts.port, timeout=30)
    headers = {"Authorization": f"Bearer {token}"}
    payload = None
    if body is not None:
        payload = json.dumps(body).encode()
        headers["Content-Type"] = "application/json"
    try:
        conn.request(method, path, body=payload, headers=headers)
        response = conn.getresponse()
        return response.status, response.read()
    except OSError as exc:
        raise CliError(
            f"a node holds {data_dir} but its API at {base} cannot be reached "
            f"({exc.strerror or type(exc).__name__}): check REEL_HTTP_PORT / the config's http"
        ) from None
    finally:
        conn.close()


def error_message(decoded: Any, status: int) -> str:
    if isinstance(decoded, dict) and isinstance(decoded.get("error"), dict):
        return str(decoded["error"].get("message", f"HTTP {status}"))
    return f"HTTP {status}"


def refused(decoded: Any, status: int, options: Mapping[str, str] = NO_OPTIONS) -> CliError:
    """The :class:`CliError` for the node's error reply: the exit code of its ``code`` (a
    kind, :mod:`transports.failures`), the node's message, and the option a bad field is
    (``options``: the body's or query's field -> ``--scope``)."""
    error = decoded.get("error") if isinstance(decoded, dict) else None
    error = error if isinstance(error, dict) else {}
    code = error.get("code")
    kind = cast(Kind, code) if code in ALL_KINDS else "internal"
    field = error.get("field") if kind == "invalid_argument" else None
    named = field.removeprefix("$.").removeprefix("query.") if isinstance(field, str) else None
    return refusal(kind, error_message(decoded, status), named, options)


def api(
    data_dir: Path,
    token_file: Path | None,
    method: str,
    path: str,
    body: Any,
    ok: int,
    options: Mapping[str, str] = NO_OPTIONS,
) -> Any:
    """The decoded reply of a request that must answer ``ok``; any other status is the
    :func:`refused` error."""
    status, decoded = call(data_dir, token_file, method, path, body)
    if status != ok:
        raise refused(decoded, status, options)
    return decoded


def online(data: Path | None) -> Path | None:
    """The data dir when a node holds it (its API is to be asked), else None. Only the writer
    lock is probed: opening the journal would verify it, and could sign and witness."""
    from transports.cli.data_dir import existing

    data_dir = existing(data)
    return data_dir if held(data_dir) else None


def held(data_dir: Path) -> bool:
    """A node (or another writer) holds ``data_dir``'s journal now; changes nothing."""
    from events.errors import JournalLocked
    from events.sqlite.lock import WriterLock
    from transports.cli.data_dir import journal_path

    path = journal_path(data_dir)
    if not path.exists():
        return False
    lock = WriterLock(path.with_name(path.name + ".lock"))
    try:
        lock.acquire(str(path))
    except JournalLocked:
        return True
    lock.release()
    return False
