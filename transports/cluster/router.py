"""Where a cluster node's commands run: here when this node serves the command's shard, else
on the node that does, over the internal service (:mod:`.service`).

A move in progress is waited out, within :attr:`Router.patience` (the TTL, a tick and a
second: a dead owner's shards are taken over in the TTL and a tick): a shard with no live owner,
an owner not yet serving it (``ShardNotOwned``), an owner that refuses the connection (nothing
was sent) — each is looked up again after a pause. Once a command was sent, a lost connection
or no answer in time is :class:`ForwardFailed` ("may or may not have run"), never retried here:
a client retries a command that names its ids (a ``run_id``) safely.

After a forwarded command answers, the router waits (at most :data:`VISIBLE_S`) until this
node's views include what the owner had committed by then: a client that starts a run through
this node then reads it here (read-your-writes).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from concurrent.futures import Future
from functools import partial
from typing import TYPE_CHECKING, Any

import msgspec
from grpclib.client import Channel, UnaryUnaryMethod

from events.errors import ShardNotOwned
from transports.cluster.errors import ForwardFailed
from transports.cluster.service import PATH, RawCodec
from transports.cluster.targets import ANY_SHARD
from transports.cluster.wire import FORWARDED, Answer, outcome, sign

if TYPE_CHECKING:
    from actors.system.node import Node
    from events.checkpoint import NodeKey
    from events.postgres.leases import LeaseKeeper
    from events.postgres.reader import Member
    from transports.cluster.membership import Membership

FORWARD_TIMEOUT_S = 120.0
"""How long a forwarded command may take to answer (a compaction asks the model)."""
VISIBLE_S = 5.0
"""How long the router waits for this node's views to show a forwarded command's writes."""
PAUSE_S = 0.1


class Router:
    """Sends each command to the node serving its shard (:meth:`send`)."""

    def __init__(
        self,
        *,
        node: Node,
        membership: Membership,
        keeper: LeaseKeeper,
        key: NodeKey,
        target: Callable[[Any], int | None],
        owner: Callable[[int], Member | None],
        any_owner: Callable[[], Member | None],
        visible: Callable[[int, float], object],
    ) -> None:
        self._node = node
        self._membership = membership
        self._keeper = keeper
        self._key = key
        self._target = target
        self._owner = owner
        self._any_owner = any_owner
        self._visible = visible
        self._channels: dict[str, Channel] = {}
        settings = keeper.settings
        self.patience = settings.ttl_s + settings.tick_s + 1.0
        self.forwarded = 0
        """Commands sent to another node (``/metrics``)."""

    def send(self, command: Any) -> Future[Any]:
        """The command's reply future, wherever it runs. Commands only this node's actors
        send (a stall from the watchdog) stay here."""
        if type(command).__name__ not in FORWARDED:
            return self._node.send_here(command)
        return self._node.io.submit(self._route(command))

    async def _route(self, command: Any) -> Any:
        give_up = time.monotonic() + self.patience
        while True:
            shard = await asyncio.to_thread(self._target, command)
            ready = self._membership.ready()
            if (shard is ANY_SHARD and ready) or shard in ready:
                try:
                    return await asyncio.wrap_future(self._node.send_here(command))
                except ShardNotOwned:  # lost the shard meanwhile: nothing was written
                    if time.monotonic() >= give_up:
                        raise
                    await asyncio.sleep(PAUSE_S)
                    continue
            owner = await asyncio.to_thread(
                self._any_owner if shard is ANY_SHARD else partial(self._owner, shard)
            )
            if owner is None or owner.node == self._keeper.node or not owner.address:
                if time.monotonic() >= give_up:
                    raise ForwardFailed(
                        f"shard {shard} has no node serving it now; try again shortly"
                        if shard is not ANY_SHARD
                        else "no node serves any shard now; try again shortly"
                    )
                await asyncio.sleep(PAUSE_S)
                continue
            try:
                answer = await self._forward(owner, command)
            except ConnectionError:  # refused: nothing was sent; the owner may be dead
                if time.monotonic() >= give_up:
                    raise ForwardFailed(
                        f"node {owner.node} serving shard {shard} cannot be reached"
                    ) from None
                self._drop_channel(owner.address)
                await asyncio.sleep(PAUSE_S)
                continue
            if answer.error.endswith(":ShardNotOwned") and time.monotonic() < give_up:
                await asyncio.sleep(PAUSE_S)
                continue
            if answer.position:
                await asyncio.to_thread(self._visible, answer.position, VISIBLE_S)
            return outcome(answer)

    async def _forward(self, owner: Member, command: Any) -> Answer:
        forward = sign(self._key, self._keeper.node, self._keeper.incarnation, command)
        method: UnaryUnaryMethod[bytes, bytes] = UnaryUnaryMethod(
            self._channel(owner.address), PATH, bytes, bytes
        )
        self.forwarded += 1
        try:
            data = await method(msgspec.msgpack.encode(forward), timeout=FORWARD_TIMEOUT_S)
        except ConnectionError:
            raise
        except Exception as exc:
            self._drop_channel(owner.address)
            raise ForwardFailed(
                f"node {owner.node} did not answer a forwarded {type(command).__name__} "
                f"({type(exc).__name__}); it may or may not have run"
            ) from None
        return msgspec.msgpack.decode(data, type=Answer)

    def _channel(self, address: str) -> Channel:
        channel = self._channels.get(address)
        if channel is None:
            host, _, port = address.rpartition(":")
            channel = Channel(host.strip("[]"), int(port), codec=RawCodec())
            self._channels[address] = channel
        return channel

    def _drop_channel(self, address: str) -> None:
        channel = self._channels.pop(address, None)
        if channel is not None:
            channel.close()

    async def close(self) -> None:
        """Close the connections to the other nodes (on the node's I/O loop)."""
        for address in list(self._channels):
            self._drop_channel(address)
