"""Two ``reel node`` processes on one PostgreSQL (issue 24 step 3, docs/scale-out.md "Caches"):
a token made or revoked through one node, an ``always`` grant given or revoked through one, is
in force on the other without a restart (once its journal has seen the record), and on the
node asked when it answers. Each node kept both caches as it folded them at its start before."""

from __future__ import annotations

import time
from pathlib import Path

from tests.postgres_server import PostgresServer
from tests.transports.cluster.nodes import (
    ASKING,
    DEADLINE_S,
    SHARDS,
    owner_of,
    owners,
    running,
    send,
    until,
)
from tests.transports.test_node_process import ServingNode


def whoami(node: ServingNode, token: str) -> int:
    return node.http("GET", "/v1/whoami", token=token)[0]


def asks(node: ServingNode, run_id: str) -> bool:
    """Whether the run waits for a human (its pending approval is then denied, so it ends),
    or ran its call without asking."""

    def outcome() -> str | None:
        status, page = node.http("GET", "/v1/approvals?state=pending")
        assert status == 200, page
        for approval in page["items"]:
            if approval["run_id"] == run_id:
                decided = node.http(
                    "POST", f"/v1/approvals/{approval['approval_id']}", {"decision": "deny"}
                )
                assert decided[0] == 200, decided
                return "asked"
        status, run = node.http("GET", f"/v1/runs/{run_id}")
        if status == 200 and run["state"] in ("done", "failed", "cancelled"):
            assert run["state"] == "done", run
            return "ran"
        return None

    return str(until(outcome, f"run {run_id} to ask or end")) == "asked"


def session_on(nodes: dict[str, ServingNode], dsn: str, owner: str) -> str:
    """A new session whose shard ``owner`` holds."""
    while True:
        status, session = nodes[owner].http("POST", "/v1/sessions", {})
        assert status == 201, session
        if owner_of(dsn, session["session_id"]) == owner:
            return str(session["session_id"])


def until_asks(node: ServingNode, session_id: str, wanted: bool, what: str) -> None:
    """Send the asking call until the run asks (``wanted``) or runs without asking."""
    deadline = time.monotonic() + DEADLINE_S
    while asks(node, send(node, session_id, ASKING)) != wanted:
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def test_tokens_and_grants_changed_through_one_node_hold_on_the_other(
    postgres: PostgresServer, tmp_path: Path
) -> None:
    dsn = postgres.database()
    with running(dsn, tmp_path, ("n1", "n2")) as nodes:
        until(
            lambda: len(owners(dsn)) == SHARDS and set(owners(dsn).values()) == set(nodes),
            "every shard owned, by both nodes",
        )
        n1, n2 = nodes["n1"], nodes["n2"]

        # A token made through n1 is accepted by n2; revoked through n1, refused by n1 at
        # once and by n2 once its journal has seen the revocation.
        status, made = n1.http("POST", "/v1/tokens", {"principal": "user:ann", "roles": ["viewer"]})
        assert status == 201, made
        token, token_id = made["token"], made["id"]
        assert whoami(n1, token) == 200
        until(lambda: whoami(n2, token) == 200, "n2 to accept n1's token")
        status, revoked = n1.http("DELETE", f"/v1/tokens/{token_id}")
        assert status == 200 and revoked["state"] == "revoked", revoked
        assert whoami(n1, token) == 401
        until(lambda: whoami(n2, token) == 401, "n2 to refuse the token n1 revoked")

        # An always grant given through n1 (for a run of a session n1 holds) lets a run of a
        # session n2 holds call the tool without asking; revoked through n2, the next call asks
        # on n2 at once and on n1 once its journal has seen the revocation.
        here, there = session_on(nodes, dsn, "n1"), session_on(nodes, dsn, "n2")
        run_id = send(n1, here, ASKING)

        def approval() -> str | None:
            status, page = n1.http("GET", "/v1/approvals?state=pending")
            ids = [a["approval_id"] for a in page["items"] if a["run_id"] == run_id]
            return ids[0] if status == 200 and ids else None

        approval_id = until(approval, "the first call's approval")
        status, decided = n1.http(
            "POST", f"/v1/approvals/{approval_id}", {"decision": "allow", "scope": "always"}
        )
        assert status == 200, decided
        assert not asks(n1, send(n1, here, ASKING))  # in force where it was decided
        until_asks(n2, there, False, "n2 to honour the grant given through n1")
        status, gone = n2.http("POST", "/v1/grants/revoke", {"principal": "admin", "tool": "echo"})
        assert status == 200, gone
        assert asks(n2, send(n2, there, ASKING))  # in force where it was revoked
        until_asks(n1, here, True, "n1 to ask again after the revocation through n2")
