"""The internal service refuses what a node did not send: a forward signed by another key, by
a former incarnation, replayed, too old, or not a forwarded command; it answers
``ShardNotOwned`` for a shard it does not serve, and runs the rest as the principal named."""

from __future__ import annotations

import asyncio
import time
from concurrent.futures import Future
from typing import Any

import msgspec
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from actors.messages import GetSessionState, StartRun
from events.checkpoint import NodeKey
from events.postgres.reader import Member
from transports.cluster.service import MAX_AGE_MS, ForwardService
from transports.cluster.wire import Answer, Forward, sign

KEY = NodeKey(Ed25519PrivateKey.generate())
SHARD = 3


def service(sent: list[Any], ready: frozenset[int] = frozenset({SHARD})) -> ForwardService:
    def send(command: Any) -> Future[Any]:
        sent.append(command)
        reply: Future[Any] = Future()
        reply.set_result(True)
        return reply

    return ForwardService(
        member=lambda node: Member(node, 2, "127.0.0.1:1", KEY.public_key) if node == "a" else None,
        target=lambda _command: SHARD,
        ready=lambda: ready,
        running=lambda _name: False,
        send=send,
        append=lambda _request: Future(),
        position=lambda: 42,
    )


def answer(svc: ForwardService, forward: Forward | bytes) -> Answer:
    data = forward if isinstance(forward, bytes) else msgspec.msgpack.encode(forward)
    return asyncio.run(svc._answer(data))


def test_a_forward_signed_by_the_live_node_runs_as_its_principal() -> None:
    sent: list[Any] = []
    got = answer(
        service(sent), sign(KEY, "a", 2, StartRun(text="hi", session_id="s", principal="ops"))
    )
    assert (got.error, got.value_type, got.position) == ("", "bool", 42)
    assert sent == [StartRun(text="hi", session_id="s", principal="ops")]


def test_what_the_node_did_not_send_is_refused_unrun() -> None:
    sent: list[Any] = []
    svc = service(sent)
    good = sign(KEY, "a", 2, GetSessionState(session_id="s"))
    other = NodeKey(Ed25519PrivateKey.generate())
    forged = sign(other, "a", 2, GetSessionState(session_id="s"))
    changed = msgspec.structs.replace(good, fields=msgspec.msgpack.encode({"session_id": "t"}))
    stale = sign(KEY, "a", 1, GetSessionState(session_id="s"))  # a former incarnation
    stranger = sign(KEY, "b", 2, GetSessionState(session_id="s"))
    old = msgspec.structs.replace(good, sent_at_ms=time.time_ns() // 1_000_000 - MAX_AGE_MS - 1)
    for bad in (forged, changed, stale, stranger, old, b"\x93garbage"):
        got = answer(svc, bad)
        assert got.error == "transports.cluster.errors:ForwardRefused", (bad, got)
    assert sent == []
    assert answer(svc, good).error == ""
    replayed = answer(svc, good)
    assert replayed.error == "transports.cluster.errors:ForwardRefused"
    assert "replayed" in replayed.error_args[0]
    assert len(sent) == 1


def test_a_shard_not_served_here_is_answered_so_the_sender_looks_again() -> None:
    sent: list[Any] = []
    got = answer(
        service(sent, ready=frozenset()), sign(KEY, "a", 2, GetSessionState(session_id="s"))
    )
    assert got.error == "events.errors:ShardNotOwned"
    assert sent == []
