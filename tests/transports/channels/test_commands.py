"""``!reel`` commands from chat: each a Cedar decision for the sender's principal, recorded;
``!reel approve`` only where an operator policy names the sender, ``decided_by`` the sender."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from events.catalog import AccessDecided, ChannelCommandHandled
from tests.transports.channels.kit import (
    HttpNode,
    Receiver,
    channel,
    channel_node,
    close_node,
    decision,
    events_of,
    message,
    run_of,
)
from tests.transports.http.httpkit import eventually

ALICE = "@alice:localhost"
BOB = "@bob:localhost"
WRITE = 'note this\n/tool fs.write {"path": "note.txt", "content": "hi"}'
"""A run whose tool call waits for a human (fs.write is ask-each-time)."""
ALICE_APPROVES = """
@id("alice")
permit (principal == Principal::"channel:hook:@alice:localhost",
        action == Action::"approval.resolve", resource);
"""


def say(node: HttpNode, text: str, sender: str = ALICE, **rest: Any) -> dict[str, Any]:
    fields = {"is_direct": True, "conversation": f"dm-{sender}", **rest}
    return decision(node, "hook", message(text, sender=sender, **fields))


def approval_of(node: HttpNode, run_id: str) -> str:
    def pending() -> list[dict[str, Any]]:
        page = node.call("GET", f"/v1/approvals?state=pending&run_id={run_id}").json()
        return list(page["items"])

    (approval,) = eventually(pending)
    approval_id: str = approval["approval_id"]
    return approval_id


def test_approve_from_chat_needs_a_policy_naming_the_sender(
    data_dir: Path, receiver: Receiver
) -> None:
    node = channel_node(data_dir, {"hook": channel(receiver, dm_policy="allow")})
    try:
        run_id = say(node, WRITE)["run_id"]
        approval_id = approval_of(node, run_id)
        prompt = receiver.wait_for(f"Waiting for approval {approval_id}")
        assert "fs.write" in prompt.body["text"] and prompt.signed
        # The sender may not decide it: the prompt does not offer what a policy refuses.
        assert "!reel" not in prompt.body["text"]
        assert prompt.body["text"].endswith("An operator of this node decides it.")
        refused = say(node, f"!reel approve {approval_id}")
        assert refused["route"] == "command"
        assert "approval.resolve is not permitted" in refused["detail"]
        assert node.call("GET", f"/v1/approvals/{approval_id}").json()["state"] == "pending"
    finally:
        close_node(node)
    (data_dir / "policies" / "senders.cedar").write_text(ALICE_APPROVES)
    node = channel_node(data_dir, {"hook": channel(receiver, dm_policy="allow")})
    try:
        # Prompted again after the restart, now with the commands the policy allows.
        offered = receiver.wait_for(f"!reel approve {approval_id}")
        assert f"or `!reel deny {approval_id}`" in offered.body["text"]
        approved = say(node, f"!reel approve {approval_id}")
        assert approved["detail"] == (
            f"Approval {approval_id} approved by channel:hook:@alice:localhost."
        )
        # the decision is durable when the command answers; the approvals view follows it
        assert eventually(
            lambda: (
                node.call("GET", f"/v1/approvals/{approval_id}").json()["decided_by"]
                == "channel:hook:@alice:localhost"
            )
        )
        run = run_of(node, run_id)
        assert run["state"] == "done" and "fs.write" in run["answer"]
        # the answer came back to the chat, though the run began before the restart
        receiver.wait_for("fs.write ->")
        # bob is named by no policy
        bob_run = say(node, WRITE, sender=BOB)["run_id"]
        bob_approval = approval_of(node, bob_run)
        assert "not permitted" in say(node, f"!reel deny {bob_approval}", sender=BOB)["detail"]
        # every decision was recorded, with the sender as principal
        decided = [
            (e.principal, e.decode())
            for e in node.runtime.journal.read(0, 100_000)
            if e.kind == "access.decided"
        ]
        mine = [
            (p, d.outcome)
            for p, d in decided
            if isinstance(d, AccessDecided) and d.action == "approval.resolve"
        ]
        assert ("channel:hook:@alice:localhost", "allow") in mine
        assert ("channel:hook:@bob:localhost", "deny") in mine

        def handled() -> list[tuple[str, str]]:
            return [(h.command, h.outcome) for h in events_of(node, ChannelCommandHandled)]

        assert eventually(lambda: len(handled()) == 3)
        assert handled() == [
            ("approve", "denied"),  # before the policy
            ("approve", "done"),
            ("deny", "denied"),
        ]
    finally:
        close_node(node)


def test_status_stop_and_reset(data_dir: Path, receiver: Receiver) -> None:
    hook = channel(receiver, dm_policy="allow", broadcast="allow", rate_burst=50)
    node = channel_node(data_dir, {"hook": hook})
    try:
        assert "no session yet" in say(node, "!reel status")["detail"]
        assert "!reel approve" in say(node, "!reel")["detail"]  # help
        assert "unknown command" in say(node, "!reel dance")["detail"]
        run_id = say(node, WRITE)["run_id"]
        approval_of(node, run_id)  # the run waits for a human
        status = say(node, "!reel status")["detail"]
        assert run_id in status and "awaiting_approval" in status
        stopped = say(node, "!reel stop")
        assert stopped["detail"] == f"Run {run_id} is being cancelled."
        assert run_of(node, run_id)["state"] == "cancelled"
        assert say(node, "!reel stop")["detail"] == "No run is in progress."
        reset = say(node, "!reel reset")
        assert reset["detail"].startswith("Session reset")
        session_id = run_of(node, run_id)["session_id"]
        # the reset is durable when the command answers; the view folds it a moment later
        session = eventually(
            lambda: (s := node.call("GET", f"/v1/sessions/{session_id}").json())["resets"] and s
        )
        assert session and session["resets"] == 1, session
        # in a shared group session, bob neither owns the session nor started alice's run
        room: dict[str, Any] = {"is_direct": False, "conversation": "room", "mentions_agent": True}
        room_run = say(node, WRITE, **room)["run_id"]
        approval_of(node, room_run)
        assert "is not permitted" in say(node, "!reel stop", sender=BOB, **room)["detail"]
        assert "is not permitted" in say(node, "!reel reset", sender=BOB, **room)["detail"]
        assert room_run in say(node, "!reel status", sender=BOB, **room)["detail"]
        assert "being cancelled" in say(node, "!reel stop", **room)["detail"]
    finally:
        close_node(node)
