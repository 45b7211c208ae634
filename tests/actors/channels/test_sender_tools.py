"""A chat sender holds no role: no call of a run it started runs without a human's approval,
whatever the tool's posture, paired or not. Through a real node: a webhook channel, the
deterministic model proposing ``fs.read`` (``always_allow`` and not sensitive, so any other
principal just runs it), real Cedar, and the platform's end receiving what the room is told."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from events.catalog import ToolCompleted, ToolDecided
from tests.transports.channels.kit import (
    HttpNode,
    Receiver,
    channel,
    channel_node,
    close_node,
    decision,
    message,
    run_of,
)
from tests.transports.http.httpkit import eventually
from tests.transports.records import Records

SECRET_PLAN = "quarterly plan: ship the blue widget to Lisbon"
READ = 'what is in the notes?\n/tool fs.read {"path": "notes.txt"}'


def workspace(data_dir: Path) -> None:
    (data_dir / "workspace").mkdir()
    (data_dir / "workspace" / "notes.txt").write_text(SECRET_PLAN)


def of_run(node: HttpNode, cls: type[Any], run_id: str) -> list[Any]:
    """The events of ``cls`` that belong to ``run_id`` (tool decisions live on invocation
    streams)."""
    return [e for _, e in recorded(node, cls, run_id)]


def recorded(node: HttpNode, cls: type[Any], run_id: str) -> list[tuple[str, Any]]:
    """(the envelope's principal, the event) for each event of ``cls`` of ``run_id``."""
    stored = ((s.principal, s.decode()) for s in node.runtime.journal.read(0, 100_000))
    return [(p, e) for p, e in stored if isinstance(e, cls) and e.run_id == run_id]


def resolve(node: HttpNode, approval_id: str, **body: Any) -> None:
    reply = node.call("POST", f"/v1/approvals/{approval_id}", body)
    assert reply.status == 200, reply.body


def test_a_senders_always_allow_tool_waits_for_a_human_and_a_denial_leaks_nothing(
    data_dir: Path, receiver: Receiver, log: Records
) -> None:
    workspace(data_dir)
    node = channel_node(data_dir, {"hook": channel(receiver, dm_policy="allow")})
    try:
        sent = decision(node, "hook", message(READ, sender="@mallory:localhost", is_direct=True))
        assert sent["accepted"] and sent["run_id"]
        run_id = sent["run_id"]
        approval_id = node.pending_approval(run_id)
        ((by, decided),) = recorded(node, ToolDecided, run_id)
        assert by == "channel:hook:@mallory:localhost"
        assert decided.outcome == "approval_required" and decided.posture == "always_allow"
        assert "chat sender with no role" in decided.reason
        prompt = receiver.wait_for("Waiting for approval")
        assert "fs.read" in prompt.body["text"]
        resolve(node, approval_id, decision="deny")
        run = run_of(node, run_id)
        assert run["state"] == "done"
        (completed,) = of_run(node, ToolCompleted, run_id)
        assert completed.ok is False and completed.error_kind == "denied"
        answer = receiver.wait_for("fs.read ->")
        assert answer.body["run_id"] == run_id
        assert all(SECRET_PLAN not in text for text in receiver.texts())
        # a file reference in the message is the same governed call, held back the same way
        cited = decision(
            node, "hook", message("@file:notes.txt", sender="@mallory:localhost", is_direct=True)
        )
        resolve(node, node.pending_approval(cited["run_id"]), decision="deny")
        assert SECRET_PLAN not in run_of(node, cited["run_id"])["answer"]
        (held,) = of_run(node, ToolDecided, cited["run_id"])
        assert held.outcome == "approval_required"
        # the same call from a principal with a role (the admin, over HTTP) just runs
        control = node.start(READ)
        node.finish(control)
        (allowed,) = of_run(node, ToolDecided, control)
        assert allowed.outcome == "allow" and allowed.policy_ids == ("baseline.tool.low_risk",)
    finally:
        close_node(node)
    assert not log.faults(), log.text()


def test_a_paired_sender_asks_too_and_an_always_grant_trusts_it_for_that_tool(
    data_dir: Path, receiver: Receiver, log: Records
) -> None:
    workspace(data_dir)
    hook = channel(
        receiver, dm_policy="pairing", mention_patterns=("^reel[,:]",), broadcast="mention_only"
    )
    node = channel_node(data_dir, {"hook": hook})
    alice = {"sender": "@alice:localhost"}
    try:
        code = node.call("POST", "/v1/channels/hook/pair-codes", {}).json()["code"]
        asked = decision(node, "hook", message(f"pair {code}", is_direct=True, **alice))
        assert asked["route"] == "pairing"
        pending = eventually(
            lambda: node.call("GET", "/v1/approvals?state=pending").json()["items"]
        )
        resolve(node, pending[0]["approval_id"], decision="allow")
        receiver.wait_for("Pairing approved")
        room = {"conversation": "team-room", **alice}
        first = decision(node, "hook", message(f"reel, {READ}", **room))
        assert first["accepted"], first
        approval_id = node.pending_approval(first["run_id"])
        (held,) = of_run(node, ToolDecided, first["run_id"])
        assert held.outcome == "approval_required"
        assert SECRET_PLAN not in "".join(receiver.texts())
        resolve(node, approval_id, decision="allow", scope="always")
        assert SECRET_PLAN in run_of(node, first["run_id"])["answer"]
        # from now on this sender's fs.read calls are covered by the grant a human gave
        second = decision(node, "hook", message(f"reel, {READ}", **room))
        run_of(node, second["run_id"])
        (covered,) = of_run(node, ToolDecided, second["run_id"])
        assert covered.outcome == "allow" and covered.grant == "always"
    finally:
        close_node(node)
    assert not log.faults(), log.text()
