"""The journal: one committer at a time, group commit, optimistic concurrency, idempotency,
checkpoints.

Appends from any thread are queued; whoever holds the commit lock drains the queue and commits
everything it drained in one transaction (group commit), then settles each request. A blocking
:meth:`Journal.append` that finds the lock free commits in its own thread (after whatever was
queued before it), without waking the writer thread or making a future, instead of waiting for
the writer to be scheduled and to hand the outcome back: one writer's append costs its commit
and little else. Every other request wakes the writer thread. An append therefore returns only
after the transaction holding its rows has committed (durable with ``synchronous=FULL``, the
default). Per request, either every event is written or none: a conflicting ``expected_seq`` or
a bad request fails that request alone.

Checkpoints are rows too: when one is due (every N events, every T seconds, on request, at
close) the writer signs the head it just built and appends a ``journal.checkpoint`` row after
it, in the same transaction, then hands the signed note to the witness (if any) without waiting.

Opening a journal for writing first checks it (:func:`events.sqlite.verify.verify_recent`: the chain
from the last checkpoint, every checkpoint, the witness's checkpoints) and raises
:class:`JournalTampered` rather than sign anything over a head it cannot vouch for.

Subscribers are woken after each commit (:meth:`Journal.wait_for`, :meth:`Journal.listen`).
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from pathlib import Path

import apsw
from msgspec.structs import replace

from events.catalog import Event, JournalCheckpoint, kind_of
from events.chain import (
    identity_bytes,
    kind_fields,
    link,
    payload_digest,
    recorded_at,
    request_fields,
    row_hash,
)
from events.checkpoint import CHECKPOINT_KIND, CHECKPOINT_STREAM, Checkpoint, NodeKey
from events.codec import encode
from events.envelope import AppendResult, Head
from events.errors import (
    AppendRejected,
    ConcurrencyConflict,
    JournalClosed,
    JournalError,
    JournalTampered,
    VerifyStopped,
)
from events.ids import UlidGenerator
from events.note import CheckpointNote
from events.redaction.redact import redact_event
from events.sqlite.lock import WriterLock
from events.sqlite.reader import JournalReader
from events.sqlite.schema import SYNCHRONOUS_MODES, connect
from events.sqlite.verify import verify, verify_recent
from events.stats import LatencyHistogram
from events.witness import Witness

_INSERT = (
    "INSERT INTO events(position, event_id, stream, stream_seq, kind, version, recorded_at_ms,"
    " principal, correlation_id, causation_id, payload, payload_sha256, prev_hash, hash)"
    " VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?)"
)

MAX_PAYLOAD_BYTES = 1 << 20
"""The default cap on one event's stored payload (after redaction); a bigger event is refused
with `AppendRejected`. Writers that must fit their data under it (a tool's result) derive
their own budget from this name, never from a second constant."""

STREAM_SEQS = 4_096
"""How many streams' next ``stream_seq`` the writer remembers (forgotten all at once when full;
a forgotten stream costs one indexed ``max(stream_seq)`` at its next append). Bounded because
a node's streams are not: every session and every run has its own, and an idle session should
cost the writer nothing."""

Listener = Callable[[int], None]


class _Append:
    """One append request. Its outcome is kept here; a :class:`Future` is made only for a caller
    that waits for another thread's commit (:meth:`Journal.submit`, an append that found a
    commit under way): an append committed by its own thread never needs one."""

    __slots__ = (
        "_future",
        "_started",
        "causation_id",
        "correlation_id",
        "events",
        "expected_seq",
        "idempotency_key",
        "outcome",
        "payloads",
        "principal",
        "stream",
        "submitted",
    )

    def __init__(
        self,
        stream: str,
        payloads: list[tuple[str, int, bytes]],
        expected_seq: int | None,
        principal: str,
        correlation_id: str | None,
        causation_id: str | None,
        idempotency_key: str | None,
        events: tuple[Event, ...] = (),
    ) -> None:
        self.stream = stream
        self.payloads = payloads
        self.events = events
        """The events as they are stored (redacted): what the result hands back."""
        self.expected_seq = expected_seq
        self.principal = principal
        self.correlation_id = correlation_id
        self.causation_id = causation_id
        self.idempotency_key = idempotency_key
        self._future: Future[AppendResult] | None = None
        self._started: bool | None = None
        self.outcome: AppendResult | BaseException | None = None
        """Set once, by whoever committed (or failed) the request."""
        self.submitted = time.perf_counter()

    @property
    def future(self) -> Future[AppendResult]:
        """The future a waiting caller gets; made by the caller before the request is queued."""
        if self._future is None:
            self._future = Future()
        return self._future

    def start(self) -> bool:
        """Whether to write it (False: its future was cancelled before the commit began). Asked
        again when a commit is made over (:meth:`Journal._commit`), it answers the same."""
        if self._started is None:
            self._started = self._future is None or self._future.set_running_or_notify_cancel()
        return self._started

    def settle(self, outcome: AppendResult | BaseException) -> None:
        """Record the outcome (once) and resolve the future, if any and not cancelled. A result
        holds the request's :attr:`events` already (the commit made it with them)."""
        if self.outcome is not None:
            return
        self.outcome = outcome
        if self._future is not None and not self._future.done():
            if isinstance(outcome, BaseException):
                self._future.set_exception(outcome)
            else:
                self._future.set_result(outcome)


