"""What a channel's actor asks of the edge that carries its conversations.

The actor decides (route, pair, coalesce, start runs, record) and the hub
(:class:`transports.channels.hub.ChannelHub`) speaks to the platform: it implements this port,
so the actor depends on the port and the hub on the actor, never the other way round (the
import circle hub <-> actor this replaced). Every method returns at once; what talks to the
platform runs on the node's I/O loop.
"""

from __future__ import annotations

from concurrent.futures import Future
from typing import Protocol

from actors.channels.message import InboundMessage
from actors.channels.results import RouteResult
from actors.channels.router import Command
from events.catalog import ChannelRunStarted


class ChannelEdge(Protocol):
    """The hub, as one channel's actor sees it."""

    def count_duplicate(self) -> None:
        """A delivery repeated a message id already routed (``reel_channel_duplicates_total``)."""

    def notify(self, channel: str, message: InboundMessage, text: str) -> None:
        """Answer ``message`` in its conversation with ``text`` (a notice, not a run's answer)."""

    def pairing_decided(
        self, channel: str, approval_id: str, conversation: str, decision: str, until_ms: int
    ) -> None:
        """Tell the sender how their pairing request ended."""

    def can_reply(self, channel: str) -> bool:
        """Whether ``channel``'s connector can send replies at all."""

    def follow(self, channel: str, started: ChannelRunStarted, ack: InboundMessage | None) -> None:
        """Follow a run an accepted message started and answer in its conversation; ``ack``:
        the message to acknowledge while it runs (None when resuming after a restart)."""

    def run_command(
        self,
        channel: str,
        message: InboundMessage,
        principal: str,
        decision: Command,
        result: RouteResult,
        reply: Future[RouteResult],
    ) -> None:
        """Carry out a ``!reel`` command; ``reply`` gets the decision with the answer."""
