"""What a node asks of a channel it may not be running: in a cluster each channel runs on one
node at a time (the holder of its singleton lease, :func:`transports.cluster.singletons.
channel_singleton`), and a message or a pairing code asked of any other node is sent to that
one as one of these (:mod:`transports.cluster.wire`); on the node running the channel, the hub
carries it out (:meth:`transports.channels.hub.ChannelHub.run_here`)."""

from __future__ import annotations

import msgspec

from actors.channels.message import InboundMessage


class RouteInbound(msgspec.Struct, frozen=True, kw_only=True):
    """Route ``message`` into its channel (``until_run``: the reply waits for the run it
    starts, as :meth:`~transports.channels.hub.ChannelHub.receive` does)."""

    message: InboundMessage
    until_run: bool = True


class MintPairCode(msgspec.Struct, frozen=True, kw_only=True):
    """Mint a single-use pairing code for ``channel``, recorded as minted by ``principal``."""

    channel: str
    ttl_ms: int
    principal: str


CHANNEL_REQUESTS = (RouteInbound, MintPairCode)
"""Each is carried out by the node running its channel."""


def channel_of(request: RouteInbound | MintPairCode) -> str:
    """The channel ``request`` is for."""
    return request.message.channel if isinstance(request, RouteInbound) else request.channel