def _check_text(name: str, value: str | None) -> None:
    """Refuse an envelope field the hash input cannot encode (not text, or not UTF-8)."""
    if value is None:
        return
    if not isinstance(value, str):
        raise AppendRejected(f"{name} must be a string, got {type(value).__name__}")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise AppendRejected(
            f"{name} is not valid UTF-8 text (it holds a lone surrogate)"
        ) from None


_KINDS: dict[type[Event], str] = {}
"""Each event class's kind, as :func:`prepare` looked it up (one dict lookup, not a call)."""


def prepare(
    stream: str,
    events: Sequence[Event],
    *,
    expected_seq: int | None,
    principal: str,
    correlation_id: str | None,
    causation_id: str | None,
    idempotency_key: str | None,
    max_payload_bytes: int,
) -> _Append:
    """Check, redact and encode one append request, in the caller's thread: every backend's
    writer takes what this returns. Raises :class:`AppendRejected` for a request that can never
    be written."""
    if not stream:
        raise AppendRejected("stream must be a non-empty string")
    if stream == CHECKPOINT_STREAM:
        raise AppendRejected(f"stream {CHECKPOINT_STREAM!r} is the journal's own (checkpoints)")
    if not events:
        raise AppendRejected("an append needs at least one event")
    if expected_seq is not None and expected_seq < 0:
        raise AppendRejected(f"expected_seq must be >= 0, got {expected_seq}")
    # Checked here, not in the writer thread, where a bad field would fail the whole batch.
    # Usually all of them are ASCII text, told by one test of them joined; otherwise each
    # field is checked on its own, for the error that names it.
    try:
        joined: object = (
            stream
            + principal
            + ("" if correlation_id is None else correlation_id)
            + ("" if causation_id is None else causation_id)
            + ("" if idempotency_key is None else idempotency_key)
        )
    except TypeError:
        joined = None
    if type(joined) is not str or not joined.isascii():
        _check_text("stream", stream)
        _check_text("principal", principal)
        _check_text("correlation_id", correlation_id)
        _check_text("causation_id", causation_id)
        _check_text("idempotency_key", idempotency_key)
    payloads: list[tuple[str, int, bytes]] = []
    stored: list[Event] = []
    for event in events:
        if not isinstance(event, Event):
            raise AppendRejected(f"not an event: {type(event).__name__}")
        if isinstance(event, JournalCheckpoint):
            raise AppendRejected("journal.checkpoint rows are written by the journal itself")
        cls = type(event)
        kind = _KINDS.get(cls)
        if kind is None:
            kind = _KINDS[cls] = kind_of(cls)
        try:
            clean = redact_event(event)
            payload = encode(clean)
        except (TypeError, ValueError) as exc:  # UnicodeEncodeError is a ValueError
            raise AppendRejected(f"{kind} cannot be encoded: {exc}") from None
        if len(payload) > max_payload_bytes:
            raise AppendRejected(
                f"{kind} payload is {len(payload)} bytes; the limit is {max_payload_bytes}"
            )
        payloads.append((kind, event.version, payload))
        stored.append(clean)
    return _Append(
        stream,
        payloads,
        expected_seq,
        principal,
        correlation_id,
        causation_id,
        idempotency_key,
        tuple(stored),
    )


