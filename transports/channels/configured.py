"""The configured channels as the transports ask for them, without the hub: a node with no
``[channels]`` never imports :mod:`transports.channels.hub` (nor the channel actor, the
connectors, ``!reel`` commands), and answers ``GET /v1/channels`` and a route to any channel
from here: an empty list, and :class:`UnknownChannel`."""

from __future__ import annotations

from typing import Any, Protocol, TypeVar

import msgspec


class UnknownChannel(LookupError):
    """No channel of that name is configured (HTTP 404, gRPC NOT_FOUND)."""

    @classmethod
    def named(cls, name: str) -> UnknownChannel:
        return cls(f"no channel named {name[:40]!r} is configured")


class ChannelInfo(msgspec.Struct, frozen=True, kw_only=True):
    """``GET /v1/channels``: one configured channel and its router policy (never a secret)."""

    name: str
    kind: str
    enabled: bool
    dm_policy: str
    group_policy: str
    """The effective one (``pairing`` when unset and ``dm_policy`` is, else ``open``)."""
    broadcast: str
    require_mention: bool
    isolate_session_by_sender: bool
    coalesce_ms: int
    allow_from: int
    """How many senders are listed (the ids are not shown)."""
    deny_from: int
    paired: int
    """Senders paired now."""
    pending_pairings: int
    connector: dict[str, Any]


class _Hub(Protocol):
    """What :func:`configured` needs of :class:`transports.channels.hub.ChannelHub` (named by
    shape, not imported: the hub imports this module)."""

    def config(self, name: str) -> object: ...


Hub = TypeVar("Hub", bound=_Hub)


def configured(hub: Hub | None, name: str) -> Hub:
    """``hub`` when it holds a channel ``name``; else :class:`UnknownChannel` (a node without
    channels has no hub: ``Runtime.channels`` is None)."""
    if hub is None:
        raise UnknownChannel.named(name)
    hub.config(name)
    return hub
