"""The tape the aggregate suite proves itself on: one real node (journal, actors, Cedar, the HTTP
API, a webhook channel and its platform, the watchdog, post-run reflection and the task queue)
driven through every aggregate's life, with each aggregate's fold recorded as it happens
(:func:`tests.conformance.aggregate.recording`).

Nothing is hand-written: every record is one the node appended. The steps wait for what they
need (never for a time) and assert only what the next step relies on.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from actors.channels import router
from actors.invocations import state as tool_fold
from actors.learning import state as learning_state
from actors.memory import items as memory
from actors.runs import state as run_fold
from actors.schedules import state as schedule_state
from actors.sessions import state as session_state
from actors.tasks import state as task_state
from actors.vault import state as vault_state
from actors.watchdog import decide as watchdog_decider
from events import JournalReader
from tests.conformance.aggregate import Tape, recording
from tests.transports.channels.kit import SECRET, SECRET_ENV, Receiver, channel, message, route
from tests.transports.http.httpkit import HttpNode, close_node, eventually, open_node
from transports.access import tokens
from transports.config import (
    ContextSection,
    LearningSection,
    TasksSection,
    WatchdogSection,
)

AGGREGATES = (
    session_state,
    run_fold,
    tool_fold,
    task_state,
    learning_state,
    watchdog_decider,
    router,
    memory,
    tokens,
    vault_state,
    schedule_state,
)
SHELL = '/tool shell.run {"argv": ["echo", "yo"]}'
"""A call that waits for a human (shell.run is critical: ask each time)."""
STALL = '/tool sleep {"seconds": 1.5}'
"""A call that makes no progress for longer than the watchdog's ``run_stall_s``."""
SECRET_TOKEN = "ghp_R2d2C3poBb8Ee7Yy6Uu5Ii4Oo3Pp2Qq1Ww0X"
"""In a message: every writer folds it as the journal stores it, redacted."""


def record_tape(data_dir: Path) -> Tape:
    """Run the scenario on a node in ``data_dir``; the journal's rows and what was folded."""
    receiver = Receiver().start()
    previous = os.environ.get(SECRET_ENV)
    os.environ[SECRET_ENV] = SECRET
    try:
        with recording(AGGREGATES) as folds:
            node = open_node(
                data_dir,
                keepalive_s=0.3,
                channels={"hook": channel(receiver, dm_policy="pairing")},
                context=ContextSection(budget_tokens=600, compact_at=0.75, cooldown_s=3600.0),
                learning=LearningSection(batch_s=0.02),
                tasks=TasksSection(backoff_base_s=0.05, heartbeat_s=0.5, lease_s=2.0),
                watchdog=WatchdogSection(interval_s=0.1, run_stall_s=0.5),
            )
            try:
                _scenario(node, receiver)
            finally:
                close_node(node)
    finally:
        receiver.stop()
        if previous is None:
            os.environ.pop(SECRET_ENV, None)
        else:
            os.environ[SECRET_ENV] = previous
    reader = JournalReader.open(data_dir / "journal.db")
    try:
        rows = reader.read(0, limit=1_000_000)
    finally:
        reader.close()
    return Tape(rows=rows, recording=folds)


def _ok(reply: Any, *status: int) -> Any:
    assert reply.status in (status or (200,)), reply.body
    return reply.json()


