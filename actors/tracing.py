"""Spans of a run for an observability stack: what the run and tool actors hand a tracer.

A node with ``[telemetry] otlp_endpoint`` set has a :class:`Tracer` in its services
(``transports/telemetry``: the OpenTelemetry SDK and its OTLP/HTTP exporter); without it the
services hold None and the actors build no span at all. A span is recorded once, when it ends,
with wall-clock start and end times taken by the actor: one run is one trace, whatever threads
its actors run on, because every id is chosen here rather than carried in a context:

- the trace id derives from the run id (:func:`trace_id`), and the span id of the run and of
  each tool call from the stream that owns it (:func:`stream_span_id`): a tool actor names its
  parent without asking the run, and a run or a call resumed after a restart goes on under the
  same span ids, so what was exported before the restart keeps its parents;
- every other span gets a fresh random id (:func:`new_span_id`).

Attributes carry ids (run, session, invocation, approval, call), names (span, tool from the
catalog, model), the principal's id, sizes, counts, outcome codes and durations: never message
text, tool arguments, tool output or an error's text. A value that comes from outside the node
and is meant to be a code (a finish reason, a model name) passes through :func:`code` first, so
a provider cannot smuggle text into a span through it.
"""

from __future__ import annotations

import functools
import hashlib
import random
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

from ulid import ULID

Attribute = str | int | float | bool
"""What a span attribute may hold."""

RUN = "reel.run"
CONTEXT = "reel.context"
MEMORY_SEARCH = "reel.memory.search"
TURN = "reel.turn"
TOOL = "reel.tool"
DECISION = "reel.tool.decision"
APPROVAL = "reel.tool.approval"
EXECUTE = "reel.tool.execute"
SPAN_NAMES = (RUN, CONTEXT, MEMORY_SEARCH, TURN, TOOL, DECISION, APPROVAL, EXECUTE)
"""Every span name a run's trace may hold (a tool call's is ``reel.tool <tool name>``)."""


@dataclass(frozen=True, slots=True)
class Span:
    """One finished span of a run."""

    name: str
    run_id: str
    span_id: int
    parent_id: int | None
    """The parent span's id; None for the run's root span."""
    start_ns: int
    end_ns: int
    """Wall-clock nanoseconds (``time.time_ns``), as OTLP carries them."""
    attributes: Mapping[str, Attribute]
    error: str | None = None
    """A failure code (``provider_error``, ``denied``, ``timeout``...) when the span's work
    failed; never an error's text."""


class Tracer(Protocol):
    """Where finished spans go. ``record`` is called on actor threads: it must return at once
    (hand the span to a bounded queue, or drop it) and never raise."""

    def record(self, span: Span) -> None: ...


@functools.lru_cache(maxsize=4096)
def trace_id(run_id: str) -> int:
    """The run's 128-bit trace id: the run id's own 128 bits when it is a ULID (so a trace is
    found by its run id in any tool that shows ids as hex), else a hash of it. Cached: a run's
    spans ask for it one after another, and parsing a ULID was half the cost of a span."""
    try:
        value = int(ULID.from_str(run_id))
    except ValueError:
        value = int.from_bytes(_digest(b"reel.trace/", run_id)[:16], "big")
    return value or 1


def stream_span_id(stream: str) -> int:
    """The span id of the run or tool call owning ``stream`` (``run/<id>``, ``tool/<id>``),
    derived from it (non-zero, 64 bits)."""
    return int.from_bytes(_digest(b"reel.span/", stream)[:8], "big") or 1


def run_span_id(run_id: str) -> int:
    """The id of the run's root span."""
    return stream_span_id(f"run/{run_id}")


def new_span_id() -> int:
    """A fresh span id (non-zero, 64 bits)."""
    return random.getrandbits(64) or 1


_CODE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:/@+-]{0,63}")


def code(value: str | None) -> str:
    """``value`` when it looks like a code or a name (letters, digits and ``_.:/@+-``, at most
    64 characters), else ``"other"`` ("" stays ""): text with spaces never reaches a span."""
    if not value:
        return ""
    return value if _CODE.fullmatch(value) else "other"


def _digest(prefix: bytes, text: str) -> bytes:
    return hashlib.sha256(prefix + text.encode()).digest()
