"""Where a cluster node's commands run: here when this node serves the command's shard (or,
for a channel's request, runs the channel), else on the node that does, over the internal
service (:mod:`.service`).

A move in progress is waited out, within :attr:`Router.patience` (the TTL, a tick and a
second: a dead owner's shards are taken over in the TTL and a tick): a shard with no live owner,
an owner not yet serving it (``ShardNotOwned``), a shard taken over while the command ran here
or there (``Fenced``: nothing written), an owner that refuses the connection (nothing was
sent) — each is looked up again after a pause. Once a command was sent, a lost connection
or no answer in time is :class:`ForwardFailed` ("may or may not have run"), never retried here:
a client retries a command that names its ids (a ``run_id``) safely. A node whose own
``nodes`` row lapsed (the database away past the TTL) forwards nothing until its keeper
registers it again (the owner would refuse it); a forward the owner refuses anyway is
:class:`ForwardFailed` too (503: the client's request was not at fault, unlike a 403).

Appends to a stream no session homes (a token's, a memory item's) whose shard another node
holds are sent to that node the same way (:meth:`Router.append_elsewhere`, from the journal's
writer), its answer settling the append's future.

After a forwarded command answers, the router waits (at most :data:`VISIBLE_S`) until this
node's views include what the owner had committed by then: a client that starts a run through
this node then reads it here (read-your-writes); after a revocation or an approval's decision
it also brings this node's ``always`` grants up to date (docs/scale-out.md, "Caches").
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any

import msgspec
from grpclib.client import Channel, UnaryUnaryMethod

from actors.messages import ResolveApproval, RevokeGrant
from events.envelope import AppendResult
from events.errors import Fenced, ShardNotOwned
from events.sqlite.journal import AppendRequest
from transports.cluster.errors import ForwardFailed
from transports.cluster.service import PATH, MsgpackCodec
from transports.cluster.targets import Target, describe, served
from transports.cluster.wire import FORWARDED, Answer, ForwardedAppend, outcome, sign

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
        here: Callable[[Any], Future[Any]],
        running: Callable[[str], bool],
        append_here: Callable[[AppendRequest], Future[AppendResult]],
        target: Callable[[Any], Target],
        owner: Callable[[Target], Member | None],
        visible: Callable[[int, float], object],
    ) -> None:
        """``here(command)`` runs a command on this node; ``running(name)``: whether singleton
        ``name``'s work runs here; ``owner(target)``: the live node serving ``target`` (any
        node serving a shard, for :data:`ANY_SHARD`)."""
        self._node = node
        self._here = here
        self._running = running
        self._membership = membership
        self._keeper = keeper
        self._key = key
        self._append_here = append_here
        self._target = target
        self._owner = owner
        self._visible = visible
        self._channels: dict[str, Channel] = {}
        settings = keeper.settings
        self.patience = settings.ttl_s + settings.tick_s + 1.0
        self.forwarded = 0
        """Commands sent to another node (``/metrics``)."""

    def send(self, command: Any) -> Future[Any]:
        """The command's reply future, wherever it runs. Commands that are not forwarded
        stay here."""
        if type(command).__name__ not in FORWARDED:
            return self._node.send_here(command)
        return self._node.io.submit(self._route(command))

    async def _route(self, command: Any) -> Any:
        give_up = time.monotonic() + self.patience
        while True:
            where = await asyncio.to_thread(self._target, command)
            if served(where, self._membership.ready(), self._running):
                try:
                    return await asyncio.wrap_future(self._here(command))
                except (ShardNotOwned, Fenced):  # lost the shard meanwhile: nothing written
                    if time.monotonic() >= give_up:
                        raise
                    await asyncio.sleep(PAUSE_S)
                    continue
            answer = await self._at_owner(where, command, give_up)
            if answer is None:
                continue  # the shard moved (here, perhaps): look again
            if answer.position:
                await asyncio.to_thread(self._visible, answer.position, VISIBLE_S)
                if isinstance(command, (RevokeGrant, ResolveApproval)):  # and its always grants
                    await asyncio.to_thread(self._node.services.gate.sync_grants)
            return outcome(answer)

    def append_elsewhere(self, shard: int, requests: list[AppendRequest]) -> None:
        """The journal's writer found ``requests`` (streams no session homes) in a shard
        another node holds: send them there, in order, off the writer's thread, and settle
        their futures with what that node answers."""
        try:
            self._node.io.submit(self._append_elsewhere(shard, requests))
        except RuntimeError:  # the node's loop is gone (stopping): nothing was sent
            for request in requests:
                request.future.set_exception(ShardNotOwned(f"shard {shard} is not held here"))

    async def _append_elsewhere(self, shard: int, requests: list[AppendRequest]) -> None:
        for request in requests:
            try:
                result = await self._append_at_owner(shard, request)
            except Exception as exc:
                request.future.set_exception(exc)
            else:
                request.future.set_result(msgspec.structs.replace(result, events=request.events))

    async def _append_at_owner(self, shard: int, request: AppendRequest) -> AppendResult:
        give_up = time.monotonic() + self.patience
        append = ForwardedAppend.of(request)
        while True:
            if shard in self._keeper.owned():  # it came here meanwhile
                return await asyncio.wrap_future(self._append_here(append.request()))
            answer = await self._at_owner(shard, append, give_up)
            if answer is not None:
                result = outcome(answer)
                assert isinstance(result, AppendResult)
                return result

    async def _at_owner(self, where: Target, command: Any, give_up: float) -> Answer | None:
        """``command``'s answer from the node serving ``where`` (a shard, any shard, a
        singleton); ``None`` after a pause when there is none to ask now (or it has not taken
        the lease yet): the caller looks again. :class:`ForwardFailed` once :attr:`patience`
        is spent, or when a sent command was not answered."""
        owner = await asyncio.to_thread(self._owner, where)
        what = describe(where)
        # This node's own row lapsed (the database away past the TTL): the owner would refuse
        # the forward (no live node of this incarnation) until the keeper registers again.
        lapsed = time.monotonic() >= self._keeper.deadline
        if owner is None or owner.node == self._keeper.node or not owner.address or lapsed:
            if time.monotonic() >= give_up:
                raise ForwardFailed(f"no node serves {what} now; try again shortly")
            await asyncio.sleep(PAUSE_S)
            return None
        try:
            answer = await self._forward(owner, command)
        except ConnectionError:  # refused: nothing was sent; the owner may be dead
            if time.monotonic() >= give_up:
                raise ForwardFailed(f"node {owner.node} serving {what} cannot be reached") from None
            self._drop_channel(owner.address)
            await asyncio.sleep(PAUSE_S)
            return None
        moved = answer.error.endswith((":ShardNotOwned", ":Fenced"))  # nothing written
        if moved and time.monotonic() < give_up:
            await asyncio.sleep(PAUSE_S)
            return None
        if answer.error.endswith(":ForwardRefused"):  # this node's forward, not the client
            why = "; ".join(map(str, answer.error_args))
            raise ForwardFailed(f"node {owner.node} refused this node's forward: {why}")
        return answer

    async def _forward(self, owner: Member, command: Any) -> Answer:
        forward = sign(self._key, self._keeper.node, self._keeper.incarnation, command)
        name = "append" if isinstance(command, ForwardedAppend) else type(command).__name__
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
                f"node {owner.node} did not answer a forwarded {name} "
                f"({type(exc).__name__}); it may or may not have run"
            ) from None
        return msgspec.msgpack.decode(data, type=Answer)

    def _channel(self, address: str) -> Channel:
        channel = self._channels.get(address)
        if channel is None:
            host, _, port = address.rpartition(":")
            channel = Channel(host.strip("[]"), int(port), codec=MsgpackCodec())
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
