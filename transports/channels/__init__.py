"""Chat channels: connectors, the router, pairing, coalescing and replies (docs/channels.md).

Public surface::

    from transports.channels import ChannelHub, InboundMessage, Connector, register

- :class:`InboundMessage` is what every connector produces; :class:`OutboundMessage` what it
  sends.
- :class:`Connector` is the interface a platform implements (``start``/``stop``, ``send``,
  ``acknowledge``), registered under its config ``kind`` with :func:`register`. Built in:
  ``webhook`` and ``matrix`` (imported only when a channel uses it: matrix-nio is an extra).
- :class:`ChannelHub` holds the node's channels; :meth:`ChannelHub.receive` /
  :meth:`ChannelHub.route` is the one inbound entry point, and answers a :class:`RouteResult`.
  A node without channels has none (imported on first use); :func:`configured` is what the
  transports ask either way (the hub holding a channel of that name, or UnknownChannel).
- :mod:`actors.channels.router` is the pure decision (its order is documented there).

Errors (each transport maps them in its one place)::

    InvalidMessage (ValueError)     a bad inbound field: 400 / INVALID_ARGUMENT, naming it
    UnknownChannel (LookupError)    no such channel: 404 / NOT_FOUND
    ConnectorError (Exception)      a connector cannot start (a ConfigError naming the key)
                                    or deliver (recorded on channel.reply_sent)
"""

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from actors.channels.config import ChannelConfig
from actors.channels.message import (
    Attachment,
    InboundMessage,
    InvalidMessage,
    OutboundMessage,
    principal_of,
    split_text,
)
from actors.channels.results import MintedCode, RouteResult
from actors.channels.router import session_key
from transports.channels.configured import ChannelInfo, UnknownChannel, configured
from transports.channels.connector import (
    CONNECTORS,
    Connector,
    ConnectorError,
    Inbound,
    register,
)

if TYPE_CHECKING:
    from transports.channels.hub import ChannelHub


def __getattr__(name: str) -> Any:
    """``ChannelHub`` is imported on first use: a node without channels never builds one
    (``Runtime.channels`` is None), and its module brings the channel actor, the commands and
    the webhook connector."""
    if name == "ChannelHub":
        from transports.channels.hub import ChannelHub

        return ChannelHub
    raise AttributeError(f"module 'transports.channels' has no attribute {name!r}")


def _matrix(name: str, config: ChannelConfig, environ: Mapping[str, str] | None) -> Connector:
    """The Matrix connector (:mod:`transports.channels.matrix`), imported only when a channel
    uses it: matrix-nio is the optional ``matrix`` extra."""
    try:
        from transports.channels.matrix import MatrixConnector
    except ImportError as exc:
        if not (exc.name or "").startswith("nio"):
            raise
        raise ConnectorError(
            "kind: the matrix connector needs matrix-nio (pip install 'reel[matrix]')"
        ) from None
    return MatrixConnector(name, config, environ)


register("matrix", _matrix)

__all__ = [
    "CONNECTORS",
    "Attachment",
    "ChannelHub",
    "ChannelInfo",
    "Connector",
    "ConnectorError",
    "Inbound",
    "InboundMessage",
    "InvalidMessage",
    "MintedCode",
    "OutboundMessage",
    "RouteResult",
    "UnknownChannel",
    "configured",
    "principal_of",
    "register",
    "session_key",
    "split_text",
]
