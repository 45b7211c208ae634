"""Context references in a message: ``@file:path``, ``@folder:path``, ``@diff:CHECKPOINT``,
``@url:https://...``, ``@memory:ID``, ``@run:ID`` (docs/context.md).

A reference starts at an ``@`` that begins the message or follows whitespace or an opening
bracket, and runs to the next whitespace; trailing sentence punctuation (``.,;:!?)``) is not
part of it. ``@@`` is a literal ``@`` and never starts a reference. A reference repeated in
the message is one reference, read once. At most :data:`MAX_REFERENCES` are resolved; the rest
are noted as skipped.

A file, folder, diff or URL reference becomes a governed tool call (``fs.read``, ``fs.list``,
``fs.diff``: what changed in the workspace since that checkpoint, ``http.fetch``) that the
run makes before its first turn, through the same posture, policy and approval as if the model
had asked for it: its call id is ``ref-N``, so the tape tells it from the model's calls.
Memory items and runs are read by the run itself, within what its principal may see.

Parsing is a pure function of the stored message text, so a run resumed after a restart finds
the same references with the same call ids.
"""

from __future__ import annotations

import json
import re
from typing import Literal

import msgspec

from actors.provider import ToolCall
from events.lifecycle import REFERENCE_CALL_PREFIX

Kind = Literal["file", "folder", "diff", "url", "memory", "run"]
MAX_REFERENCES = 8
"""References resolved per message; more are noted, not read."""

_REFERENCE = re.compile(r"(?:(?<=^)|(?<=[\s(\[]))@(file|folder|diff|url|memory|run):(\S+)")
_CALLS: dict[str, tuple[str, str]] = {
    "file": ("fs.read", "path"),
    "folder": ("fs.list", "path"),
    "diff": ("fs.diff", "since"),
    "url": ("http.fetch", "url"),
}
"""The governed call that reads each kind of reference: the tool and its one argument."""
_TRAILING = ".,;:!?)]"


class Reference(msgspec.Struct, frozen=True, kw_only=True):
    """One ``@kind:target`` of a message, in order of appearance."""

    kind: Kind
    target: str
    index: int
    """1-based position among the message's references."""

    @property
    def call_id(self) -> str:
        return f"{REFERENCE_CALL_PREFIX}{self.index}"

    @property
    def label(self) -> str:
        return f"@{self.kind}:{self.target}"

    def call(self) -> ToolCall | None:
        """The governed tool call that reads a file, folder, diff or URL reference (None for
        memory items and runs, which the run reads itself)."""
        found = _CALLS.get(self.kind)
        if found is None:
            return None
        tool, argument = found
        return ToolCall(self.call_id, tool, json.dumps({argument: self.target}))


def parse(text: str) -> tuple[Reference, ...]:
    """The distinct references of ``text`` (``@@`` escapes excluded), in order of first
    appearance."""
    found: list[Reference] = []
    seen: set[tuple[str, str]] = set()
    for segment_start, segment in _unescaped_segments(text):
        for match in _REFERENCE.finditer(segment):
            # a segment right after "@@" does not start the text: its first "@" follows an "@"
            if segment_start == 0 or match.start() > 0:
                target = match.group(2).rstrip(_TRAILING)
                if target and (match.group(1), target) not in seen:
                    seen.add((match.group(1), target))
                    found.append(
                        Reference(
                            kind=match.group(1),  # type: ignore[arg-type]
                            target=target,
                            index=len(found) + 1,
                        )
                    )
    return tuple(found)


def unescape(text: str) -> str:
    """The message as the model reads it: ``@@`` becomes ``@``."""
    return text.replace("@@", "@")


def _unescaped_segments(text: str) -> list[tuple[int, str]]:
    """``text`` split at every ``@@`` (which can start no reference), with start offsets."""
    segments: list[tuple[int, str]] = []
    start = 0
    while True:
        at = text.find("@@", start)
        if at < 0:
            segments.append((start, text[start:]))
            return segments
        segments.append((start, text[start:at]))
        start = at + 2
