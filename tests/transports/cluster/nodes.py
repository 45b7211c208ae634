"""Real ``reel node`` processes of one cluster on a throwaway PostgreSQL, for the cluster's
tests and ``bench/cluster.py``: their environment, who owns which shard, waiting for a run or an
approval through a node's API, and starting and stopping them together."""

from __future__ import annotations

import contextlib
import signal
import time
import urllib.request
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import psycopg

from events.postgres.homes import shard_of
from tests.transports.test_node_process import ServingNode

SHARDS = 8
TTL_S = 2.0
DEADLINE_S = 30.0
ASKING = '/tool echo {"text": "cluster"}'
"""A call that waits for a human (the nodes' config makes echo ask each time)."""


def cluster_env(dsn: str, name: str) -> dict[str, str]:
    return {
        "REEL_JOURNAL_DSN": dsn,
        "REEL_JOURNAL_BACKEND": "postgres",
        "REEL_CLUSTER_NODE": name,
        "REEL_CLUSTER_PORT": "0",
        "REEL_CLUSTER_TTL_S": str(TTL_S),
        "REEL_CLUSTER_READY_TICKS": "1",
        "REEL_TOOLS_POSTURES": '{ echo = "ask_each_time" }',
    }


def owners(dsn: str) -> dict[int, str]:
    """Each data shard's live owner, as the database has it."""
    with psycopg.connect(dsn) as conn:
        rows = conn.execute(
            "SELECT l.shard, l.node FROM shard_lease l JOIN nodes n ON n.node = l.node "
            "AND n.incarnation = l.incarnation AND n.expires_at > clock_timestamp() "
            "WHERE l.shard >= 0"
        ).fetchall()
    return {int(shard): str(node) for shard, node in rows}


def holder(dsn: str, singleton: str) -> str | None:
    """The live node holding the singleton lease ``singleton``, as the database has it."""
    with psycopg.connect(dsn) as conn:
        row = conn.execute(
            "SELECT s.node FROM singletons s JOIN nodes n ON n.node = s.node "
            "AND n.incarnation = s.incarnation AND n.expires_at > clock_timestamp() "
            "WHERE s.name = %s",
            (singleton,),
        ).fetchone()
    return str(row[0]) if row else None


def owner_of(dsn: str, session_id: str) -> str:
    """The node holding the session's shard (waiting out a hand-over in progress)."""
    return str(until(lambda: owners(dsn).get(shard_of(session_id, SHARDS)), "an owner"))


def until(check: Any, what: str, timeout: float = DEADLINE_S) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def run_state(node: ServingNode, run_id: str) -> dict[str, Any] | None:
    status, run = node.http("GET", f"/v1/runs/{run_id}")
    return run if status == 200 else None


def ended(node: ServingNode, run_id: str) -> dict[str, Any]:
    return dict(
        until(
            lambda: (
                (r := run_state(node, run_id))
                and r["state"] in ("done", "failed", "cancelled")
                and r
            ),
            f"run {run_id} to end on {node.data.name}",
        )
    )


def pending_approval(node: ServingNode, run_id: str) -> str:
    def found() -> str | None:
        status, page = node.http("GET", "/v1/approvals?state=pending")
        assert status == 200, page
        ids = [a["approval_id"] for a in page["items"] if a["run_id"] == run_id]
        return ids[0] if ids else None

    return str(until(found, f"run {run_id}'s approval on {node.data.name}"))


def metric_lines(node: ServingNode) -> dict[str, str]:
    """``/metrics``' samples by name and labels."""
    request = urllib.request.Request(
        node.base + "/metrics", headers={"Authorization": f"Bearer {node.token}"}
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        text = response.read().decode()
    return dict(
        line.rsplit(" ", 1) for line in text.splitlines() if line and not line.startswith("#")
    )


def send(node: ServingNode, session_id: str, text: str) -> str:
    status, started = node.http("POST", f"/v1/sessions/{session_id}/messages", {"text": text})
    assert status == 202, (node.data.name, session_id, text, started)
    return str(started["run_id"])


@contextlib.contextmanager
def running(
    dsn: str,
    root: Path,
    names: Iterable[str],
    *,
    config: str = "",
    env: dict[str, str] | None = None,
) -> Iterator[dict[str, ServingNode]]:
    """A journal of :data:`SHARDS` shards made in ``dsn``, then the nodes ``names`` started one
    after another (each a data dir of its own under ``root``, with ``config`` as its
    config.toml and ``env`` added to the cluster's), stopped together at the end; on a failure
    their last log lines are printed."""
    from tests.transports.node.test_daemon import reel

    init = reel("journal", "init", "--shards", str(SHARDS), env={"REEL_JOURNAL_DSN": dsn})
    assert init.returncode == 0, init.stderr
    nodes: dict[str, ServingNode] = {}
    try:
        for name in names:
            data = root / name
            data.mkdir(mode=0o700)
            if config:
                (data / "config.toml").write_text(config)
            nodes[name] = ServingNode(data, {**cluster_env(dsn, name), **(env or {})})
        yield nodes
    except BaseException:
        for name, node in nodes.items():
            print(f"--- {name}")
            print("\n".join(str(line) for line in node.lines[-40:]))
        raise
    finally:
        stop_all(nodes.values())


def stop_all(nodes: Iterable[ServingNode]) -> None:
    """Stop every node still running (SIGINT: each drains), and wait for all of them."""
    nodes = list(nodes)
    for node in nodes:
        if node.process.poll() is None:
            node.process.send_signal(signal.SIGINT)
    for node in nodes:
        node.finish()
