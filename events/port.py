"""The journal port: what the rest of reel may ask of a journal, whatever stores it.

Two structural protocols. :class:`JournalReadPort` is what a reader needs (projections, replay,
recovery, the CLI's offline commands); :class:`JournalPort` adds appending, the commit
subscription and checkpoint signing, which only the process that owns the journal for writing
has. The SQLite :class:`events.Journal` and :class:`events.JournalReader` implement them, and
so do the PostgreSQL ``events.postgres`` classes (mypy checks this in ``events/__init__.py`` and
``events/postgres/journal.py``);
both pass the same conformance suite (``tests/events/journal_conformance.py``).

Left out on purpose, because only ``reel journal verify|export`` use them and they expose how
SQLite stores rows rather than what a journal means: ``scan`` (raw rows with the stored
``payload_sha256`` column, in keyed batches), ``prev_hash_at`` and ``position_of_hash`` (probes
into possibly tampered rows, to name a fault), ``count`` (the row count, which differs from the
head only in a damaged file) and ``append_latency`` (the SQLite writer's own metric, read with
``getattr`` by ``/metrics``). An auditor of another backend needs that backend's own verifier.

The contract every implementation keeps (the conformance suite checks each point):

- **Positions** are global, dense from 1 and in commit order; the head of an empty journal is
  ``Head(0, GENESIS)``. ``stream_seq`` is dense from 0 within each stream.
- **The chain**: every event's ``prev_hash`` is the ``hash`` of the event before it (``GENESIS``
  for position 1) and ``hash`` is computed exactly as ``docs/journal-format.md`` says
  (:func:`events.chain.row_hash`), so one verifier checks every backend.
- **Appends are atomic**: one append's events get consecutive positions and seqs and are all
  written or none. An append returns only after the transaction holding its rows has committed;
  from then on every read (of this process or another) sees them.
- **Optimistic concurrency**: an append states ``expected_seq``, the ``stream_seq`` its first
  event must get (the stream's current length). If it is not the stream's next seq the append
  raises :class:`events.ConcurrencyConflict` and writes nothing. ``None`` skips the check, for
  streams with no competing writer.
- **Idempotency**: an append whose ``idempotency_key`` was already committed writes nothing and
  returns the original :class:`events.AppendResult` with ``duplicate=True``, also after the
  journal is closed and opened again.
- **Subscription**: listeners are called with the committed head after each commit, and
  ``wait_for`` wakes when a commit moves the head past the position it waits on.
- **Checkpoints are rows**: a signed checkpoint is a ``journal.checkpoint`` row on the
  ``journal`` stream, right after the row it covers, naming the checkpoint row before it
  (docs/journal-format.md section 6). Only the journal writes that stream or that kind (an
  append of either is :class:`events.AppendRejected`); readers see the rows like any others
  (projections ignore them: they carry no correlation id and no view folds the kind).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import Future
from typing import Literal, Protocol, runtime_checkable

from events.catalog import Event
from events.checkpoint import Checkpoint, NodeKey
from events.envelope import AppendResult, Head, StoredEvent
from events.errors import JournalTampered
from events.witness import Witness

Listener = Callable[[int], None]
"""Called with the committed head position after a commit."""


@runtime_checkable
class JournalReadPort(Protocol):
    """Reading a journal: by position, stream, correlation or kind, plus its head and checkpoints.

    Safe to call from many threads. Every read returns committed events only, as
    :class:`events.StoredEvent` exactly as stored (redacted payload, hashes included)."""

    def head(self) -> Head:
        """The last committed position and its hash; ``Head(0, GENESIS)`` when empty."""
        ...

    def read(self, after_position: int = 0, limit: int = 1000) -> list[StoredEvent]:
        """Up to ``limit`` events with position greater than ``after_position``, in position
        order. Positions are dense, so paging with the last position read misses nothing."""
        ...

    def read_stream(
        self, stream: str, after_seq: int = -1, limit: int | None = None
    ) -> list[StoredEvent]:
        """The events of ``stream`` with ``stream_seq > after_seq`` in seq order (at most
        ``limit``; all when ``None``). An unknown stream has none."""
        ...

    def read_correlated(self, correlation_id: str, after_position: int = 0) -> list[StoredEvent]:
        """The events whose ``correlation_id`` is the given one (a run's tape, over its session,
        run and tool streams) with position greater than ``after_position``, in position order.
        Must not scan the whole journal: recovery and tape followers call it per run."""
        ...

    def first_events(self, prefix: str) -> list[StoredEvent]:
        """The first event (``stream_seq`` 0) of every stream whose name starts with ``prefix``,
        in position order (e.g. every ``session.created`` for ``"session/"``)."""
        ...

    def events_of_kinds(self, kinds: tuple[str, ...], after_position: int = 0) -> list[StoredEvent]:
        """Every event of one of ``kinds`` with position greater than ``after_position``, in
        position order, through an index on kind: for start-up state and rare kinds."""
        ...

    def open_events(
        self, kind: str, ended_by: tuple[str, ...], key: Literal["stream", "correlation_id"]
    ) -> list[StoredEvent]:
        """Every event of ``kind`` whose ``key`` no event of the kinds ``ended_by`` shares, in
        position order, through an index on kind (what is still open at start)."""
        ...

    def stream_next_seq(self, stream: str) -> int:
        """The ``stream_seq`` the stream's next event would get now (0 for a new stream).

        Only a snapshot: for a writer that owns the stream (or retries on conflict) to learn
        where it starts; another writer may move it before the caller appends."""
        ...

    def checkpoints(self) -> list[Checkpoint]:
        """Every signed checkpoint (the ``journal.checkpoint`` rows, decoded), by position."""
        ...

    def close(self) -> None:
        """Release what the reader holds; later calls raise :class:`events.JournalClosed`."""
        ...


@runtime_checkable
class JournalPort(JournalReadPort, Protocol):
    """A journal opened for writing by this process: appends, subscription, checkpoints.

    Exactly one process holds a journal for writing (others get
    :class:`events.JournalLocked`); within it, every stream has one writing actor."""

    @property
    def node_key(self) -> NodeKey | None:
        """The key that signs checkpoints (its public half is published); ``None`` when the
        journal signs none."""
        ...

    def submit(
        self,
        stream: str,
        events: Sequence[Event],
        *,
        expected_seq: int | None,
        principal: str = "system",
        correlation_id: str | None = None,
        causation_id: str | None = None,
        idempotency_key: str | None = None,
        home: str | None = None,
    ) -> Future[AppendResult]:
        """Queue an append without waiting: the future resolves after the commit, with the same
        result or error :meth:`append` gives. Events are redacted before they are stored.

        Raises :class:`events.AppendRejected` at once for a request that can never be written
        (no events, an empty stream, a negative ``expected_seq``, something not an event, a
        payload that cannot be encoded or is over the size limit)."""
        ...

    def append(
        self,
        stream: str,
        events: Sequence[Event],
        *,
        expected_seq: int | None,
        principal: str = "system",
        correlation_id: str | None = None,
        causation_id: str | None = None,
        idempotency_key: str | None = None,
        home: str | None = None,
    ) -> AppendResult:
        """Append ``events`` to ``stream`` atomically and return where they landed, only after
        the commit. Raises :class:`events.ConcurrencyConflict` (nothing written) when
        ``expected_seq`` is not the stream's next seq; returns the original result with
        ``duplicate=True`` (nothing written) for an ``idempotency_key`` already committed. The
        result's ``events`` are the events as stored (redacted): a writer folds those and never
        redacts an event itself.

        ``home``: what a stream this append creates is placed by (a session's streams name the
        session's id, so they live together: :mod:`events.postgres.homes`); ``None`` places it
        by its name. It changes nothing for a stream that exists, nor for a one-shard
        journal."""
        ...

    def checkpoint(self) -> Checkpoint | None:
        """Sign the head now, after everything submitted before this call has committed, and
        append the checkpoint row (the new head). ``None`` when there is no node key or the
        head is already a checkpoint (an empty journal has nothing to sign)."""
        ...

    @property
    def committed_position(self) -> int:
        """The last position known committed; cheap (no I/O), for freshness checks."""
        ...

    def wait_for(self, after_position: int, timeout: float | None = None) -> int:
        """Block until a commit moves the head past ``after_position``, the timeout passes or
        the journal closes; returns the committed head (at once when already past)."""
        ...

    def listen(self, listener: Listener) -> Callable[[], None]:
        """Call ``listener(head_position)`` after each commit that wrote events, in commit order,
        on the journal's own thread: it must return quickly (hand off to a queue or a loop), and
        an exception it raises is ignored. Returns an idempotent unsubscribe."""
        ...

    def close(self, *, checkpoint: bool = True) -> None:
        """Finish what was submitted, sign a final checkpoint (unless told not to) and release
        the journal; wakes ``wait_for`` callers. Idempotent; later appends raise
        :class:`events.JournalClosed`."""
        ...


@runtime_checkable
class NodeJournal(JournalPort, Protocol):
    """What ``reel node`` needs of the journal it writes beyond the port: where it names the
    journal, its witness and how its verification stands (SQLite :class:`events.Journal`;
    the PostgreSQL journal has no witness yet and is verified before it opens)."""

    @property
    def path(self) -> object:
        """What messages name the journal by (a file, or a database without its password)."""
        ...

    @property
    def witness(self) -> Witness | None: ...

    @property
    def verified(self) -> bool: ...

    @property
    def tampered(self) -> JournalTampered | None: ...

    def wait_verified(self) -> None: ...

    def start_verifying(self) -> None:
        """Let a full verification held back until the node serves begin."""
        ...

    def stop_verifying(self) -> None: ...
