"""Three ``reel node`` processes on one PostgreSQL journal (issue 24 step 3): any node accepts
a command for any session and the session's owner runs it (forwarded over the internal
service); a client reads what it just did on the node it asked; one node decides whether a
session key is taken; an approval is decided through a third node; the owner killed with
``kill -9`` while its run waits for a human costs its sessions seconds, and the survivor that
takes its shard over resumes the wait."""

from __future__ import annotations

import asyncio
import itertools
import time
from pathlib import Path
from typing import Any

import psycopg
from grpclib.client import Channel

from events.postgres.homes import shard_of
from tests.postgres_server import PostgresServer
from tests.transports.cluster.nodes import (
    ASKING,
    DEADLINE_S,
    SHARDS,
    TTL_S,
    ended,
    metric_lines,
    owner_of,
    owners,
    pending_approval,
    run_state,
    running,
    send,
    until,
)
from tests.transports.test_node_process import ServingNode
from transports.cluster.targets import key_shard
from transports.grpc.client import RunStreamClient

LONG = "a long answer, streamed in several pieces " * 20


async def stream_across(first: ServingNode, second: ServingNode, session_id: str) -> list[Any]:
    """A run streamed from ``first`` for a few entries, then resumed on ``second``."""
    got: list[Any] = []
    channel = Channel(first.grpc_host, first.grpc_port)
    async with RunStreamClient(channel, first.token, timeout=30) as stream:
        await stream.start(LONG, session_id=session_id)
        async for event in stream.events():
            got.append(event)
            if len(got) >= 2:
                break
    channel.close()
    channel = Channel(second.grpc_host, second.grpc_port)
    async with RunStreamClient(channel, second.token, timeout=30) as stream:
        await stream.resume(got[0].run_id, got[-1].tape_seq)
        async for event in stream.events():
            got.append(event)
    channel.close()
    return got


