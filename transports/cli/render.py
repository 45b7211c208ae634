"""Rendering tape entries for a terminal: output as it streams, tools and decisions on own lines."""

from __future__ import annotations

import json
from typing import Any, TextIO

from events.catalog import (
    ApprovalRequested,
    ApprovalResolved,
    Event,
    RunCancelled,
    RunCompleted,
    RunFailed,
    RunOutput,
    ToolCompleted,
    ToolDecided,
    ToolProposed,
)


class TapePrinter:
    """Writes each event; keeps track of whether the cursor is mid-line."""

    def __init__(self, out: TextIO) -> None:
        self.out = out
        self.mid_line = False

    def line(self, text: str) -> None:
        if self.mid_line:
            self.out.write("\n")
            self.mid_line = False
        self.out.write(text + "\n")
        self.out.flush()

    def show(self, event: Event) -> None:
        if isinstance(event, RunOutput):
            self.out.write(event.text)
            self.out.flush()
            self.mid_line = not event.text.endswith("\n")
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
                self.line(f"<- {event.tool}: {_shorten(event.output)}")
            else:
                self.line(f"<- {event.tool} failed ({event.error_kind}): {event.error}")
        elif isinstance(event, RunCompleted):
            self.line(
                f"run done ({event.reason}; {event.turns} turns, {event.tool_calls} tool "
                f"calls, {event.prompt_tokens}+{event.completion_tokens} tokens)"
            )
        elif isinstance(event, RunFailed):
            self.line(f"run failed ({event.reason}): {event.message}")
        elif isinstance(event, RunCancelled):
            self.line(f"run cancelled ({event.reason}) by {event.requested_by or 'request'}")


def _compact(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, separators=(",", ":"))


def _shorten(text: str, limit: int = 500) -> str:
    text = text.replace("\n", " ")
    return text if len(text) <= limit else text[:limit] + "..."
