"""The connector interface: what a chat platform adapter implements, and how it hands messages
in.

A connector translates between one platform and reel, nothing more: it turns each platform
message into an :class:`~actors.channels.message.InboundMessage` and calls its
:class:`Inbound` sink (the hub's one entry point, which records the router's decision and
starts the run); the hub calls :meth:`Connector.send` with each reply part (already split to
:attr:`Connector.max_text_chars`) and :meth:`Connector.acknowledge` while a run is in
progress. Every method runs on the node's asyncio loop; a connector never blocks it.

A new platform is one subclass registered in :data:`CONNECTORS` under its config ``kind``
(``[channels.<name>] kind = "..."``). Connectors that receive over reel's own HTTP server (the
webhook) need no listener of their own; connectors that connect out (Matrix) start their sync
loop in :meth:`Connector.start` and end it in :meth:`Connector.stop`, reconnecting with backoff
on their own and handing every message in once (the hub also drops repeats by message id).
"""

from __future__ import annotations

import abc
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any, ClassVar

from actors.channels.message import InboundMessage, OutboundMessage

if TYPE_CHECKING:
    from actors.channels.config import ChannelConfig
    from actors.channels.results import RouteResult

Inbound = Callable[[InboundMessage], Awaitable["RouteResult"]]
"""The hub's entry point as a connector sees it: hand a message in, get the decision once it
is recorded (durable: the connector may move its platform cursor on). The run it starts comes
later, after any coalescing window, so a result has no ``run_id``."""


class ConnectorError(Exception):
    """A connector could not start or deliver (the message says which and why, never a
    secret). Delivery errors are recorded on ``channel.reply_sent`` (``ok: false``)."""


class Connector(abc.ABC):
    """One configured channel's link to its platform."""

    kind: ClassVar[str]
    """The ``kind`` it is configured with."""

    def __init__(
        self, name: str, config: ChannelConfig, environ: Mapping[str, str] | None = None
    ) -> None:
        """Check the config (raise :class:`ConnectorError` naming the key) and read secrets
        from the environment variables the config names; connect nothing yet."""
        self.name = name
        self.config = config

    @property
    def can_reply(self) -> bool:
        """Whether replies can go out at all (a webhook without ``outbound_url`` cannot)."""
        return True

    @property
    def max_text_chars(self) -> int:
        """The platform's limit per message: replies are split to it."""
        return self.config.reply_max_chars

    async def start(self, inbound: Inbound) -> None:  # noqa: B027 - optional
        """Begin receiving (a sync loop, a socket...); hand each message to ``inbound``.
        Return once started, without waiting on ``inbound``: a hand-in waits until every
        channel has resumed its backlog, which is after every connector has started. The
        webhook receives through reel's HTTP server instead."""

    async def stop(self) -> None:  # noqa: B027 - optional
        """Stop receiving and close connections (the node is stopping)."""

    @abc.abstractmethod
    async def send(self, message: OutboundMessage) -> None:
        """Deliver one reply part (at most :attr:`max_text_chars` characters), in order.
        Raise :class:`ConnectorError` when the platform refuses it."""

    async def acknowledge(self, message: InboundMessage, mode: str, text: str) -> None:
        """Show that a run is in progress for ``message``: ``mode`` is ``react`` (``text`` is
        the reaction) or ``message`` (``text`` is a short reply). The default sends a message
        either way; platforms with reactions override it."""
        await self.send(
            OutboundMessage(
                channel=self.name,
                conversation=message.conversation,
                thread=message.thread,
                text=text,
                in_reply_to=message.message_id,
            )
        )

    def describe(self) -> dict[str, Any]:
        """What ``GET /v1/channels`` shows of the connector (never a secret)."""
        return {}


ConnectorFactory = Callable[[str, "ChannelConfig", Mapping[str, str] | None], Connector]

CONNECTORS: dict[str, ConnectorFactory] = {}
"""Config ``kind`` -> connector class. :mod:`transports.channels.webhook` registers
``webhook``; a platform module registers itself on import (the hub imports the built-in ones)."""


def register(kind: str, factory: ConnectorFactory) -> None:
    """Make ``kind`` configurable."""
    CONNECTORS[kind] = factory
