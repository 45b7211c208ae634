"""Rendering tape entries for a terminal: output as it streams, tools and decisions on own lines."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any, TextIO, TypeVar

import msgspec

from events.catalog import (
    ApprovalRequested,
    ApprovalResolved,
    Event,
    RunCancelled,
    RunCompleted,
    RunContextAssembled,
    RunFailed,
    RunOutput,
    ToolCompleted,
    ToolDecided,
    ToolProposed,
)

T = TypeVar("T")


def context_line(event: dict[str, Any]) -> str | None:
    """One line saying what ``run.context_assembled`` put into the model input besides the
    message (None when nothing: no summary, memory, references or applied learnings)."""
    parts: list[str] = []
    if event.get("compaction_id"):
        parts.append(f"summary {event['compaction_id']}")
    for m in event.get("memory") or ():
        parts.append(f"memory {m.get('item_id')} ({m.get('final', 0) / 10_000:.2f})")
    for r in event.get("references") or ():
        outcome = r.get("outcome", "")
        note = f": {shorten(str(r['note']))}" if r.get("note") and outcome != "included" else ""
        parts.append(f"@{r.get('kind')}:{r.get('target')} {outcome}{note}")
    for learned in event.get("learned") or ():
        parts.append(f"learned {learned.get('kind')} {shorten(str(learned.get('text', '')))!r}")
    if not parts:
        return None
    return f"   context: {'; '.join(parts)} (~{event.get('estimated_input_tokens', 0)} tokens)"


class Terminal:
    """Model output streams inline; everything else goes on a line of its own. Shared by the
    in-process (``--local``) and the gRPC ``reel chat``."""

    def __init__(self, out: TextIO) -> None:
        self.out = out
        self.mid_line = False

    def line(self, text: str) -> None:
        """``text`` on its own line (ending a streamed output line first)."""
        if self.mid_line:
            self.out.write("\n")
            self.mid_line = False
        self.out.write(text + "\n")
        self.out.flush()

    def stream(self, text: str) -> None:
        """Model output, as it arrives."""
        self.out.write(text)
        self.out.flush()
        self.mid_line = not text.endswith("\n")


class TapePrinter(Terminal):
    """Prints journal events (``reel chat --local``)."""

    def show(self, event: Event) -> None:
        if isinstance(event, RunOutput):
            self.stream(event.text)
        elif isinstance(event, RunContextAssembled):
            line = context_line(msgspec.to_builtins(event))
            if line is not None:
                self.line(line)
        elif isinstance(event, ToolProposed):
            self.line(f"-> tool {event.tool} {_compact(event.arguments)}")
        elif isinstance(event, ToolDecided):
            ids = f" [{', '.join(event.policy_ids)}]" if event.policy_ids else ""
            grant = f" (cached {event.grant} grant)" if event.grant else ""
            self.line(f"   decision: {event.outcome}{grant}{ids}: {event.reason}")
        elif isinstance(event, ApprovalRequested):
            self.line(f"   approval {event.approval_id} needed ({event.risk} risk): {event.reason}")
        elif isinstance(event, ApprovalResolved):
            by = f" by {event.decided_by}" if event.decided_by else ""
            why = f" ({event.reason})" if event.reason else ""
            self.line(f"   approval: {event.decision} {event.scope}{by}{why}")
        elif isinstance(event, ToolCompleted):
            if event.ok:
                self.line(f"<- {event.tool}: {shorten(event.output)}")
            else:
                self.line(f"<- {event.tool} failed ({event.error_kind}): {event.error}")
        elif isinstance(event, RunCompleted):
            self.line(
                done_line(
                    event.reason,
                    event.turns,
                    event.tool_calls,
                    event.prompt_tokens,
                    event.completion_tokens,
                )
            )
        elif isinstance(event, RunFailed):
            self.line(f"run failed ({event.reason}): {event.message}")
        elif isinstance(event, RunCancelled):
            self.line(f"run cancelled ({event.reason}) by {event.requested_by or 'request'}")


def _compact(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, separators=(",", ":"))


def plural(count: int, noun: str) -> str:
    """``1 turn``, ``2 turns``."""
    return f"{count} {noun}" if count == 1 else f"{count} {noun}s"


def done_line(reason: str, turns: int, tool_calls: int, prompt: int, completion: int) -> str:
    """The line that ends a finished run, the same over gRPC and ``--local``."""
    return (
        f"run done ({reason}; {plural(turns, 'turn')}, {plural(tool_calls, 'tool call')}, "
        f"{prompt}+{completion} tokens)"
    )


def shorten(text: str, limit: int = 500) -> str:
    """One line of at most ``limit`` characters."""
    text = text.replace("\n", " ")
    return text if len(text) <= limit else text[:limit] + "..."


def print_list(records: Sequence[T], line: Callable[[T], str], *, json: bool, empty: str) -> None:
    """A list command's answer: the records as one JSON array (``--json``), ``empty`` when
    there are none, else one line per record."""
    if json:
        print(msgspec.json.encode(records).decode())
    elif not records:
        print(empty)
    else:
        for record in records:
            print(line(record))