AppendRequest = _Append
"""What :func:`prepare` returns and every backend's writer thread takes."""


class _CheckpointRequest:
    __slots__ = ("future",)

    def __init__(self) -> None:
        self.future: Future[Checkpoint | None] = Future()


class Journal(JournalReader):
    """A journal opened for writing by this process (it holds the writer lock)."""

    def __init__(
        self,
        path: Path,
        *,
        node_key: NodeKey | None = None,
        witness: Witness | None = None,
        on_tampered: Callable[[JournalTampered], None] | None = None,
        walk_when_told: bool = False,
        synchronous: str = "FULL",
        checkpoint_every_events: int = 10_000,
        checkpoint_every_s: float = 60.0,
        max_payload_bytes: int = MAX_PAYLOAD_BYTES,
        max_batch_events: int = 4096,
    ) -> None:
        if synchronous.upper() not in SYNCHRONOUS_MODES:
            raise ValueError(f"synchronous must be one of {', '.join(SYNCHRONOUS_MODES)}")
        if witness is not None and node_key is None:
            raise ValueError("a witness needs a node key (it records signed checkpoints)")
        self._lock = WriterLock(path.with_name(path.name + ".lock"))
        self._lock.acquire(f"journal {path}")
        try:
            self._wconn = connect(path, writable=True)
            self._wconn.execute("PRAGMA journal_mode=WAL")
            self._wconn.execute(f"PRAGMA synchronous={synchronous.upper()}")
            self._wcur = self._wconn.cursor()
            """The commit's one cursor (used under ``_commit_lock``): ``Connection.execute``
            makes a cursor per call, three a commit (~0.8 us each)."""
            super().__init__(path)
            notes = self._check_on_open(node_key, witness)
        except BaseException:
            with contextlib.suppress(Exception):
                super().close()
                self._wconn.close()
            self._lock.release()
            raise
        self.node_key = node_key
        self.witness = witness
        """Where every signed checkpoint is also appended (``None``: no witness)."""
        self.max_payload_bytes = max_payload_bytes
        self._checkpoint_every_events = checkpoint_every_events
        self._checkpoint_every_s = checkpoint_every_s
        self._max_batch_events = max_batch_events
        self._ids = UlidGenerator()
        self.append_latency = LatencyHistogram()
        """Submit-to-commit time of every append (``/metrics``)."""
        self._pending: deque[_Append | _CheckpointRequest] = deque()
        """Requests not yet drained, in submit order (under ``_submit_guard``)."""
        self._commit_lock = threading.Lock()
        """Held by the one thread draining ``_pending`` and committing (the writer thread, or
        an appender that found it free): commits are serial and in queue order."""
        self._stopping = False
        self._stream_next: dict[str, int] = {}
        head = self._load_head()
        self._head_position = head.position
        self._head_hash = head.hash
        last = self.last_checkpoint()
        self._last_checkpoint_row = last.row_position if last is not None else 0
        """The position of the last checkpoint row (0 when none): the previous one a new
        checkpoint names."""
        self._checkpoint_seq = self.stream_next_seq(CHECKPOINT_STREAM)
        self._last_checkpoint_time = time.monotonic()
        self._committed = threading.Condition()
        self._committed_position = head.position
        self._listeners: tuple[Listener, ...] = ()
        """Replaced, never changed in place: a commit calls the ones there when it ended."""
        self._waiting = 0
        """Threads in :meth:`wait_for` (under ``_committed``): a commit notifies only if any."""
        self._accepting = True
        self._submit_guard = threading.Lock()
        self._wake = threading.Condition(self._submit_guard)
        """Wakes the writer thread: requests are pending."""
        self._verified = threading.Event()
        """Set once every row has been verified (at once without ``on_tampered``): until then
        no checkpoint is signed, so a signature never vouches for rows nobody checked."""
        self.tampered: JournalTampered | None = None
        """What the full verification found, if anything (nothing is signed after it)."""
        self._stop_verifying = threading.Event()
        self._verify_ended = threading.Event()
        """Set when the full verification ended: passed, failed or stopped (by close)."""
        self._may_walk = threading.Event()
        """Set when the full verification may begin: at once, or (``walk_when_told``) at
        :meth:`start_verifying` or :meth:`stop_verifying`."""
        if not walk_when_told:
            self._may_walk.set()
        self._writer = threading.Thread(target=self._run, name="journal-writer", daemon=True)
        self._writer.start()
        if on_tampered is None:
            self._verified.set()
            self._verify_ended.set()
        else:
            threading.Thread(
                target=self._verify_everything,
                args=(notes, on_tampered),
                name="journal-verify",
                daemon=True,
            ).start()

    # --- appending ----------------------------------------------------------------------

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
        """Queue an append and return its future (resolved after commit).

        ``expected_seq`` is the ``stream_seq`` the first event must get: the stream's current
        length. ``None`` skips the check (only for streams with no competing writer).
        Events are redacted and encoded here, in the caller's thread (:func:`prepare`).
        """
        request = prepare(
            stream,
            events,
            expected_seq=expected_seq,
            principal=principal,
            correlation_id=correlation_id,
            causation_id=causation_id,
            idempotency_key=idempotency_key,
            max_payload_bytes=self.max_payload_bytes,
        )
        future = request.future  # made before it is queued: the writer may settle it at once
        self._enqueue(request)
        return future

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
        """Append and wait for the commit. Raises :class:`ConcurrencyConflict` when the stream's
        next seq is not ``expected_seq`` (nothing written).

        Checked, redacted and encoded as :meth:`submit` does it; then, when no commit is under
        way, this thread commits it itself (after whatever was queued before it), without
        waking the writer thread or making a future: a lone writer's append costs its commit and
        no thread hand-off. Otherwise it is queued for the writer thread, as :meth:`submit`
        queues it, and this waits for the commit under way and the next."""
        request = prepare(
            stream,
            events,
            expected_seq=expected_seq,
            principal=principal,
            correlation_id=correlation_id,
            causation_id=causation_id,
            idempotency_key=idempotency_key,
            max_payload_bytes=self.max_payload_bytes,
        )
        if not self._commit_lock.acquire(blocking=False):
            future = request.future
            self._enqueue(request)
            return future.result()
        try:
            # Behind everything submitted before it, so commits stay in queue order; nobody
            # else drains while this thread holds the lock, and requests queued meanwhile woke
            # the writer thread, which commits them after this. (The condition's own lock,
            # taken as a lock: nothing is waited for or notified here.)
            with self._submit_guard:
                if not self._accepting:
                    raise JournalClosed(f"journal {self.path} is closed")
                alone = not self._pending
                if not alone:
                    self._pending.append(request)
            if alone:
                self._commit([request])
            while request.outcome is None and self._commit_pending():
                pass
        finally:
            self._commit_lock.release()
        outcome = request.outcome
        if isinstance(outcome, AppendResult):
            return outcome
        raise outcome or JournalError("append failed, nothing written: its commit did not end")

    def checkpoint(self) -> Checkpoint | None:
        """Sign the current head now (after everything queued before this call has committed).

        Returns ``None`` when there is no node key or the head is already checkpointed. While
        the full verification (``on_tampered``) runs this waits for it; after it found the
        journal tampered this raises :class:`JournalTampered`, after it was stopped
        :class:`VerifyStopped`: nothing is signed over rows nobody checked.
        """
        self.wait_verified()
        request = _CheckpointRequest()
        self._enqueue(request)
        return request.future.result()

    def wait_verified(self) -> None:
        """Return once every row has been verified, or raise :class:`JournalTampered` when
        that found the journal tampered. Without ``on_tampered`` it returns at once (only the
        start-up check ran); with it, a writer that must not append to a journal the full walk
        refuses (an offline command) waits here before its first append. Raises
        :class:`VerifyStopped` when :meth:`stop_verifying` cut the walk short."""
        self._verify_ended.wait()
        if self.tampered is not None:
            raise self.tampered
        if not self._verified.is_set():
            raise VerifyStopped(
                f"journal {self.path}: the full verification was stopped before it ended; "
                "nothing more is signed until a start whose verification ends"
            )

    @property
    def verified(self) -> bool:
        """True once the full verification passed (at once for a journal opened without
        ``on_tampered``); false while it runs, after it found tampering or was stopped."""
        return self._verified.is_set() and self.tampered is None

    def start_verifying(self) -> None:
        """Let the full verification begin, for a journal opened with ``walk_when_told``
        (idempotent; a no-op otherwise). ``reel node`` calls it once it serves: a walk of a
        million rows holds the interpreter most of the time, and started with the journal it
        slowed the rest of the start-up (recovery, the listeners) by half or more."""
        self._may_walk.set()

    def stop_verifying(self) -> None:
        """Stop the full verification if it still runs (within a few thousand rows), or
        before it began, and return once it ended. A walk cut short (or never begun) vouches
        for nothing: no checkpoint is signed on its word (a checkpoint covers every row before
        it), and the next start walks again. Called by :meth:`close`, so a stop never waits
        for the walk."""
        self._stop_verifying.set()
        self._may_walk.set()
        self._verify_ended.wait()

    def _enqueue(self, request: _Append | _CheckpointRequest) -> None:
        with self._wake:
            if not self._accepting:
                raise JournalClosed(f"journal {self.path} is closed")
            self._pending.append(request)
            self._wake.notify()

    # --- subscription -------------------------------------------------------------------

    @property
    def committed_position(self) -> int:
        """The last position known committed (cheap; no I/O)."""
        return self._committed_position

    def wait_for(self, after_position: int, timeout: float | None = None) -> int:
        """Block until a commit moves the head past ``after_position`` (or timeout); returns
        the committed head position."""
        with self._committed:
            self._waiting += 1
            try:
                self._committed.wait_for(
                    lambda: self._committed_position > after_position or not self._accepting,
                    timeout,
                )
            finally:
                self._waiting -= 1
            return self._committed_position

    def listen(self, listener: Listener) -> Callable[[], None]:
        """Call ``listener(head_position)`` after each commit, from the thread that committed
        (the writer thread, or an appender that committed its own append).

        Listeners must return quickly (hand off to a queue or an event loop). Returns a function
        that unsubscribes.
        """
        with self._committed:
            self._listeners = (*self._listeners, listener)

        def unsubscribe() -> None:
            with self._committed:
                if listener in self._listeners:
                    kept = list(self._listeners)
                    kept.remove(listener)
                    self._listeners = tuple(kept)

        return unsubscribe

    # --- lifecycle ----------------------------------------------------------------------

    def close(self, *, checkpoint: bool = True) -> None:
        """Stop the full verification if it still runs (:meth:`stop_verifying`), finish
        queued appends, sign a final checkpoint (unless told not to, or the verification did
        not end, or found the journal tampered), release the file and the writer lock.
        Idempotent."""
        self.stop_verifying()
        if not self._verified.is_set():
            checkpoint = False  # never sign rows nobody checked: the next start signs them
        with self._wake:
            was_open = self._accepting
            if was_open and checkpoint and self.node_key is not None and self.tampered is None:
                final = _CheckpointRequest()
                self._pending.append(final)
            self._accepting = False
            self._stopping = True
            self._wake.notify()
        if was_open:
            self._writer.join()
            with self._commit_lock:  # an appender committing in its own thread has finished
                pass  # and nothing is pending: no commit can start any more
            with self._committed:
                self._committed.notify_all()
            if self.witness is not None:
                self.witness.close()
            super().close()
            self._wconn.close()
            self._lock.release()

    def __enter__(self) -> Journal:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- the writer thread --------------------------------------------------------------

    def _load_head(self) -> Head:
        row = self._wconn.execute(
            "SELECT position, hash FROM events ORDER BY position DESC LIMIT 1"
        ).get
        if row is None:
            return Head(0, bytes(32))
        position, hash_ = row
        return Head(int(position), bytes(hash_))

    def _run(self) -> None:
        """The writer thread: commit what is pending whenever woken; after :meth:`close`,
        everything queued before it, then end."""
        while True:
            with self._wake:
                while not self._pending and not self._stopping:
                    self._wake.wait()
                if not self._pending:
                    return
            with self._commit_lock:
                while self._commit_pending():
                    pass

    def _commit_pending(self) -> bool:
        """Drain up to ``max_batch_events`` pending requests and commit them as one batch
        (hold ``_commit_lock``); False when nothing was pending."""
        batch: list[_Append | _CheckpointRequest] = []
        events = 0
        with self._submit_guard:  # _wake's lock
            pending = self._pending
            while pending and (not batch or events < self._max_batch_events):
                item = pending.popleft()
                batch.append(item)
                if isinstance(item, _Append):
                    events += len(item.payloads)
        if batch:
            self._commit(batch)
        return bool(batch)

    def _next_seq(self, stream: str) -> int:
        """The stream's next seq as committed: remembered, else read (a commit remembers what
        it wrote)."""
        seq = self._stream_next.get(stream)
        if seq is None:
            value = self._wconn.execute(
                "SELECT max(stream_seq) FROM events WHERE stream = ?", (stream,)
            ).get
            seq = 0 if value is None else int(value) + 1
        return seq

    def _commit(self, batch: list[_Append | _CheckpointRequest], *, careful: bool = False) -> None:
        """Write ``batch`` in one transaction and settle each request.

        A stream the writer does not remember is read from the file for its next seq, except
        when the request expects 0 (a new stream: every run and tool call has one): then no
        read is made and the stream's unique index ``(stream, stream_seq)`` is the check. If the
        stream did exist, the insert fails, nothing of the transaction is kept, and the batch
        is made over ``careful``ly (every unknown stream read), where that request gets its
        :class:`ConcurrencyConflict` and the others commit as they would have."""
        now_ms = time.time_ns() // 1_000_000
        at = recorded_at(now_ms)
        new_id = self._ids.new
        position = self._head_position
        prev = self._head_hash
        rows: list[tuple[object, ...]] = []
        keys: list[tuple[str, str, int, int, int, int]] = []
        outcomes: list[tuple[_Append, AppendResult | BaseException]] = []
        checkpoints: list[_CheckpointRequest] = []
        batch_next: dict[str, int] = {}
        batch_keys: dict[str, AppendResult] = {}
        assumed = False  # a stream was taken for new without a read (the index checks it)
        try:
            for request in batch:
                if isinstance(request, _CheckpointRequest):
                    checkpoints.append(request)
                    continue
                if not request.start():
                    continue
                key = request.idempotency_key
                if key is not None:
                    earlier = batch_keys.get(key) or self._idempotent(key)
                    if earlier is not None:
                        outcomes.append(
                            (request, replace(earlier, duplicate=True, events=request.events))
                        )
                        continue
                stream = request.stream
                seq = batch_next.get(stream)
                if seq is None:
                    if careful or request.expected_seq != 0 or stream in self._stream_next:
                        seq = self._next_seq(stream)
                    else:
                        seq = 0  # new, as the index will tell: see the docstring
                        assumed = True
                if request.expected_seq is not None and request.expected_seq != seq:
                    outcomes.append(
                        (request, ConcurrencyConflict(stream, request.expected_seq, seq))
                    )
                    continue
                first_position, first_seq = position + 1, seq
                ids: list[str] = []
                principal = request.principal
                correlation_id = request.correlation_id
                causation_id = request.causation_id
                stream_part, rest = request_fields(stream, principal, correlation_id, causation_id)
                for kind, version, payload in request.payloads:
                    position += 1
                    event_id = new_id(now_ms)
                    digest = link(
                        prev,
                        position,
                        event_id,
                        stream_part,
                        seq,
                        kind_fields(kind, version),
                        at,
                        rest,
                        payload,
                    )
                    rows.append(
                        (
                            position,
                            event_id,
                            stream,
                            seq,
                            kind,
                            version,
                            now_ms,
                            principal,
                            correlation_id,
                            causation_id,
                            payload,
                            payload_digest(payload),
                            prev,
                            digest,
                        )
                    )
                    ids.append(event_id)
                    prev = digest
                    seq += 1
                batch_next[stream] = seq
                result = AppendResult(
                    stream=stream,
                    first_position=first_position,
                    last_position=position,
                    first_seq=first_seq,
                    last_seq=seq - 1,
                    event_ids=tuple(ids),
                    recorded_at_ms=now_ms,
                    events=request.events,
                )
                if key is not None:
                    batch_keys[key] = result
                    keys.append((key, stream, first_position, position, first_seq, seq - 1))
                outcomes.append((request, result))
            signed = self._maybe_sign(position, prev, now_ms, forced=bool(checkpoints))
            if signed is not None:
                # The checkpoint is the next link of the chain: a row like any other, in this
                # same transaction, right after the row it signs. Not redacted: the writer's
                # own event holds no free text (a key name, numbers, keys and a signature).
                payload = encode(signed.event())
                position += 1
                event_id = self._ids.new(now_ms)
                envelope = (
                    position,
                    event_id,
                    CHECKPOINT_STREAM,
                    self._checkpoint_seq,
                    CHECKPOINT_KIND,
                    JournalCheckpoint.version,
                    now_ms,
                    "system",
                    None,
                    None,
                )
                digest = row_hash(prev, identity_bytes(*envelope), payload)
                rows.append((*envelope, payload, payload_digest(payload), prev, digest))
                prev = digest
            if rows or keys:
                # Explicit BEGIN/COMMIT: apsw runs each statement with the GIL released, so
                # other threads keep working during the commit's fsync.
                cursor = self._wcur
                cursor.execute("BEGIN IMMEDIATE")
                try:
                    if len(rows) == 1:  # a lone one-event append: no iterator over one row
                        cursor.execute(_INSERT, rows[0])
                    elif rows:
                        cursor.executemany(_INSERT, rows)
                    if keys:
                        cursor.executemany("INSERT INTO idempotency VALUES (?,?,?,?,?,?)", keys)
                    cursor.execute("COMMIT")
                except BaseException as exc:
                    if not self._wconn.getautocommit():
                        self._wconn.execute("ROLLBACK")
                    if assumed and isinstance(exc, apsw.ConstraintError):
                        self._commit(batch, careful=True)  # a stream taken for new was not
                        return
                    raise
        except BaseException as exc:  # nothing of this batch was committed
            self._stream_next.clear()
            error = JournalError(f"append failed, nothing written: {exc}")
            for request in batch:
                if isinstance(request, _Append):
                    request.settle(error)
                else:
                    request.future.set_exception(error)
            return
        if len(self._stream_next) + len(batch_next) > STREAM_SEQS:
            self._stream_next.clear()  # the bound (STREAM_SEQS): forgotten all at once
        self._stream_next.update(batch_next)
        self._head_position, self._head_hash = position, prev
        if signed is not None:
            self._last_checkpoint_row = signed.row_position
            self._checkpoint_seq += 1
            self._last_checkpoint_time = time.monotonic()
            if self.witness is not None:
                self.witness.submit(signed)
        committed = time.perf_counter()
        if len(outcomes) == 1:
            self.append_latency.observe(committed - outcomes[0][0].submitted)
        elif outcomes:
            self.append_latency.observe_many([committed - r.submitted for r, _ in outcomes])
        for request, outcome in outcomes:
            request.settle(outcome)
        for request in checkpoints:
            request.future.set_result(signed)
        if rows:
            # Set before _waiting is read, without the lock: a waiter counts itself in and reads
            # the position under it, so it either sees this position or is counted and notified.
            self._committed_position = position
            if self._waiting:
                with self._committed:
                    self._committed.notify_all()
            for listener in self._listeners:
                # Not contextlib.suppress: it makes an object per listener per commit.
                try:  # noqa: SIM105
                    listener(position)
                except Exception:  # a faulty listener must not stop the writer
                    pass

    def _idempotent(self, key: str) -> AppendResult | None:
        row = self._wconn.execute(
            "SELECT i.stream, i.first_position, i.last_position, i.first_seq, i.last_seq, "
            "e.recorded_at_ms FROM idempotency i JOIN events e ON e.position = i.first_position "
            "WHERE i.key = ?",
            (key,),
        ).get
        if row is None:
            return None
        stream, first, last, first_seq, last_seq, at_ms = row
        ids = tuple(
            str(r[0])
            for r in self._wconn.execute(
                "SELECT event_id FROM events WHERE position BETWEEN ? AND ? ORDER BY position",
                (first, last),
            )
        )
        return AppendResult(
            stream=str(stream),
            first_position=int(first),
            last_position=int(last),
            first_seq=int(first_seq),
            last_seq=int(last_seq),
            event_ids=ids,
            duplicate=True,
            recorded_at_ms=int(at_ms),
        )

    def _maybe_sign(
        self, position: int, hash_: bytes, now_ms: int, *, forced: bool
    ) -> Checkpoint | None:
        """A checkpoint over ``(position, hash_)`` when one is due and something new since the
        last checkpoint row is there to sign."""
        if self.node_key is None or position in (0, self._last_checkpoint_row):
            return None
        due = (
            forced
            or position - self._last_checkpoint_row >= self._checkpoint_every_events
            or time.monotonic() - self._last_checkpoint_time >= self._checkpoint_every_s
        )
        if not due or not self._verified.is_set() or self.tampered is not None:
            return None  # signed at the first commit after the full verification passed
        return self.node_key.sign(position, hash_, now_ms, previous=self._last_checkpoint_row)

    def _check_on_open(
        self, node_key: NodeKey | None, witness: Witness | None
    ) -> list[CheckpointNote] | None:
        """Refuse to write over a journal that fails :func:`verify_recent` (raises
        :class:`JournalTampered`); then bring the witness up to date with the checkpoints the
        journal holds that it lacks (a crash between a commit and its witness append)."""
        trusted = node_key.public_key if node_key is not None else None
        notes = witness.notes() if witness is not None else None
        if witness is not None and node_key is not None:
            for note in notes or ():
                if note.origin != node_key.origin or not note.signed_by(node_key.public_key):
                    raise JournalTampered(
                        f"witness {witness.path} holds a checkpoint at position {note.size + 1} "
                        f"signed under {note.origin}, not by this node's key ({node_key.origin}):"
                        f" node.key was replaced or the witness belongs to another journal - "
                        f"investigate with: {_investigate(self.path, witness)}",
                        "bad_checkpoint_signature",
                        note.size + 1,
                    )
        report = verify_recent(self, trusted_public_key=trusted, witness=notes)
        fault = report.fault
        if fault is not None:
            raise JournalTampered(
                f"journal {self.path} fails verification at position {fault.position} "
                f"({fault.kind}: {fault.message}); refusing to open it for writing, nothing was "
                f"signed - investigate with: {_investigate(self.path, witness)}",
                fault.kind,
                fault.position,
            )
        if witness is not None:
            known = max((n.size for n in notes or ()), default=0)
            witness.append_now([c for c in self.checkpoints() if c.position > known])
            witness.start()
        return notes

    def _verify_everything(
        self,
        notes: list[CheckpointNote] | None,
        on_tampered: Callable[[JournalTampered], None],
    ) -> None:
        """The full walk (:func:`events.sqlite.verify.verify`) behind the start-up check, on its own
        thread while the node serves: it finds what the start-up check does not look at (an
        edit between two older checkpoints). Until it passes nothing is signed; when it fails
        :attr:`tampered` is set, nothing is ever signed, and ``on_tampered`` is told."""
        try:
            self._may_walk.wait()
            if not self._stop_verifying.is_set():
                self._walk(notes, on_tampered)
        finally:
            self._verify_ended.set()

    def _walk(
        self,
        notes: list[CheckpointNote] | None,
        on_tampered: Callable[[JournalTampered], None],
    ) -> None:
        trusted = self.node_key.public_key if self.node_key is not None else None
        try:
            report = verify(
                self, trusted_public_key=trusted, witness=notes, stop=self._stop_verifying.is_set
            )
        except JournalError:  # stopped, or closed under it: nothing was signed
            return
        except Exception as exc:  # verify never raises for tampering: this is a fault of ours
            report = None
            self.tampered = JournalTampered(
                f"journal {self.path} could not be verified ({type(exc).__name__}: {exc}); "
                "nothing more is signed",
                "unreadable",
                0,
            )
        fault = report.fault if report is not None else None
        if fault is not None:
            self.tampered = JournalTampered(
                f"journal {self.path} fails verification at position {fault.position} "
                f"({fault.kind}: {fault.message}); nothing more is signed - investigate with: "
                f"{_investigate(self.path, self.witness)}",
                fault.kind,
                fault.position,
            )
        self._verified.set()
        if self.tampered is not None:
            with contextlib.suppress(Exception):
                on_tampered(self.tampered)


def _investigate(path: Path, witness: Witness | None) -> str:
    """The command an operator runs to see the whole report."""
    extra = f" --witness {witness.path}" if witness is not None else ""
    return f"reel journal verify --data {path.parent}{extra} --public-key <the key you pinned>"
