"""From accepted messages to runs, durably: the batch a run is asked for, and the fold that
finds, at a channel's start, what a stopped node left undone.

Each accepted message moves through three records on ``channel/<name>``:

1. ``channel.message_routed`` (with the message's run ``input``): accepted; the platform may
   forget it now.
2. ``channel.run_requested``: the message (alone, or coalesced with others) is being handed to
   its session as the run ``run_id``, chosen here.
3. ``channel.run_started`` (the session has the run; not waited for, since losing it only
   means asking again) or ``channel.run_not_started`` (it refused). With ``reply``,
   ``channel.reply_sent`` closes it once the answer went out.

A message that starts its run at once has 1 and 2 in one commit.

A node can stop between any two of them: inside a coalescing window, while the session is
asked, while a run is still going. :func:`backlog` folds the stream into what is left at each
step, and the channel actor carries it out with its ordinary handlers: messages never requested
are batched and requested, requests never answered are asked again with the same run id (a
session that has that run starts nothing twice), runs never answered are followed again.
"""

from __future__ import annotations

from collections.abc import Iterable
from concurrent.futures import Future

import msgspec

from actors.channels.message import InboundMessage, sender_of
from actors.channels.results import RouteResult
from events import StoredEvent
from events.catalog import (
    ChannelMessageRouted,
    ChannelReplySent,
    ChannelRunNotStarted,
    ChannelRunRequested,
    ChannelRunStarted,
    kinds_of,
)

RUN_ROUTES = frozenset({"run", "coalesced"})
"""The routes whose messages become run input (and so are recovered)."""
KINDS = frozenset(
    kinds_of(
        ChannelMessageRouted,
        ChannelRunRequested,
        ChannelRunStarted,
        ChannelRunNotStarted,
        ChannelReplySent,
    )
)
"""The kinds :func:`backlog` folds."""


class Waiting(msgspec.Struct, kw_only=True):
    """A caller still waiting for the run its message starts (none after a restart)."""

    reply: Future[RouteResult]
    result: RouteResult


class Batch(msgspec.Struct, kw_only=True):
    """Messages that become one run input: one, or several coalesced, in order."""

    principal: str
    session_key: str
    conversation: str
    thread: str | None
    reply: bool
    label: str
    message_ids: list[str]
    inputs: list[str]
    """Each message's part of the input (``channel.message_routed.input``)."""
    waiting: list[Waiting] = msgspec.field(default_factory=list)
    ack: InboundMessage | None = None
    """The message to acknowledge while the run goes (the first; none after a restart)."""
    run_id: str | None = None
    """Set once ``channel.run_requested`` is recorded."""

    @property
    def text(self) -> str:
        return "\n".join(self.inputs)

    @property
    def size(self) -> int:
        return len(self.text.encode("utf-8", "surrogatepass"))

    def requested(self, channel: str) -> ChannelRunRequested:
        assert self.run_id is not None
        return ChannelRunRequested(
            channel=channel,
            run_id=self.run_id,
            session_key=self.session_key,
            principal=self.principal,
            conversation=self.conversation,
            thread=self.thread,
            message_ids=tuple(self.message_ids),
            reply=self.reply,
            label=self.label,
        )

    def takes(self, session_key: str, part: str, max_bytes: int) -> bool:
        """Whether this coalescing window can take one more message, of ``session_key`` and
        with ``part`` as its input, and stay within ``max_bytes``."""
        size = self.size + 1 + len(part.encode("utf-8", "surrogatepass"))
        return self.session_key == session_key and size <= max_bytes

    def merge(self, other: Batch) -> None:
        """Take ``other``'s messages (and their waiting callers) into this window, after its
        own."""
        self.message_ids.extend(other.message_ids)
        self.inputs.extend(other.inputs)
        self.waiting.extend(other.waiting)
        self.reply = self.reply or other.reply


class Backlog(msgspec.Struct, kw_only=True):
    """What a channel's stream shows was left undone, each list in journal order."""

    unrequested: list[ChannelMessageRouted]
    """Accepted run messages no ``channel.run_requested`` names."""
    unstarted: list[Batch]
    """Requests with neither ``channel.run_started`` nor ``channel.run_not_started``."""
    unanswered: list[ChannelRunStarted]
    """Runs started for a reply with no ``channel.reply_sent``."""


def backlog(stream: Iterable[StoredEvent]) -> Backlog:
    """Fold a channel's stream (any order-preserving subset holding :data:`KINDS`). Memory
    stays with what is outstanding: a message is forgotten once requested, a request once
    started, a run once answered."""
    routed: dict[str, ChannelMessageRouted] = {}
    requests: dict[str, Batch] = {}
    started: dict[str, ChannelRunStarted] = {}
    for stored in stream:
        if stored.kind not in KINDS:
            continue
        event = stored.decode()
        if isinstance(event, ChannelMessageRouted):
            if event.route in RUN_ROUTES and event.input:
                routed[event.message_id] = event
        elif isinstance(event, ChannelRunRequested):
            parts = [routed.pop(mid, None) for mid in event.message_ids]
            requests[event.run_id] = Batch(
                principal=event.principal,
                session_key=event.session_key,
                conversation=event.conversation,
                thread=event.thread,
                reply=event.reply,
                label=event.label,
                message_ids=list(event.message_ids),
                inputs=[p.input for p in parts if p is not None],
                run_id=event.run_id,
            )
        elif isinstance(event, ChannelRunStarted):
            requests.pop(event.run_id, None)
            if event.reply:
                started[event.run_id] = event
        elif isinstance(event, ChannelRunNotStarted):
            requests.pop(event.run_id, None)
        elif isinstance(event, ChannelReplySent):
            started.pop(event.run_id, None)
    return Backlog(
        unrequested=list(routed.values()),
        unstarted=[b for b in requests.values() if b.inputs],
        unanswered=list(started.values()),
    )


def session_label(channel: str, direct_sender: str, conversation: str) -> str:
    """The label of a session a channel creates: the sender of a direct conversation (its
    display name when known), else the conversation."""
    return f"{channel}: {direct_sender or conversation}"[:120]


def regroup(channel: str, messages: list[ChannelMessageRouted], max_bytes: int) -> list[Batch]:
    """Batches for messages that were accepted but never requested: those of one sender in one
    conversation, thread and session are merged in order (as the coalescing window would have
    merged them), each batch kept within ``max_bytes``."""
    batches: list[Batch] = []
    open_: dict[tuple[str, str, str, str], Batch] = {}
    for message in messages:
        key = (message.conversation, message.thread or "", message.principal, message.session_key)
        batch = open_.get(key)
        if batch is not None and not batch.takes(message.session_key, message.input, max_bytes):
            batch = None
        if batch is None:
            batch = Batch(
                principal=message.principal,
                session_key=message.session_key,
                conversation=message.conversation,
                thread=message.thread,
                reply=message.reply,
                label=session_label(
                    channel,
                    sender_of(message.principal) if message.is_direct else "",
                    message.conversation,
                ),
                message_ids=[],
                inputs=[],
            )
            open_[key] = batch
            batches.append(batch)
        batch.message_ids.append(message.message_id)
        batch.inputs.append(message.input)
        batch.reply = batch.reply or message.reply
    return batches
