"""What a channel's actor (:mod:`actors.channels.actor`) is told, besides the node's
:class:`~actors.messages.ResolveApproval` for its pairing requests: by the hub (:class:`Deliver`,
:class:`MintCode`, :class:`ResumeChannel`, :class:`Record`) and by itself, through timers and
callbacks (:class:`Flush`, :class:`Dispatched`, :class:`PairingExpired`), so that it never
waits on another actor. A message with a ``reply`` future is answered through it; a handler
that fails sets its error on every future :func:`replies_of` finds.
"""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import Future
from typing import Any

import msgspec

from actors.channels.dispatch import Batch
from actors.channels.message import InboundMessage
from actors.channels.results import MintedCode, RouteResult
from events import Event


class Deliver(msgspec.Struct, frozen=True, kw_only=True):
    message: InboundMessage
    principal: str
    reply: Future[RouteResult]
    until_run: bool = True
    """True: ``reply`` waits for the run (its id in the result; an API caller). False: it
    resolves as soon as the decision is recorded (a connector only needs the message durable,
    and must not wait out a coalescing window before handing in the next one)."""


class MintCode(msgspec.Struct, frozen=True, kw_only=True):
    ttl_ms: int
    principal: str
    reply: Future[MintedCode]


class Flush(msgspec.Struct, frozen=True):
    """Timer: the coalescing window that ``first`` opened closed."""

    key: tuple[str, str, str]
    first: str


class Dispatched(msgspec.Struct, frozen=True):
    """The node answered a StartRun."""

    batch: Batch
    ticket: Future[Any]


class PairingExpired(msgspec.Struct, frozen=True):
    approval_id: str


class ResumeChannel(msgspec.Struct, frozen=True):
    """The connector is up: carry out what a stopped node left undone (the backlog)."""


class Record(msgspec.Struct, frozen=True):
    """Append ``event`` on the actor's stream as ``principal`` (command and reply outcomes)."""

    event: Event
    principal: str


def replies_of(message: Any) -> Sequence[Future[Any]]:
    """The futures whose callers wait on ``message``'s outcome: its ``reply``, or for
    :class:`Dispatched` those of the batch's waiting messages."""
    reply = getattr(message, "reply", None)
    if isinstance(reply, Future):
        return (reply,)
    if isinstance(message, Dispatched):
        return [w.reply for w in message.batch.waiting]
    return ()
