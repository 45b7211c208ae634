"""A stored event decoded to the catalog class a test expects, so its fields type-check."""

from __future__ import annotations

from typing import TypeVar

from events import Event, StoredEvent

E = TypeVar("E", bound=Event)


def decoded(stored: StoredEvent, cls: type[E]) -> E:
    """``stored.decode()``, failing the test if it is not a ``cls``."""
    event = stored.decode()
    assert isinstance(event, cls), f"{stored.kind} at {stored.position} is not a {cls.__name__}"
    return event
