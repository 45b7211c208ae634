"""`ToolResult`, the one value every execution returns, and how runtimes build it.

A runtime signals a failure by raising `ToolFault` (kind + message); the catalog
turns it into ``ToolResult(ok=False, ...)`` at the boundary, so no runtime
fault ever escapes `ToolCatalog.execute` as an exception.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Literal

import msgspec

__all__ = [
    "ErrorKind",
    "FileChange",
    "Output",
    "Pruned",
    "ToolFault",
    "ToolResult",
    "WorkspaceChanges",
    "cap_bytes",
    "decode_text",
    "fit_json",
]

ErrorKind = Literal["timeout", "cancelled", "denied", "invalid", "failed", "limit"]
"""Why a call failed:

- ``timeout``: the deadline passed;  ``cancelled``: the cancel event was set;
- ``denied``: a runtime rule refused it (path escape, host not allowlisted, ...);
- ``invalid``: the arguments were well-typed but unusable (missing file, bad URL);
- ``failed``: the tool ran and failed (non-zero exit, trap, HTTP error);
- ``limit``: a resource limit stopped it (CPU, memory, fuel, output cap).
"""


class FileChange(msgspec.Struct, frozen=True):
    """One file a call changed: its path and the hex SHA-256 of its content before and after
    (``None``: the file did not exist, or was not a file a tool may read)."""

    path: str
    before: str | None
    after: str | None


class Pruned(msgspec.Struct, frozen=True):
    """Checkpoint blobs that retention deleted: their hashes and the bytes freed."""

    blobs: tuple[str, ...]
    freed_bytes: int


class WorkspaceChanges(msgspec.Struct, frozen=True, kw_only=True):
    """What a mutating call did to the workspace (`tools.checkpoints`), for the tool actor to
    record as ``workspace.checkpointed`` (and ``workspace.blobs_pruned``)."""

    files: tuple[FileChange, ...]
    complete: bool = True
    """False when the tree walk stopped at its bound: changes past it are not recorded."""
    pruned: Pruned | None = None


class ToolResult(msgspec.Struct, frozen=True, kw_only=True):
    """The outcome of one tool call, as the tool actor records it."""

    ok: bool
    output: str
    """UTF-8 text, usually JSON text; may hold partial output on failure."""
    error: str | None = None
    """Human-readable reason when ``ok`` is false; never contains secrets."""
    error_kind: ErrorKind | None = None
    truncated: bool = False
    """Some output was dropped because a size cap was reached."""
    lossy: bool = False
    """Some output was not valid UTF-8 and was decoded with replacement characters."""
    duration_ms: int = 0
    workspace: WorkspaceChanges | None = None
    """Set for a call that changed workspace files (not part of ``tool.completed``)."""


class Output(msgspec.Struct, frozen=True, kw_only=True):
    """What a runtime returns on success (the catalog adds timing and caps)."""

    text: str
    truncated: bool = False
    lossy: bool = False


class ToolFault(Exception):
    """Raised inside runtimes; converted to a failed `ToolResult` by the catalog."""

    def __init__(
        self,
        kind: ErrorKind,
        message: str,
        *,
        output: str = "",
        truncated: bool = False,
        lossy: bool = False,
    ) -> None:
        super().__init__(message)
        self.kind: ErrorKind = kind
        self.message = message
        self.output = output
        self.truncated = truncated
        self.lossy = lossy


def cap_bytes(data: bytes, cap: int) -> tuple[bytes, bool]:
    """Cut ``data`` to at most ``cap`` bytes; report whether anything was cut."""
    if len(data) <= cap:
        return data, False
    return data[:cap], True


def decode_text(data: bytes, *, truncated: bool = False) -> tuple[str, bool]:
    """Decode UTF-8 with replacement; report whether anything was replaced.

    When ``truncated`` is true an incomplete multi-byte sequence at the very
    end is the cap's doing, not bad input, and is dropped silently.
    """
    try:
        return data.decode("utf-8"), False
    except UnicodeDecodeError as exc:
        if truncated and exc.start >= len(data) - 3 and exc.reason == "unexpected end of data":
            return data[: exc.start].decode("utf-8", errors="replace"), _has_bad(data[: exc.start])
        return data.decode("utf-8", errors="replace"), True


def _has_bad(data: bytes) -> bool:
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return True
    return False


def fit_json(
    body: dict[str, Any],
    fields: Sequence[str],
    cap: int,
    mark: Callable[[dict[str, Any], str], None],
) -> str | None:
    """``body`` as JSON text of at most ``cap`` UTF-8 bytes, or None if it cannot fit.

    When the whole body is too big, the string ``fields`` are cut (each to the same number of
    characters, the most that fits; never inside a character) and ``mark(body, field)`` is
    called on the cut copy for each field that lost text, so the result says what was cut.
    """
    text = msgspec.json.encode(body)
    if len(text) <= cap:
        return text.decode()

    def trial(keep: int) -> bytes:
        cut = dict(body)
        for name in fields:
            value = cut[name]
            if isinstance(value, str) and len(value) > keep:
                cut[name] = value[:keep]
                mark(cut, name)
        return msgspec.json.encode(cut)

    longest = max((len(body[f]) for f in fields if isinstance(body[f], str)), default=0)
    lo, hi, best = 0, longest - 1, None
    while lo <= hi:
        mid = (lo + hi) // 2
        attempt = trial(mid)
        if len(attempt) <= cap:
            best, lo = attempt, mid + 1
        else:
            hi = mid - 1
    return None if best is None else best.decode()
