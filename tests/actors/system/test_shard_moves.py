"""A cluster node losing and acquiring shards (actors.system.node ``release_shards`` and
``recover_shards``; transports.cluster.membership calls them): a session whose shard comes back
folds what another node wrote meanwhile, never a state cached before it left; the unfinished
tasks of a shard acquired run on this node."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from actors.messages import GetSessionState
from actors.sessions.state import SessionState
from actors.tasks.store import enqueue
from events.catalog import RunCompleted, RunFailed, SessionReset
from tests.actors.nodekit import NodeKit
from tests.actors.taskkit import TaskKit


def test_a_session_whose_shard_came_back_folds_what_another_node_wrote(kit: NodeKit) -> None:
    ticket, _ = kit.run("hello")
    session_id = ticket.session_id
    before: SessionState = kit.ask(GetSessionState(session_id=session_id))
    kit.node.release_shards(lambda s: s == session_id)
    # Another node, holding the shard meanwhile, wrote to the session.
    kit.journal.append(
        f"session/{session_id}",
        [SessionReset(session_id=session_id)],
        expected_seq=before.next_seq,
        principal="node:other",
    )
    kit.node.recover_shards({0})
    after: SessionState = kit.ask(GetSessionState(session_id=session_id))
    assert after.next_seq == before.next_seq + 1
    _, end = kit.run("and now?", session_id=session_id)  # no conflict with a stale fold
    assert isinstance(end, RunCompleted), end
    assert kit.ask(GetSessionState(session_id=session_id)).next_seq > after.next_seq


def test_a_shard_acquired_brings_its_unfinished_tasks_to_this_queue(tmp_path: Path) -> None:
    ran: list[Any] = []
    kit = TaskKit(
        tmp_path / "node",
        handlers={"note": lambda payload, _ctx: ran.append(payload)},
        start=False,
    )
    try:
        kit.node.start(recover=False)  # a cluster node: it owns no shard yet
        # Another node enqueued it and died before running it.
        ticket, _ = enqueue(kit.journal, "note", {"n": 1}, principal="node:other")
        kit.node.recover_shards({0})
        kit.wait_for_kind(ticket.task_id, "task.succeeded")
        assert ran == [{"n": 1}]
    finally:
        kit.close()


def test_a_session_whose_shard_came_back_runs_again_after_a_run_it_lost(kit: NodeKit) -> None:
    """A run working when its shard left stops where it stands (the new owner's recovery ends
    it); when the shard comes back, neither the session nor the registry still counts it as
    live: the session's next run starts instead of queueing behind it for ever."""
    ticket = kit.start_run("/sleep 20000")
    session_id = ticket.session_id
    kit.wait_for_kind(ticket.run_id, "run.started")
    registry = kit.node.services.registry
    kit.node.release_shards(lambda s: s == session_id)
    assert registry.live_runs_of(session_id) == []
    kit.node.recover_shards({0})  # the lost run was doing machine work: it ends interrupted
    end = kit.wait_for_end(ticket.run_id)
    assert isinstance(end, RunFailed) and end.reason == "interrupted", end
    _, later = kit.run("and now?", session_id=session_id)
    assert isinstance(later, RunCompleted), later
