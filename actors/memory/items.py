"""Writing and deleting memory items: the one place where the ``memory.write`` tool,
``POST /v1/memory`` / ``DELETE /v1/memory/{id}`` and ``reel memory write|delete`` turn a
request into ``memory.*`` events (docs/memory.md).

A write is checked here before anything is appended, each refusal a :class:`MemoryInputError`
naming the field (the surfaces translate the name: ``$.text`` over HTTP, ``--tag`` in the CLI):

- ``text``: not blank, at most :data:`events.catalog.MEMORY_TEXT_MAX_CHARS` characters;
- ``tags``: at most :data:`events.catalog.MEMORY_TAGS_MAX` (after dropping repeats), each 1 to
  :data:`TAG_MAX_CHARS` characters without control characters;
- ``scope``: ``principal``, ``session`` or ``global``; ``session_id`` is given exactly when the
  scope is ``session``, and names a session the journal holds;
- ``expires_at``: in the future.

The item gets a new id (:func:`events.new_id`) and its own stream ``memory/<item_id>``; the
event is appended as the principal who asked (secrets in ``text`` and ``tags`` are redacted
before anything is stored, so a secret is never stored, indexed or returned). An item's state
(:class:`ItemState`, an :class:`actors.aggregate.Aggregate`: ``memory.item_written`` starts it)
for a delete or an authorization is folded from its stream, not read from the views, so it
never lags: a delete of an unknown id is :class:`UnknownMemoryItem`, of a deleted one
:class:`MemoryItemAlreadyDeleted` (:func:`deletion` decides), and nothing is appended either
way.

:class:`NodeMemory` is a node's memory as its surfaces use it: the view to read and the journal
to write, and the :class:`tools.MemoryStore` the memory tools are built with.
"""

from __future__ import annotations

import time
import unicodedata
from collections.abc import Callable
from typing import cast

import msgspec

from actors.aggregate import fold
from actors.stream import Recorded, recorded
from events import JournalPort, JournalReadPort, is_ulid, new_id
from events.catalog import (
    MEMORY_SCOPES,
    MEMORY_TAGS_MAX,
    MEMORY_TEXT_MAX_CHARS,
    MemoryItemDeleted,
    MemoryItemWritten,
    MemoryScope,
    MemorySource,
)
from events.errors import ConcurrencyConflict
from events.fields import REASON_MAX_CHARS
from projections import MemoryView
from projections.memory.search import MemoryHit, MemoryItem
from tools import FoundItem

TAG_MAX_CHARS = 64
"""The longest tag, in characters."""


class MemoryInputError(ValueError):
    """A write or delete refused before anything was appended; ``field`` names the input
    (``text``, ``tags``, ``scope``, ``session_id``, ``expires_at``, ``reason``)."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field
        self.message = message


class UnknownMemoryItem(LookupError):
    """No memory item has this id."""


class MemoryItemAlreadyDeleted(Exception):
    """The item was deleted before; nothing changed."""


class ItemState(msgspec.Struct, frozen=True, kw_only=True):
    """An item as its own stream says it is now (what a delete and an authorization need)."""

    item_id: str
    scope: str
    owner: str | None
    """Whose item (scope ``principal``)."""
    session_id: str | None
    """Its session (scope ``session``)."""
    written_by: str
    """Who wrote it last."""
    expires_at_ms: int | None
    deleted: bool
    next_seq: int
    """The stream's next ``stream_seq`` (where a delete is appended)."""


def memory_stream(item_id: str) -> str:
    return f"memory/{item_id}"


def initial(first: Recorded) -> ItemState | None:
    """The item its ``memory.item_written`` starts (None for any other record)."""
    event = first.event
    if not isinstance(event, MemoryItemWritten) or first.stream != memory_stream(event.item_id):
        return None
    return ItemState(
        item_id=event.item_id,
        scope=event.scope,
        owner=(event.principal or first.principal) if event.scope == "principal" else None,
        session_id=event.session_id if event.scope == "session" else None,
        written_by=first.principal,
        expires_at_ms=event.expires_at_ms,
        deleted=False,
        next_seq=1,
    )


