"""The tape of a simple run, compared with a checked-in golden file (ids and times stripped).

Regenerate after an intended change with ``REEL_UPDATE_GOLDEN=1 pytest tests/actors -k golden``
and review the diff.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from actors import ActorsConfig, RunBudgets
from events.catalog import (
    RunCompleted,
    RunOutput,
    RunTurnCompleted,
    ToolCompleted,
    ToolDecided,
    ToolProposed,
)
from tests.actors.conftest import MakeNode
from tests.actors.nodekit import NodeKit

GOLDEN = Path(__file__).parent / "golden" / "simple_run_tape.json"
MESSAGE = 'hello world\n/tool echo {"text": "hi"}'


def summarize(kit: NodeKit, run_id: str) -> list[dict[str, Any]]:
    """Each tape entry as its kind plus the fields that do not depend on ids or clocks."""
    entries: list[dict[str, Any]] = []
    for stored in kit.stored(run_id):
        event = stored.decode()
        entry: dict[str, Any] = {"kind": stored.kind, "stream": stored.stream.split("/")[0]}
        if isinstance(event, RunOutput):
            entry.update(turn=event.turn, text=event.text)
        elif isinstance(event, RunTurnCompleted):
            entry.update(turn=event.turn, tool_calls=event.tool_calls, finish=event.finish_reason)
        elif isinstance(event, ToolProposed):
            entry.update(tool=event.tool, call_id=event.call_id, arguments=event.arguments)
        elif isinstance(event, ToolDecided):
            entry.update(tool=event.tool, outcome=event.outcome, policy_ids=list(event.policy_ids))
        elif isinstance(event, ToolCompleted):
            entry.update(tool=event.tool, ok=event.ok, output=event.output)
        elif isinstance(event, RunCompleted):
            entry.update(answer=event.answer, reason=event.reason, turns=event.turns)
            entry.update(tool_calls=event.tool_calls)
        entries.append(entry)
    return entries


def test_simple_run_tape_matches_the_golden_file(make_node: MakeNode) -> None:
    # no age-based flushing: chunks depend only on words and turn ends, never on the clock
    config = ActorsConfig(budgets=RunBudgets(max_turns=4), chunk_max_age_s=60.0)
    kit = make_node(config=config)
    ticket, _ = kit.run(MESSAGE)
    actual = summarize(kit, ticket.run_id)
    if os.environ.get("REEL_UPDATE_GOLDEN") == "1":
        GOLDEN.write_text(json.dumps(actual, indent=2) + "\n")
    assert actual == json.loads(GOLDEN.read_text())
