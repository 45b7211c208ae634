"""The views as the HTTP API reads them: its own :class:`projections.Views` connections, plus a
fast path for the tape.

A tape entry's event is stored as JSON text; :meth:`ApiViews.tape_raw` hands it on as
``msgspec.Raw`` instead of decoding it into a dict and encoding it again (the round trip was
most of a tape request's cost). The rows are the same as :meth:`Views.tape`'s, field for field;
the tests compare the two shapes through the API (``test_http_runs``, ``test_http_openapi``).
Suggested upstream: ``projections.Views.tape_raw`` next to ``tape``.
"""

from __future__ import annotations

from typing import Any

import msgspec

from projections import Views


class RawTapeEntry(msgspec.Struct, frozen=True, kw_only=True):
    """A :class:`projections.TapeEntry` whose ``event`` is the stored JSON, not decoded."""

    run_id: str
    tape_seq: int
    position: int
    kind: str
    stream: str
    recorded_at_ms: int
    event: msgspec.Raw


_TAPE = (
    "SELECT run_id, tape_seq, position, kind, stream, recorded_at_ms, entry FROM tape"
    " WHERE run_id = ? AND tape_seq > ? ORDER BY tape_seq LIMIT ?"
)


class ApiViews(Views):
    """:class:`projections.Views` with :meth:`tape_raw`."""

    def tape_raw(self, run_id: str, after_seq: int = -1, limit: int = 1000) -> list[RawTapeEntry]:
        """The run's entries with ``tape_seq > after_seq``, in order, events as stored JSON."""
        with self._borrow() as conn:
            rows: list[tuple[Any, ...]] = conn.execute(_TAPE, (run_id, after_seq, limit)).fetchall()
        return [
            RawTapeEntry(
                run_id=run_id_,
                tape_seq=tape_seq,
                position=position,
                kind=kind,
                stream=stream,
                recorded_at_ms=recorded_at_ms,
                event=msgspec.Raw(entry),
            )
            for run_id_, tape_seq, position, kind, stream, recorded_at_ms, entry in rows
        ]