def apply(state: ItemState, rec: Recorded) -> ItemState:
    """Fold one record of the item's stream (one of another stream changes nothing)."""
    if rec.stream != memory_stream(state.item_id):
        return state
    deleted = state.deleted or isinstance(rec.event, MemoryItemDeleted)
    return msgspec.structs.replace(state, deleted=deleted, next_seq=state.next_seq + 1)


def deletion(state: ItemState | None, item_id: str, reason: str) -> MemoryItemDeleted:
    """``memory.item_deleted``; raises :class:`UnknownMemoryItem` (``state`` None) or
    :class:`MemoryItemAlreadyDeleted` (nothing is appended then)."""
    if state is None:
        raise UnknownMemoryItem(f"no memory item {item_id[:40]!r}")
    if state.deleted:
        raise MemoryItemAlreadyDeleted(f"memory item {item_id} is already deleted")
    return MemoryItemDeleted(item_id=item_id, reason=reason)


def _now_ms() -> int:
    return int(time.time() * 1000)


def check_text(text: str) -> str:
    if not text.strip():
        raise MemoryInputError("text", "text is blank: a memory item needs some text")
    if len(text) > MEMORY_TEXT_MAX_CHARS:
        raise MemoryInputError(
            "text",
            f"text is {len(text):,} characters; the cap is {MEMORY_TEXT_MAX_CHARS:,} "
            "(MEMORY_TEXT_MAX_CHARS)",
        )
    return text


def check_tags(tags: tuple[str, ...] | list[str]) -> tuple[str, ...]:
    """The tags, stripped, repeats dropped (first kept), each checked."""
    out: list[str] = []
    for raw in tags:
        tag = raw.strip()
        if not tag:
            raise MemoryInputError("tags", "a tag is blank")
        if len(tag) > TAG_MAX_CHARS:
            raise MemoryInputError(
                "tags", f"a tag is {len(tag)} characters; the cap is {TAG_MAX_CHARS}"
            )
        if any(unicodedata.category(c).startswith("C") for c in tag):
            raise MemoryInputError("tags", "a tag holds a control character")
        if tag not in out:
            out.append(tag)
    if len(out) > MEMORY_TAGS_MAX:
        raise MemoryInputError(
            "tags", f"{len(out)} tags; the cap is {MEMORY_TAGS_MAX} (MEMORY_TAGS_MAX)"
        )
    return tuple(out)


def check_scope(
    reader: JournalReadPort, scope: str, session_id: str | None
) -> tuple[MemoryScope, str | None]:
    """``scope`` and ``session_id`` if they go together (a session item names a session the
    journal holds; no other item names one)."""
    if scope not in MEMORY_SCOPES:
        raise MemoryInputError(
            "scope", f"scope must be one of {', '.join(MEMORY_SCOPES)}, not {scope!r}"
        )
    if scope != "session":
        if session_id is not None:
            raise MemoryInputError(
                "session_id", f"session_id is only for scope session (this item is {scope})"
            )
        return cast(MemoryScope, scope), None
    if session_id is None:
        raise MemoryInputError("session_id", "scope session needs a session_id")
    if not is_ulid(session_id) or reader.stream_next_seq(f"session/{session_id}") == 0:
        raise MemoryInputError("session_id", f"no session {session_id[:40]!r}")
    return "session", session_id


def check_expiry(expires_at_ms: int | None, now_ms: int) -> int | None:
    if expires_at_ms is not None and expires_at_ms <= now_ms:
        raise MemoryInputError("expires_at", "expires_at is not in the future")
    return expires_at_ms


class CheckedWrite(msgspec.Struct, frozen=True, kw_only=True):
    """A write's input once checked (tags stripped, repeats dropped)."""

    text: str
    tags: tuple[str, ...]
    scope: MemoryScope
    session_id: str | None
    expires_at_ms: int | None


def check_write(
    reader: JournalReadPort,
    text: str,
    *,
    tags: tuple[str, ...] | list[str] = (),
    scope: str = "principal",
    session_id: str | None = None,
    expires_at_ms: int | None = None,
    now_ms: int | None = None,
) -> CheckedWrite:
    """The write's input if every rule of this module holds, else :class:`MemoryInputError`
    naming the first field that breaks one (checked in the order text, tags, scope and
    session_id, expires_at)."""
    now = _now_ms() if now_ms is None else now_ms
    checked_text = check_text(text)
    checked_tags = check_tags(tags)
    checked_scope, checked_session = check_scope(reader, scope, session_id)
    return CheckedWrite(
        text=checked_text,
        tags=checked_tags,
        scope=checked_scope,
        session_id=checked_session,
        expires_at_ms=check_expiry(expires_at_ms, now),
    )


