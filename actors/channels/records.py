"""The ``channel/<name>`` stream: its name, the idempotency key of a platform message on it, and
the events that record what became of a reply or a ``!reel`` command (built where the outcome
is known, appended by the channel's actor, the stream's only writer)."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

from events.catalog import ChannelCommandHandled, ChannelReplySent


def stream_of(channel: str) -> str:
    return f"channel/{channel}"


def message_key(channel: str, message_id: str) -> str:
    """The idempotency key of a platform message (its id hashed: ids are free text)."""
    digest = hashlib.sha256(message_id.encode("utf-8", "surrogatepass")).hexdigest()
    return f"channel/{channel}/message/{digest}"


def record_reply(
    channel: str,
    run_id: str,
    conversation: str,
    in_reply_to: Sequence[str],
    parts: int,
    error: str,
) -> ChannelReplySent:
    """The ``channel.reply_sent`` event for an answer delivered (or not)."""
    return ChannelReplySent(
        channel=channel,
        run_id=run_id,
        conversation=conversation,
        in_reply_to=tuple(in_reply_to),
        parts=parts,
        ok=not error,
        error=error,
    )


def record_command(
    channel: str, principal: str, name: str, target: str, outcome: str, detail: str
) -> ChannelCommandHandled:
    """The ``channel.command_handled`` event for a command's outcome."""
    return ChannelCommandHandled(
        channel=channel,
        principal=principal,
        command=name,  # type: ignore[arg-type]
        target=target,
        outcome=outcome,  # type: ignore[arg-type]
        detail=detail,
    )