def test_three_nodes_serve_every_session_and_a_killed_owner_costs_seconds(
    postgres: PostgresServer, tmp_path: Path
) -> None:
    dsn = postgres.database()
    with running(dsn, tmp_path, ("n1", "n2", "n3")) as nodes:
        for name, node in nodes.items():
            assert node.ready["cluster"]["node"] == name
        until(
            lambda: len(owners(dsn)) == SHARDS and set(owners(dsn).values()) == set(nodes),
            "every shard owned, by all three nodes",
        )

        # A session made on n1 lives on its shard's owner; another node runs a message for it.
        status, session = nodes["n1"].http("POST", "/v1/sessions", {})
        assert status == 201, session
        session_id = session["session_id"]
        owner = owner_of(dsn, session_id)
        other, third = [n for n in nodes if n != owner][:2]
        run_id = send(nodes[other], session_id, "hello from afar")
        # read-your-writes: the node that forwarded it shows the run at once
        assert run_state(nodes[other], run_id) is not None
        first = ended(nodes[other], run_id)
        assert first["state"] == "done", first

        # A gRPC run stream begun on one node resumes on another from the client's tape_seq.
        got = asyncio.run(stream_across(nodes[other], nodes[third], session_id))
        assert [e.tape_seq for e in got] == list(range(len(got))), "a gap or a repeat"
        assert got[-1].kind == "run.completed", [e.kind for e in got]

        # An approval asked on the owner is decided through the third node.
        run_id = send(nodes[other], session_id, ASKING)
        approval_id = pending_approval(nodes[third], run_id)
        status, decided = nodes[third].http(
            "POST", f"/v1/approvals/{approval_id}", {"decision": "allow"}
        )
        assert status == 200, decided
        done = ended(nodes[third], run_id)
        assert done["state"] == "done" and "cluster" in done["answer"], done

        # One node decides whether a key is taken, whichever node is asked.
        status, keyed = nodes["n2"].http("POST", "/v1/sessions", {"session_key": "team-a"})
        assert status == 201, keyed
        status, again = nodes["n3"].http("POST", "/v1/sessions", {"session_key": "team-a"})
        assert status == 200 and again["session_id"] == keyed["session_id"], again

        # A branch naming a key whose shard another node owns than the parent's: that node
        # makes it (and decides the key), whichever node was asked.
        held = owners(dsn)
        key = next(
            k
            for k in (f"branch-{i}" for i in itertools.count())
            if held[key_shard(k, SHARDS)] != owner_of(dsn, session_id)
        )
        status, branch = nodes[third].http(
            "POST", f"/v1/sessions/{session_id}/branch", {"session_key": key}
        )
        assert status == 201 and branch["parent_session_id"] == session_id, branch
        assert owner_of(dsn, branch["session_id"]) == held[key_shard(key, SHARDS)]
        status, same = nodes[other].http("POST", "/v1/sessions", {"session_key": key})
        assert status == 200 and same["session_id"] == branch["session_id"], same

        # A memory item written through n1 lives in a shard n1 holds; deleting it through
        # another node sends that append to n1 (the stream's shard is n1's).
        status, item = nodes["n1"].http("POST", "/v1/memory", {"text": "the cluster fact"})
        assert status == 201, item
        elsewhere = next(n for n in nodes if n != "n1")
        status, gone = nodes[elsewhere].http("DELETE", f"/v1/memory/{item['id']}")
        assert status == 200, gone
        with psycopg.connect(dsn) as conn:
            placed = conn.execute(
                "SELECT kind, shard FROM events WHERE stream = %s ORDER BY stream_seq",
                (f"memory/{item['id']}",),
            ).fetchall()
        kinds = [kind for kind, _ in placed]
        assert kinds == ["memory.item_written", "memory.item_deleted"], placed
        assert len({shard for _, shard in placed}) == 1, placed

        # One node watches and fires schedules for all; a schedule made through one node is
        # listed, fires once per due time, and is paused through another.
        holders = {
            name: sum(
                int(metric_lines(node)[f'reel_cluster_singletons{{name="{name}"}}'])
                for node in nodes.values()
            )
            for name in ("watchdog", "schedules")
        }
        assert holders == {"watchdog": 1, "schedules": 1}, holders
        every = {"name": "tick", "every": "1s", "session_key": "ticks", "text": "tick"}
        status, made = nodes["n1"].http("POST", "/v1/schedules", every)
        assert status == 201, made
        status, listed = nodes["n2"].http("GET", "/v1/schedules")
        assert status == 200 and [s["name"] for s in listed["items"]] == ["tick"], listed
        time.sleep(3.5)
        status, paused = nodes["n3"].http("POST", "/v1/schedules/tick/pause", {})
        assert status == 200, paused
        with psycopg.connect(dsn) as conn:
            fired = [
                at
                for (at,) in conn.execute(
                    "SELECT recorded_at_ms FROM events WHERE kind = 'schedule.fired' "
                    "ORDER BY position"
                ).fetchall()
            ]
        assert len(fired) >= 2, fired
        assert all(b - a >= 900 for a, b in itertools.pairwise(fired)), fired

        # The owner dies while its run waits for a human: a survivor takes the shard over,
        # resumes the wait, and the decision through it lets the run finish.
        owner = owner_of(dsn, session_id)  # placement may have moved it
        other, third = [n for n in nodes if n != owner][:2]
        run_id = send(nodes[other], session_id, ASKING)
        approval_id = pending_approval(nodes[other], run_id)
        assert owners(dsn).get(shard_of(session_id, SHARDS)) == owner
        nodes[owner].process.kill()
        killed = time.monotonic()
        nodes[owner].finish()
        while True:
            status, decided = nodes[other].http(
                "POST", f"/v1/approvals/{approval_id}", {"decision": "allow"}
            )
            if status == 200:
                break
            assert status == 503, decided
            assert time.monotonic() - killed < DEADLINE_S, decided
            time.sleep(0.1)
        took = time.monotonic() - killed
        # TTL + a tick + 1 s (issue 24), plus 2 s for a loaded test machine (2.22 s measured)
        assert took < TTL_S * 1.25 + 1.0 + 2.0, took
        done = ended(nodes[other], run_id)
        assert done["state"] == "done", done
        assert owner_of(dsn, session_id) != owner
        later = ended(nodes[third], send(nodes[third], session_id, "still here?"))
        assert later["state"] == "done", later
        metrics = metric_lines(nodes[other])
        assert 'reel_cluster_forwards_total{direction="sent"}' in metrics
        assert int(metrics['reel_cluster_shards{state="held"}']) >= 1
        assert int(metrics["reel_cluster_lease_renewals_total"]) > 0
        print(f"the dead owner's session answered again after {took:.2f} s")


def test_an_open_write_transaction_shows_as_horizon_lag(
    postgres: PostgresServer, tmp_path: Path
) -> None:
    """``reel_cluster_horizon_lag_seconds`` is the age of the oldest write transaction open in
    the database (the alarm an operator sets: one left open stalls every reader); it falls back
    once the transaction ends. ``reel_cluster_follow_age_seconds`` stays below a second on a
    node that reads the database."""
    dsn = postgres.database()
    with running(dsn, tmp_path, ("n1",)) as nodes:
        node = nodes["n1"]

        def lag() -> float:
            return float(metric_lines(node)["reel_cluster_horizon_lag_seconds"])

        with psycopg.connect(dsn) as conn:  # a transaction holding an xid, left open
            conn.execute("SELECT pg_current_xact_id()")
            held = time.monotonic()
            until(lambda: lag() >= 1.5, "the open transaction's age in /metrics")
            seen = lag()
            assert seen <= time.monotonic() - held + 0.5, seen
            conn.commit()
        until(lambda: lag() < 1.0, "the lag to fall once the transaction ended")
        assert float(metric_lines(node)["reel_cluster_follow_age_seconds"]) < 1.0
