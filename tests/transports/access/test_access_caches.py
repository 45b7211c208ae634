"""The node's token book and ``always`` grants follow the journal, whoever appends to it: a
record another writer appended (as another node on the same PostgreSQL would; on SQLite, an
append through the journal object itself, in-process, past every API) is in force on this node
without a restart. A real node, its real HTTP API and a real run of ``shell.run``, on the
SQLite journal and on a throwaway PostgreSQL (the same in-process writer: a second node on one
database waits for the cluster node). docs/scale-out.md, "Caches"."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from actors import tail
from actors.approvals.always_grants import GRANTS_STREAM
from events import new_id
from events.catalog import ApprovalResolved, GrantRevoked, TokenRevoked
from tests.transports.http.httpkit import SHELL, HttpNode, close_node, eventually, open_node
from tests.transports.http.test_http_grants import grant_always
from transports.access.tokens import mint, token_stream
from transports.config import JournalConfig


@pytest.fixture(params=["sqlite", "postgres"])
def node(request: pytest.FixtureRequest, data_dir: Path) -> Iterator[HttpNode]:
    """A node on each journal backend (postgres: a fresh schema of the session's server)."""
    journal = JournalConfig()
    if request.param == "postgres":
        from events.postgres.database import initialise

        dsn = request.getfixturevalue("postgres").database()
        initialise(dsn, 4)
        journal = JournalConfig(backend="postgres", dsn=dsn, shards=4)
    running = open_node(data_dir, keepalive_s=0.3, journal=journal)
    try:
        yield running
    finally:
        close_node(running)


def whoami(node: HttpNode, token: str) -> int:
    return node.call("GET", "/v1/whoami", auth=f"Bearer {token}").status


def test_a_token_another_writer_revokes_is_refused_here(node: HttpNode) -> None:
    made = node.call("POST", "/v1/tokens", {"principal": "user:ann", "roles": ["operator"]})
    token, token_id = made.json()["token"], made.json()["id"]
    assert whoami(node, token) == 200
    node.runtime.journal.append(
        token_stream(token_id),
        [TokenRevoked(token_id=token_id, reason="left")],
        expected_seq=1,
        principal="node:other",
    )
    assert eventually(lambda: whoami(node, token) == 401)
    (listed,) = [t for t in node.call("GET", "/v1/tokens").json()["items"] if t["id"] == token_id]
    assert listed["state"] == "revoked"
    # and the revocation through this node's API now says so, appending nothing
    again = node.call("DELETE", f"/v1/tokens/{token_id}")
    assert again.status == 409, again
    assert len(node.runtime.journal.read_stream(token_stream(token_id))) == 2


def test_a_token_another_writer_creates_is_accepted_here(node: HttpNode) -> None:
    token, created = mint("user:bea", ["viewer"], token_id=new_id())
    assert whoami(node, token) == 401
    node.runtime.journal.append(
        token_stream(created.token_id), [created], expected_seq=0, principal="node:other"
    )
    assert eventually(lambda: whoami(node, token) == 200)


def test_an_always_grant_another_writer_revokes_asks_again_here(node: HttpNode) -> None:
    grant_always(node)
    gate = node.runtime.node.services.gate
    node.runtime.journal.append(
        GRANTS_STREAM,
        [GrantRevoked(principal="admin", tool="shell.run")],
        expected_seq=node.runtime.journal.stream_next_seq(GRANTS_STREAM),
        principal="node:other",
    )
    assert eventually(lambda: not gate.has_always("admin", "shell.run"))
    again = node.start(SHELL)
    assert node.pending_approval(again)


def test_an_always_grant_another_writer_records_runs_without_asking_here(node: HttpNode) -> None:
    approval_id = new_id()
    allowed = ApprovalResolved(
        approval_id=approval_id,
        invocation_id=new_id(),
        run_id=new_id(),
        decision="allow",
        scope="always",
        decided_by="user:ops",
        tool="shell.run",
        grant_principal="admin",
    )
    node.runtime.journal.append(
        f"approval/{approval_id}", [allowed], expected_seq=0, principal="node:other"
    )
    gate = node.runtime.node.services.gate
    assert eventually(lambda: gate.has_always("admin", "shell.run"))
    run_id = node.start(SHELL)
    kinds = [event.event for event in node.finish(run_id)]
    assert "tool.completed" in kinds and "tool.approval_requested" not in kinds


def test_own_commands_are_in_force_when_they_answer_whatever_the_follower_does(
    data_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Read-your-writes: a token created or revoked, an always grant given or revoked through
    this node's API holds when the API answers, with the followers asleep after their first
    read (what another writer appends meanwhile waits for them: the contract's lag)."""
    monkeypatch.setattr(tail, "PAUSE_S", 3600.0)
    node = open_node(data_dir, keepalive_s=0.3)
    try:
        made = node.call("POST", "/v1/tokens", {"principal": "user:cy", "roles": ["viewer"]})
        token, token_id = made.json()["token"], made.json()["id"]
        assert whoami(node, token) == 200
        assert node.call("DELETE", f"/v1/tokens/{token_id}").status == 200
        assert whoami(node, token) == 401

        grant_always(node)  # asserts the gate holds it when the approval's answer came
        gate = node.runtime.node.services.gate
        revoked = node.call(
            "POST", "/v1/grants/revoke", {"principal": "admin", "tool": "shell.run"}
        )
        assert revoked.status == 200, revoked
        assert not gate.has_always("admin", "shell.run")

        other, created = mint("user:dee", ["viewer"], token_id=new_id())
        stream = token_stream(created.token_id)
        node.runtime.journal.append(stream, [created], expected_seq=0, principal="node:other")
        assert whoami(node, other) == 401  # not folded yet: the followers sleep
        node.runtime.authority.tokens.sync()
        assert whoami(node, other) == 200
    finally:
        close_node(node)