def write_item(
    journal: JournalPort,
    text: str,
    *,
    principal: str,
    tags: tuple[str, ...] | list[str] = (),
    scope: str = "principal",
    session_id: str | None = None,
    expires_at_ms: int | None = None,
    source: MemorySource = "manual",
    causation_id: str | None = None,
    now_ms: int | None = None,
    item_id: str | None = None,
) -> tuple[str, ItemState]:
    """Check a new item, append its ``memory.item_written`` as ``principal``, and return its
    id and its state (folded from the append). Raises :class:`MemoryInputError` naming the
    field.

    ``item_id``: the new item's id when the caller needs it before the write (an authorization
    that names the resource); a fresh :func:`events.new_id` by default. The item's stream must
    be new (``expected_seq=0``): an existing item is never overwritten."""
    new = item_id or new_id()
    stream, event = _written(
        journal,
        new,
        text,
        tags=tags,
        scope=scope,
        session_id=session_id,
        expires_at_ms=expires_at_ms,
        source=source,
        now_ms=now_ms,
    )
    result = journal.append(
        stream, [event], expected_seq=0, principal=principal, causation_id=causation_id
    )
    # The event as the journal stored it (redacted): what a reader folds.
    state = initial(Recorded(result.events[0], stream, result.recorded_at_ms, principal))
    assert state is not None
    return new, state


def submit_item(
    journal: JournalPort,
    item_id: str,
    text: str,
    *,
    principal: str,
    source: MemorySource,
    causation_id: str | None = None,
) -> Callable[[], ItemState]:
    """:func:`write_item` of a new item ``item_id`` (scope ``principal``), queued without
    waiting: the returned wait returns the item once its append committed (raising
    ``ConcurrencyConflict`` when the item was written before). An append submitted right after
    this call commits with it or after it, never before. Bad input raises
    :class:`MemoryInputError` at once, before anything is queued."""
    stream, event = _written(journal, item_id, text, source=source)
    future = journal.submit(
        stream, [event], expected_seq=0, principal=principal, causation_id=causation_id
    )

    def wait() -> ItemState:
        result = future.result()
        # The event as the journal stored it (redacted): what a reader folds.
        state = initial(Recorded(result.events[0], stream, result.recorded_at_ms, principal))
        assert state is not None
        return state

    return wait


def _written(
    journal: JournalReadPort,
    item_id: str,
    text: str,
    *,
    tags: tuple[str, ...] | list[str] = (),
    scope: str = "principal",
    session_id: str | None = None,
    expires_at_ms: int | None = None,
    source: MemorySource,
    now_ms: int | None = None,
) -> tuple[str, MemoryItemWritten]:
    """The stream and the ``memory.item_written`` of a new item, its input checked."""
    checked = check_write(
        journal,
        text,
        tags=tags,
        scope=scope,
        session_id=session_id,
        expires_at_ms=expires_at_ms,
        now_ms=now_ms,
    )
    event = MemoryItemWritten(
        item_id=item_id,
        text=checked.text,
        source=source,
        tags=checked.tags,
        scope=checked.scope,
        session_id=checked.session_id,
        expires_at_ms=checked.expires_at_ms,
    )
    return memory_stream(item_id), event


def item_state(reader: JournalReadPort, item_id: str) -> ItemState | None:
    """The item as its stream says it is now; None when no item has this id."""
    if not is_ulid(item_id):
        return None
    from actors.memory import items as memory  # this module: the aggregate the fold takes

    return fold(memory, recorded(reader.read_stream(memory_stream(item_id))))


