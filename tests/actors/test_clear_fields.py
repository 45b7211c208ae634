"""The fields issue 11 found stored in clear: approval reasons, tool names in ``tool.*``
events, the session key and the channel. Through a real node; the journal file is read back."""

from __future__ import annotations

from pathlib import Path

import pytest

from actors import InvalidCommand
from actors.messages import ResolveApproval
from events.catalog import ApprovalResolved, RunCompleted, RunFailed, ToolCompleted, ToolProposed
from events.fields import INVALID_TOOL_NAME
from tests.actors.conftest import MakeNode

SECRET = "ghp_R2d2C3poBb8Ee7Yy6Uu5Ii4Oo3Pp2Qq1Ww0X"


def journal_bytes(root: Path) -> bytes:
    return b"".join(p.read_bytes() for p in root.iterdir() if p.name.startswith("journal.db"))


def test_an_approval_reason_is_stored_redacted(make_node: MakeNode) -> None:
    kit = make_node(postures={"echo": "ask_each_time"})
    ticket = kit.start_run('echo it\n/tool echo {"text": "hi"}')
    request = kit.wait_for_approval(ticket.run_id)
    reason = f"fine, the deploy token is {SECRET}"
    kit.ask(ResolveApproval(approval_id=request.approval_id, decision="allow", reason=reason))
    assert isinstance(kit.wait_for_end(ticket.run_id), RunCompleted)
    (resolved,) = kit.events(ticket.run_id, "tool.approval_resolved")
    assert isinstance(resolved, ApprovalResolved)
    assert resolved.reason == "fine, the deploy token is [REDACTED]" and resolved.redacted == 1
    kit.close()
    assert SECRET.encode() not in journal_bytes(kit.root)


@pytest.mark.parametrize("name", [SECRET, "Bad-Name!", "fs.read/../../x", "a" * 200])
def test_a_tool_name_the_model_invents_is_never_stored_as_is(
    make_node: MakeNode, name: str
) -> None:
    kit = make_node()
    ticket, end = kit.run(f"call it\n/tool {name} {{}}")
    assert isinstance(end, RunCompleted)  # refused as unknown, the run goes on
    (proposed,) = kit.events(ticket.run_id, "tool.proposed")
    assert isinstance(proposed, ToolProposed) and proposed.tool == INVALID_TOOL_NAME
    (completed,) = kit.events(ticket.run_id, "tool.completed")
    assert isinstance(completed, ToolCompleted) and completed.error_kind == "unknown_tool"
    kit.close()
    assert SECRET.encode() not in journal_bytes(kit.root)


def test_an_invented_name_in_a_call_that_cannot_be_made_is_not_stored_as_is(
    make_node: MakeNode,
) -> None:
    kit = make_node()
    _, end = kit.run(f'call it\n/tool {SECRET} {{"text": "cut')
    assert isinstance(end, RunFailed) and end.reason == "provider_error"
    assert end.message.startswith(f"the model's arguments for {INVALID_TOOL_NAME} (call_1) ")
    kit.close()
    assert SECRET.encode() not in journal_bytes(kit.root)


def test_a_valid_unknown_tool_name_is_kept(make_node: MakeNode) -> None:
    kit = make_node()
    ticket, _ = kit.run("call it\n/tool no.such_tool {}")
    (proposed,) = kit.events(ticket.run_id, "tool.proposed")
    assert proposed.tool == "no.such_tool"


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"session_key": SECRET, "create": True}, "session_key"),
        ({"session_key": "two words", "create": True}, "session_key"),
        ({"session_key": "password=hunter2", "create": True}, "session_key"),
        ({"channel": "Web Chat"}, "channel"),
        ({"channel": f"c-{SECRET}"}, "channel"),
    ],
)
def test_a_session_key_or_channel_the_journal_would_refuse_is_an_invalid_command(
    make_node: MakeNode, fields: dict[str, object], field: str
) -> None:
    kit = make_node()
    head = kit.journal.committed_position
    with pytest.raises(InvalidCommand) as refused:
        kit.start_run("hello", **fields)
    assert refused.value.field == field
    assert SECRET not in str(refused.value) and "hunter2" not in str(refused.value)
    assert kit.journal.committed_position == head  # nothing was written
    _, end = kit.run("fine", session_key="telegram:1234", create=True, channel="telegram")
    assert isinstance(end, RunCompleted)
