"""Helpers for the memory tests: write ``memory.*`` events through the real journal and fold
them with the real projector into a real views.db (FTS5 and sqlite-vec included)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from events import AppendResult, Journal
from events.catalog import MemoryItemDeleted, MemoryItemWritten
from projections import Embedder, Projector, all_projections


def write(
    journal: Journal,
    item_id: str,
    text: str,
    *,
    principal: str = "operator",
    **fields: Any,
) -> AppendResult:
    """Append a ``memory.item_written`` at the end of the item's stream."""
    stream = f"memory/{item_id}"
    return journal.append(
        stream,
        [MemoryItemWritten(item_id=item_id, text=text, **fields)],
        expected_seq=journal.stream_next_seq(stream),
        principal=principal,
    )


def delete(
    journal: Journal, item_id: str, reason: str = "", principal: str = "operator"
) -> AppendResult:
    """Append a ``memory.item_deleted`` at the end of the item's stream."""
    stream = f"memory/{item_id}"
    return journal.append(
        stream,
        [MemoryItemDeleted(item_id=item_id, reason=reason)],
        expected_seq=journal.stream_next_seq(stream),
        principal=principal,
    )


def fold(
    journal: Journal, views: Path, embedder: Embedder | None = None, batch: int = 5000
) -> dict[str, int]:
    """Bring ``views`` up to the journal's head with the real projector; returns its
    checkpoints."""
    projector = Projector(journal, views, all_projections(embedder), batch=batch)
    try:
        projector.catch_up()
        return projector.checkpoints()
    finally:
        projector.close()