def delete_item(
    journal: JournalPort,
    item_id: str,
    *,
    principal: str,
    reason: str = "",
    causation_id: str | None = None,
) -> ItemState:
    """Append ``memory.item_deleted`` as ``principal``; the item's state after it. Raises
    :class:`UnknownMemoryItem`, :class:`MemoryItemAlreadyDeleted` or :class:`MemoryInputError`
    (``reason``)."""
    if len(reason) > REASON_MAX_CHARS:
        raise MemoryInputError(
            "reason", f"reason is {len(reason):,} characters; the cap is {REASON_MAX_CHARS:,}"
        )
    state = item_state(journal, item_id)
    event = deletion(state, item_id, reason)
    assert state is not None
    stream = memory_stream(item_id)
    try:
        result = journal.append(
            stream,
            [event],
            expected_seq=state.next_seq,
            principal=principal,
            causation_id=causation_id,
        )
    except ConcurrencyConflict as exc:  # another writer got there first: it deleted it
        raise MemoryItemAlreadyDeleted(f"memory item {item_id} is already deleted") from exc
    return apply(state, Recorded(result.events[0], stream, result.recorded_at_ms, principal))


def _at_once() -> None:
    """No catch-up to wait for (a memory not bound to a node's projector)."""


class RunMemory:
    """:class:`actors.services.MemoryPort` over the memory view, each read after the views'
    start-up catch-up (``caught_up``)."""

    def __init__(self, view: MemoryView, caught_up: Callable[[], object]) -> None:
        self._view = view
        self._caught_up = caught_up

    def search(
        self, query: str, k: int = 5, *, principal: str | None = None, session_id: str | None = None
    ) -> list[MemoryHit]:
        self._caught_up()
        return self._view.search(query, k, principal=principal, session_id=session_id)

    def get(self, item_id: str) -> MemoryItem | None:
        self._caught_up()
        return self._view.get(item_id)


class NodeMemory:
    """A node's memory: the view its surfaces read (``view``) and the journal they write to.

    The journal is bound after it opens (:meth:`bind`): the tool catalog, which holds this
    object as the memory tools' :class:`tools.MemoryStore`, is built before the journal is
    opened, so that a bad tool configuration is refused before the journal is touched."""

    def __init__(self, view: MemoryView, journal: JournalPort | None = None) -> None:
        self.view = view
        self._journal = journal
        self._caught_up: Callable[[], object] = _at_once

    def bind(self, journal: JournalPort, caught_up: Callable[[], object] = _at_once) -> None:
        """``caught_up`` returns once the views include what the journal held when the node
        started: what runs read (the memory tool, injection through :meth:`for_runs`) waits
        for it, so an item written before a restart is never missed while the views catch
        up. The API's reads do not wait (they say how far behind they are)."""
        self._journal = journal
        self._caught_up = caught_up

    def for_runs(self) -> RunMemory:
        """The view as runs search it for injection (after the start-up catch-up)."""
        return RunMemory(self.view, self._caught_up)

    @property
    def journal(self) -> JournalPort:
        if self._journal is None:
            raise RuntimeError("the node's memory is not bound to a journal yet")
        return self._journal

    # --- tools.MemoryStore ---------------------------------------------------------------------

    def search(
        self, query: str, k: int, *, principal: str | None, session_id: str | None
    ) -> list[FoundItem]:
        """What a run acting for ``principal`` in ``session_id`` may see that matches."""
        self._caught_up()
        return [
            FoundItem(
                item_id=h.item.item_id,
                text=h.item.text,
                tags=h.item.tags,
                scope=h.item.scope,
                lexical=h.lexical,
                vector=h.vector,
                recency=h.recency,
                final=h.final,
            )
            for h in self.view.search(query, k, principal=principal, session_id=session_id)
        ]

    def write(
        self,
        text: str,
        *,
        tags: tuple[str, ...],
        scope: str,
        expires_in_s: int | None,
        principal: str,
        session_id: str | None,
        causation_id: str | None,
    ) -> str:
        """A write by a tool call (source ``learned``: the agent chose to keep it)."""
        now = _now_ms()
        item_id, _ = write_item(
            self.journal,
            text,
            principal=principal,
            tags=tags,
            scope=scope,
            session_id=session_id,
            expires_at_ms=None if expires_in_s is None else now + expires_in_s * 1000,
            source="learned",
            causation_id=causation_id,
            now_ms=now,
        )
        return item_id

    def refusal(self, text: str, tags: tuple[str, ...]) -> str | None:
        """Why :meth:`write` would refuse this text and these tags, or None."""
        try:
            check_text(text)
            check_tags(tags)
        except MemoryInputError as exc:
            return exc.message
        return None

    def close(self) -> None:
        self.view.close()