def _scenario(node: HttpNode, receiver: Receiver) -> None:
    # Tokens: one made, used (token.used), revoked.
    made = _ok(
        node.call("POST", "/v1/tokens", {"principal": "user:ana", "roles": ["operator"]}), 201
    )
    ana = f"Bearer {made['token']}"
    _ok(node.call("GET", "/v1/sessions", auth=ana))

    # Sessions and runs: a conversation long enough to compact itself once, a tool call
    # approved for the session (a session grant), one covered by it, one denied, one cancelled
    # while it waits, one that stalls (the watchdog), one the provider fails.
    sid = node.session()
    for i in range(8):
        node.finish(node.start(f"Message {i}. " + " ".join(f"w{i}x{k}" for k in range(14)), sid))
    said = f"Remember that the deploy token is {SECRET_TOKEN}. I prefer tables."
    node.finish(node.start(said, sid))
    run = node.start(SHELL, sid)
    approval = node.pending_approval(run)
    _ok(node.call("POST", f"/v1/approvals/{approval}", {"decision": "allow", "scope": "session"}))
    node.finish(run)
    node.finish(node.start(SHELL, sid))
    other = node.session()
    run = node.start(SHELL, other)
    approval = node.pending_approval(run)
    _ok(node.call("POST", f"/v1/approvals/{approval}", {"decision": "deny", "reason": "no"}))
    node.finish(run)
    run = node.start(SHELL, other)
    node.pending_approval(run)
    _ok(node.call("POST", f"/v1/runs/{run}/cancel"), 202)
    node.finish(run)
    node.finish(node.start(STALL, other))
    node.finish(node.start("/fail the provider fell over", other))

    # The session's own commands: postures, compaction, restore, reset, branch.
    posture = {"tool": "echo", "posture": "ask_each_time"}
    _ok(node.call("POST", f"/v1/sessions/{sid}/postures", posture))
    _ok(node.call("POST", f"/v1/sessions/{sid}/postures", {"tool": "echo", "posture": None}))
    listing = eventually(lambda: _ok(node.call("GET", f"/v1/sessions/{sid}/checkpoints"))["items"])
    assert listing, "no automatic compaction"
    _ok(node.call("POST", f"/v1/sessions/{sid}/compact"))
    restore = {"checkpoint": listing[0]["checkpoint_id"]}
    _ok(node.call("POST", f"/v1/sessions/{sid}/restore", restore))
    _ok(node.call("POST", f"/v1/sessions/{sid}/branch", {}), 201)
    _ok(node.call("POST", f"/v1/sessions/{sid}/reset"))

    # Memory: an item written and deleted.
    item = _ok(node.call("POST", "/v1/memory", {"text": "the printer is on floor 2"}), 201)
    _ok(node.call("DELETE", f"/v1/memory/{item['id']}"))

    # Learning: reflection found a fact (applied at once) and a preference (pending); the fact
    # is rolled back and accepted again, the preference rejected.
    def candidate(kind: str) -> Any:
        page = _ok(node.call("GET", f"/v1/learning/candidates?kind={kind}"))
        return page["items"][0] if page["items"] else None

    fact = eventually(lambda: candidate("fact"), timeout=20)
    assert fact, "reflection found no fact"
    path = f"/v1/learning/candidates/{fact['candidate_id']}"
    eventually(lambda: _ok(node.call("GET", path))["status"] == "applied")
    _ok(node.call("POST", f"{path}/rollback", {"reason": "moved"}))
    _ok(node.call("POST", f"{path}/accept", {}))
    preference = eventually(lambda: candidate("preference"))
    assert preference, "reflection found no preference"
    _ok(node.call("POST", f"/v1/learning/candidates/{preference['candidate_id']}/reject", {}))

    # A channel: a stranger refused, a code minted, a pairing asked for and approved, then a
    # message that starts a run answered on the platform.
    def dm(text: str) -> Any:
        return _ok(route(node, "hook", message(text, is_direct=True, conversation="dm-alice")))

    assert not dm("hello")["accepted"]
    code = _ok(node.call("POST", "/v1/channels/hook/pair-codes", {"ttl": "10m"}), 201)["code"]
    assert dm(f"pair {code}")["accepted"]

    def pairing() -> Any:
        page = _ok(node.call("GET", "/v1/approvals?state=pending"))
        return [a for a in page["items"] if a["subject"] == "pairing"]

    (asked,) = eventually(pairing)
    _ok(node.call("POST", f"/v1/approvals/{asked['approval_id']}", {"decision": "allow"}))
    routed = dm("hello again")
    assert routed["accepted"], routed
    node.finish(routed["run_id"])
    receiver.wait_for("hello again")

    # The vault: a secret set, rotated, deleted and set again; another left as it is.
    for value in ("first-value-1", "kept-value-22"):
        name = "deploy" if value.startswith("first") else "kept"
        _ok(node.call("POST", "/v1/vault", {"name": name, "value": value}), 201)
    _ok(node.call("POST", "/v1/vault/deploy/rotate", {"value": "second-value-2"}))
    _ok(node.call("DELETE", "/v1/vault/deploy"))
    _ok(node.call("POST", "/v1/vault", {"name": "deploy", "value": "third-value-3"}), 201)

    # A schedule: created, paused, resumed, fired now (its run started and ended), deleted.
    schedule = {
        "name": "nightly",
        "cron": "30 2 * * *",
        "tz": "Europe/Berlin",
        "session_key": "schedule-tape",
        "text": "scheduled hello",
    }
    _ok(node.call("POST", "/v1/schedules", schedule), 201)
    _ok(node.call("POST", "/v1/schedules/nightly/pause"))
    _ok(node.call("POST", "/v1/schedules/nightly/resume"))
    fired = _ok(node.call("POST", "/v1/schedules/nightly/run"), 202)
    # the run is asked for after the answer: wait for it to exist before following it
    assert eventually(lambda: node.call("GET", f"/v1/runs/{fired['run_id']}").status == 200)
    node.finish(fired["run_id"])
    book = node.runtime.schedules.book
    assert eventually(lambda: (s := book.state.named("nightly")) is not None and not s.pending)
    _ok(node.call("DELETE", "/v1/schedules/nightly"))

    # The token's end, and the incident's: the stalled run's is resolved once it ended.
    _ok(node.call("DELETE", f"/v1/tokens/{made['id']}"))

    def incidents_resolved() -> bool:
        items = _ok(node.call("GET", "/v1/incidents"))["items"]
        return bool(items) and all(i["state"] == "resolved" for i in items)

    assert eventually(incidents_resolved), "the stalled run's incident stayed open"
    node.runtime.projector.wait_for(node.runtime.journal.committed_position, 10)
