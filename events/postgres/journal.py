"""The PostgreSQL journal opened for writing by this node: one writer thread, one statement per
shard per batch, the fencing token checked inside every append.

Appends from any thread are queued (:func:`events.sqlite.journal.prepare` checks, redacts and
encodes them in the caller's thread, as on SQLite); the writer thread drains the queue, cuts
what it drained into runs of consecutive appends to one shard (its stream's home:
:mod:`events.postgres.homes`, a session's streams together), runs one
autocommit ``shard_append`` statement per run, in submission order, then resolves each caller's
future: an append returns only after its commit (with ``synchronous_commit`` on, durable on the
primary). A connection the server dropped is opened again for the next statement.

Alone (no ``leases``), opening takes the node-wide writer lock (a session advisory lock held by
a connection of its own: a second node on the same database gets :class:`JournalLocked`) and then
every shard's lease, bumping each token: whatever a writer before this one still has in flight is
refused (:class:`Fenced`). In a cluster (``leases``, a started
:class:`events.postgres.leases.LeaseKeeper`) it holds the same lock *shared* (a lone writer and
a cluster never write one database at once) and appends to a shard with the token the keeper
gives, asked for right before each statement: an append to a shard the node does not hold, or
past its self-fencing deadline, fails :class:`ShardNotOwned` without reaching the database.
Close the journal before draining the keeper, so what is queued is written first. Other nodes
append too: a cluster journal's follower thread reads the database's last position every
:data:`FOLLOW_S` and advances :attr:`committed_position` (waking ``wait_for`` and the listeners,
the projector and every live stream among them) past rows any node committed. Positions are
global, dense and in commit order (``shard_append`` takes them under the ``log_head`` row lock),
so a reader paging by position behind that head misses nothing.

Checkpoints, given the node's ``node_key``: opening verifies the whole journal
(:func:`events.postgres.verify.verify_database`, with the witness's notes, each of which must be
signed by this key) and refuses one that fails (:class:`JournalTampered`), and brings the
witness up to date. Then the writer thread signs a super-checkpoint over every shard's head
(:mod:`events.postgres.checkpoints`) every ``checkpoint_every_s`` while rows were appended, on
:meth:`checkpoint` and at :meth:`close`, appends it to the integrity chain (shard -1), first
recording the key in the roster (a ``journal.node_joined`` row) if it is not there, and hands
it to the witness. Alone the node holds shard -1 like every shard; in a cluster only the node
holding its lease signs (the checkpointer: a keeper made with ``integrity=True``), and it
looks at the heads every interval, as other nodes append.
"""

from __future__ import annotations

import contextlib
import logging
import queue
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any

import psycopg

from events.catalog import Event, JournalNodeJoined, JournalSuperCheckpoint, kind_of
from events.checkpoint import CHECKPOINT_STREAM, Checkpoint, NodeKey
from events.codec import encode
from events.envelope import AppendResult
from events.errors import (
    AppendRejected,
    ConcurrencyConflict,
    Fenced,
    JournalClosed,
    JournalError,
    JournalLocked,
    JournalTampered,
    JournalUnavailable,
    ShardNotOwned,
)
from events.ids import UlidGenerator
from events.postgres.checkpoints import HEADS_SQL, sign
from events.postgres.database import connect, failures, safe_dsn, upgrade
from events.postgres.homes import StreamHomes, shard_of
from events.postgres.reader import PostgresReader
from events.postgres.schema import FENCED, INTEGRITY_SHARD, LOCK_CLASS, WRITER_LOCK
from events.postgres.verify import refusal, verify_database
from events.sqlite.journal import MAX_PAYLOAD_BYTES, AppendRequest, prepare
from events.stats import LatencyHistogram
from events.witness import Witness

if TYPE_CHECKING:
    from events.postgres.leases import LeaseKeeper

log = logging.getLogger(__name__)

Listener = Callable[[int], None]
Elsewhere = Callable[[int, list[AppendRequest]], None]
"""Hands appends to a shard another node holds to that node; settles their futures."""
_STOP = object()
FOLLOW_S = 0.02
"""How often a cluster node's journal looks for rows other nodes committed (one indexed read of
one row): the lag a live stream or a view on this node has behind an append on another."""
HORIZON_EVERY_S = 1.0
"""How often the follower also reads the horizon lag (:attr:`PostgresJournal.horizon_lag_s`)."""
_HORIZON_LAG = (
    "SELECT coalesce(extract(epoch FROM max(clock_timestamp() - xact_start)), 0)::float8 "
    "FROM pg_stat_activity WHERE backend_xid IS NOT NULL AND datname = current_database()"
)
_APPEND = "SELECT * FROM shard_append(%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)"


class _Sign:
    """A request to sign a super-checkpoint now (:meth:`PostgresJournal.checkpoint`, close)."""

    __slots__ = ("future",)

    def __init__(self) -> None:
        self.future: Future[Checkpoint | None] = Future()


class _Queued:
    """An append request, and what its stream is placed by if it creates it; ``forwarded``:
    another node sent it here (it is never sent on again)."""

    __slots__ = ("forwarded", "home", "request")

    def __init__(self, request: AppendRequest, home: str | None, forwarded: bool = False) -> None:
        self.request = request
        self.home = home
        self.forwarded = forwarded

    @property
    def stream(self) -> str:
        return self.request.stream

    @property
    def expected_seq(self) -> int | None:
        return self.request.expected_seq


def _runs_by_shard(
    requests: list[AppendRequest], shards: list[int]
) -> list[tuple[int, list[AppendRequest]]]:
    """The requests cut into runs of consecutive requests of one shard (``shards``: each one's):
    each run is one statement, and the runs commit in the order they were submitted (an append
    submitted after another, on any stream, never gets the lower positions)."""
    runs: list[tuple[int, list[AppendRequest]]] = []
    for request, shard in zip(requests, shards, strict=True):
        if runs and runs[-1][0] == shard:
            runs[-1][1].append(request)
        else:
            runs.append((shard, [request]))
    return runs


class PostgresJournal(PostgresReader):
    """The journal in the database ``dsn`` names, opened for writing by this process."""

    def __init__(
        self,
        dsn: str,
        *,
        node: str = "node",
        leases: LeaseKeeper | None = None,
        node_key: NodeKey | None = None,
        witness: Witness | None = None,
        checkpoint_every_s: float = 1.0,
        max_payload_bytes: int = MAX_PAYLOAD_BYTES,
        max_batch_events: int = 4096,
    ) -> None:
        if witness is not None and node_key is None:
            raise ValueError("a witness needs a node key (it records signed checkpoints)")
        upgrade(dsn)
        super().__init__(dsn)
        self.leases = leases
        rows: list[tuple[Any, ...]] = []
        try:
            self._lock_conn = connect(dsn)
            shared = "_shared" if leases is not None else ""
            with failures(dsn):
                got = self._lock_conn.execute(
                    f"SELECT pg_try_advisory_lock{shared}({LOCK_CLASS}, %s)", (WRITER_LOCK,)
                ).fetchone()
            if not got or not got[0]:
                raise JournalLocked(
                    f"journal {self.path} is held for writing by "
                    + ("a lone reel node (not a cluster)" if leases else "another reel node"),
                    None,
                )
            self._wconn = connect(dsn)
            if leases is None:  # a cluster node's row of this name would fence our leases
                with failures(dsn):
                    self._wconn.execute("DELETE FROM nodes WHERE node = %s", (node,))
                    rows = self._wconn.execute(
                        "UPDATE shard_lease SET node = %s, incarnation = incarnation + 1, "
                        "token = token + 1 RETURNING shard, token",
                        (node,),
                    ).fetchall()
            self._tokens = {int(shard): int(token) for shard, token in rows}
            self.node_key = node_key
            self.witness = witness
            """Where every super-checkpoint this node signs is also appended (``None``: none)."""
            self.tampered: JournalTampered | None = None
            """Always ``None``: a journal that fails verification is not opened at all."""
            self.max_payload_bytes = max_payload_bytes
            self._max_batch_events = max_batch_events
            self._ids = UlidGenerator()
            self._homes = StreamHomes(self.shards)
            self.append_latency = LatencyHistogram()
            self._queue: queue.SimpleQueue[object] = queue.SimpleQueue()
            self._committed = threading.Condition()
            self._committed_position = self.head().position
            self._listeners: list[Listener] = []
            self._checkpoint_every_s = checkpoint_every_s
            self.node = node
            if node_key is not None:
                self._open_signed(node_key, witness)
            self._integrity_token: int | None = None
            """The token the integrity chain was last appended to with: another one means it
            was (re)acquired, and what it holds is read again before signing."""
            self._signed_size = 0
            """The rows the last super-checkpoint covers: nothing is signed twice over one
            head (read from the chain at each acquisition)."""
            self._joined = False
            """Whether this node's key is in the roster (read at each acquisition)."""
            self._unsigned = node_key is not None
            """Whether rows may wait to be signed: an append committed since the last signing,
            the journal was just opened, or (in a cluster) always, as other nodes append."""
            self._last_signing = time.monotonic()
        except BaseException:
            for name in ("_wconn", "_lock_conn"):
                with contextlib.suppress(Exception):
                    getattr(self, name).close()
            super().close()
            raise
        self._accepting = True
        self._submit_guard = threading.Lock()
        self._writer = threading.Thread(target=self._run, name="journal-writer", daemon=True)
        self._writer.start()
        self.elsewhere: Elsewhere | None = None
        """A cluster node's way to append to a stream whose shard another node holds (set by
        :mod:`transports.cluster`): only streams no session homes are sent (a token's, a
        memory item's); a session's appends are its owner's alone, and fail ``ShardNotOwned``."""
        self._follower: threading.Thread | None = None
        self.followed_at = time.monotonic()
        """When the follower last read the database's head (monotonic): how stale this node's
        knowledge of other nodes' commits may be (``/metrics``)."""
        self.horizon_lag_s = 0.0
        """The age of the oldest write transaction open in the database, as the follower last
        read it (every :data:`HORIZON_EVERY_S`): one left open holds back the snapshot horizon
        every horizon reader waits on, and once it holds ``log_head``'s lock every append of
        every node (``idle_in_transaction_session_timeout`` ends it). Transactions of other
        roles count only where reel's role may read their ``pg_stat_activity`` rows
        (``pg_read_all_stats``)."""
        if leases is not None:
            self._follower = threading.Thread(
                target=self._follow, name="journal-follower", daemon=True
            )
            self._follower.start()

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
        for name, value in (
            ("stream", stream),
            ("principal", principal),
            ("correlation_id", correlation_id),
            ("causation_id", causation_id),
            ("idempotency_key", idempotency_key),
        ):
            if isinstance(value, str) and "\x00" in value:
                raise AppendRejected(f"{name} holds a NUL character (PostgreSQL text cannot)")
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
        with self._submit_guard:
            if not self._accepting:
                raise JournalClosed(f"journal {self.path} is closed")
            self._queue.put(_Queued(request, home))
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
        return self.submit(
            stream,
            events,
            expected_seq=expected_seq,
            principal=principal,
            correlation_id=correlation_id,
            causation_id=causation_id,
            idempotency_key=idempotency_key,
            home=home,
        ).result()

    def submit_forwarded(self, request: AppendRequest) -> Future[AppendResult]:
        """Queue an append another node prepared (checked, redacted, encoded) for a stream
        whose shard this node holds; never sent on again (``ShardNotOwned`` when this node
        does not hold it either)."""
        future = request.future
        with self._submit_guard:
            if not self._accepting:
                raise JournalClosed(f"journal {self.path} is closed")
            self._queue.put(_Queued(request, None, forwarded=True))
        return future

    def checkpoint(self) -> Checkpoint | None:
        """Sign a super-checkpoint over every shard's head now (after what was queued before
        this call). ``None`` without a node key, or when the heads are already signed."""
        if self.node_key is None:
            return None
        request = _Sign()
        with self._submit_guard:
            if not self._accepting:
                raise JournalClosed(f"journal {self.path} is closed")
            self._queue.put(request)
        return request.future.result()

    @property
    def verified(self) -> bool:
        """True: a signing journal verified everything when it opened, and the node walks
        every chain before it opens one that does not sign."""
        return True

    def wait_verified(self) -> None:
        """Returns at once (see :attr:`verified`)."""

    def start_verifying(self) -> None:
        """Nothing runs in the background to start."""

    def stop_verifying(self) -> None:
        """Nothing runs in the background to stop."""

    # --- subscription -------------------------------------------------------------------

    @property
    def committed_position(self) -> int:
        return self._committed_position

    def wait_for(self, after_position: int, timeout: float | None = None) -> int:
        with self._committed:
            self._committed.wait_for(
                lambda: self._committed_position > after_position or not self._accepting,
                timeout,
            )
            return self._committed_position

    def listen(self, listener: Listener) -> Callable[[], None]:
        with self._committed:
            self._listeners.append(listener)

        def unsubscribe() -> None:
            with self._committed, contextlib.suppress(ValueError):
                self._listeners.remove(listener)

        return unsubscribe

    def close(self, *, checkpoint: bool = True) -> None:
        """Finish what is queued, sign a final super-checkpoint (unless told not to), close
        the witness (writing what it has pending) and the connections. Idempotent."""
        with self._submit_guard:
            if not self._accepting:
                return
            self._accepting = False
            if checkpoint and self.node_key is not None:
                self._queue.put(_Sign())
            self._queue.put(_STOP)
        self._writer.join()
        if self._follower is not None:
            self._follower.join()
        with self._committed:
            self._committed.notify_all()
        if self.witness is not None:
            self.witness.close()
        for conn in (self._wconn, self._lock_conn):
            with contextlib.suppress(Exception):
                conn.close()
        super().close()

    # --- the writer thread --------------------------------------------------------------

    def _run(self) -> None:
        while True:
            try:
                first = self._queue.get(timeout=self._signing_due_in())
            except queue.Empty:
                self._sign()
                continue
            batch: list[_Queued] = []
            signs: list[_Sign] = []
            events = 0
            stop = False
            item = first
            while True:
                if item is _STOP:
                    stop = True
                    break
                if isinstance(item, _Sign):
                    signs.append(item)
                else:
                    assert isinstance(item, _Queued)
                    batch.append(item)
                    events += len(item.request.payloads)
                if events >= self._max_batch_events:
                    break
                try:
                    item = self._queue.get_nowait()
                except queue.Empty:
                    break
            self._commit_batch(batch)
            if signs or self._signing_due_in() == 0:
                signed = self._sign()
                for request in signs:
                    request.future.set_result(signed)
            if stop:
                return

    def _commit_batch(self, batch: list[_Queued]) -> None:
        """Place each request in its stream's shard and commit them shard run by shard run."""
        queued = [q for q in batch if q.request.future.set_running_or_notify_cancel()]
        live = [q.request for q in queued]
        try:
            shards = self._homes.shards_of(
                queued, self._homes_in_database, self._place if self.leases else None
            )
        except (JournalError, psycopg.Error) as exc:
            error = (
                exc
                if isinstance(exc, JournalError)
                else JournalError("append failed, nothing written: " + " ".join(str(exc).split()))
            )
            for request in live:
                request.future.set_exception(error)
            return
        elsewhere = self.elsewhere
        if elsewhere is not None:
            owned = self.leases.owned() if self.leases is not None else {}
            sendable = {id(q.request) for q in queued if q.home is None and not q.forwarded}
            kept: list[AppendRequest] = []
            kept_shards: list[int] = []
            away: dict[int, list[AppendRequest]] = {}
            for request, shard in zip(live, shards, strict=True):
                if shard not in owned and id(request) in sendable:
                    away.setdefault(shard, []).append(request)
                else:
                    kept.append(request)
                    kept_shards.append(shard)
            for shard, requests in away.items():
                elsewhere(shard, requests)
            live, shards = kept, kept_shards
        for shard, requests in _runs_by_shard(live, shards):
            self._commit(shard, requests)

    def _place(self, stream: str) -> int:
        """A cluster node's shard for a new stream no session homes (an access decision, a
        memory item, an incident): one this node owns, so that it can write it; its name's
        shard while it owns none (the append is then refused)."""
        assert self.leases is not None
        owned = sorted(self.leases.owned())
        if not owned:
            return shard_of(stream, self.shards)
        return owned[shard_of(stream, len(owned))]

    def _homes_in_database(self, streams: list[str]) -> dict[str, int]:
        """The shard each of ``streams`` the journal holds lives in (its ``stream_seq`` 0 row)."""
        if self._wconn.broken or self._wconn.closed:
            self._wconn = connect(self.dsn)
        with failures(self.dsn, "cannot append to"):
            rows = self._wconn.execute(
                "SELECT stream, shard FROM events WHERE stream = ANY(%s) AND stream_seq = 0",
                (streams,),
            ).fetchall()
        return {str(stream): int(shard) for stream, shard in rows}

    def _signing_due_in(self) -> float | None:
        """Seconds until a super-checkpoint is due (0: now); ``None`` while nothing waits."""
        if not self._unsigned:
            return None
        return max(0.0, self._last_signing + self._checkpoint_every_s - time.monotonic())

    def _token(self, shard: int) -> int:
        """The fencing token to append to ``shard`` with; :class:`ShardNotOwned` in a cluster
        when this node holds no live lease on it."""
        return self._tokens[shard] if self.leases is None else self.leases.token(shard)

    def _sign(self) -> Checkpoint | None:
        """Sign every shard's head and append the super-checkpoint to the integrity chain
        (in the writer thread), first recording this node's key in the roster if it is not
        there; ``None`` without a key, when nothing is new, or (in a cluster) when another node
        holds the integrity chain. A failure is logged and tried again at the next due time:
        the rows stay unsigned meanwhile."""
        key = self.node_key
        self._last_signing = time.monotonic()
        self._unsigned = key is not None and self.leases is not None
        if key is None:
            return None
        try:
            token = self._token(INTEGRITY_SHARD)
        except ShardNotOwned:
            return None  # another node is the checkpointer
        try:
            if self._wconn.broken or self._wconn.closed:
                self._wconn = connect(self.dsn)
            if token != self._integrity_token:  # (re)acquired: what does the chain hold?
                last = self.last_checkpoint()
                self._signed_size = last.position if last is not None else 0
                self._joined = key.public_key in self.roster()
                self._integrity_token = token
            if not self._joined:
                joined = JournalNodeJoined(node=self.node, public_key=key.public_key)
                self._append_own(joined, token)
                self._joined = True
            with failures(self.dsn, "cannot sign"):
                heads = self._wconn.execute(HEADS_SQL).fetchall()
            event = sign(key, heads)
            if event.size == self._signed_size:
                return None
            result = self._append_own(event, token)
        except (JournalError, psycopg.Error) as exc:
            self._unsigned = True
            self._integrity_token = None  # read the chain again before the next try
            log.warning("super-checkpoint not signed: %s", " ".join(str(exc).split()))
            return None
        self._signed_size = event.size
        signed = Checkpoint.of(event, result.first_position, result.recorded_at_ms)
        if self.witness is not None:
            self.witness.submit(signed)
        return signed

    def _append_own(
        self, event: JournalSuperCheckpoint | JournalNodeJoined, token: int
    ) -> AppendResult:
        """Append the journal's own ``event`` to the integrity chain (stream ``journal``,
        refused to every other writer) with shard -1's ``token`` (one writer at a time: its
        holder), not redacted: it holds a node name, numbers, keys, hashes and a signature, no
        free text. Raises :class:`JournalError` when refused."""
        now_ms = time.time_ns() // 1_000_000
        args = (
            INTEGRITY_SHARD,
            token,
            [CHECKPOINT_STREAM],
            [1],
            [None],
            ["system"],
            [None],
            [None],
            [None],
            [self._ids.new(now_ms)],
            [kind_of(event)],
            [event.version],
            [encode(event)],
        )
        with failures(self.dsn, "cannot append to"):
            row = self._wconn.execute(_APPEND, args, binary=True).fetchone()
        assert row is not None
        _, _, first, last, seq, _, at_ms, ids = row
        self._advance(int(last))
        return AppendResult(
            stream=CHECKPOINT_STREAM,
            first_position=int(first),
            last_position=int(last),
            first_seq=int(seq),
            last_seq=int(seq),
            event_ids=tuple(ids),
            recorded_at_ms=int(at_ms),
        )

    def _open_signed(self, key: NodeKey, witness: Witness | None) -> None:
        """Before the writer starts: refuse a witness holding another key's notes, verify the
        whole journal against the witness, catch the witness up."""
        notes = witness.notes() if witness is not None else None
        for note in notes or ():
            if note.origin != key.origin or not note.signed_by(key.public_key):
                raise JournalTampered(
                    f"witness {witness.path if witness else ''} holds a checkpoint of size "
                    f"{note.size} signed under {note.origin}, not by this node's key "
                    f"({key.origin}): node.key was replaced or the witness belongs to another "
                    "node - investigate with: reel journal verify --dsn ... --witness ...",
                    "bad_checkpoint_signature",
                    0,
                )
        fault = verify_database(self.dsn, witness=notes).fault
        if fault is not None:
            raise refusal(fault)
        if witness is not None:
            known = max((n.size for n in notes or ()), default=0)
            mine = [c for c in self.checkpoints() if c.public_key == key.public_key]
            witness.append_now([c for c in mine if c.position > known])
            witness.start()

    def _commit(self, shard: int, requests: list[AppendRequest]) -> None:
        now_ms = time.time_ns() // 1_000_000
        ids = [[self._ids.new(now_ms) for _ in r.payloads] for r in requests]
        try:
            token = self._token(shard)
        except ShardNotOwned as exc:
            for request in requests:
                request.future.set_exception(exc)
            return
        args: tuple[Any, ...] = (
            shard,
            token,
            [r.stream for r in requests],
            [len(r.payloads) for r in requests],
            [r.expected_seq for r in requests],
            [r.principal for r in requests],
            [r.correlation_id for r in requests],
            [r.causation_id for r in requests],
            [r.idempotency_key for r in requests],
            [i for group in ids for i in group],
            [kind for r in requests for kind, _, _ in r.payloads],
            [version for r in requests for _, version, _ in r.payloads],
            [payload for r in requests for _, _, payload in r.payloads],
        )
        try:
            if self._wconn.broken or self._wconn.closed:  # the server restarted, say
                self._wconn = connect(self.dsn)
            rows = self._wconn.execute(_APPEND, args, binary=True).fetchall()
        except JournalUnavailable as exc:
            for request in requests:
                request.future.set_exception(exc)
            return
        except psycopg.Error as exc:
            error: JournalError
            first = " ".join(str(exc).split())
            if exc.sqlstate == FENCED:
                error = Fenced(f"journal {self.path}: shard {shard} was taken over; not written")
            elif isinstance(exc, psycopg.OperationalError) or self._wconn.broken:
                # The link went down around the statement (a server restart, say): it may
                # have committed or not, and the writer connects again for the next one.
                error = JournalUnavailable(
                    f"cannot append to the journal database {safe_dsn(self.dsn)}: the "
                    f"connection was lost, the append may or may not be written ({first})"
                )
            else:
                error = JournalError(f"append failed, nothing written: {first}")
            for request in requests:
                request.future.set_exception(error)
            return
        committed = time.perf_counter()
        last = 0
        for request, row in zip(requests, rows, strict=True):
            _, outcome, first_pos, last_pos, first_seq, last_seq, at_ms, event_ids = row
            self.append_latency.observe(committed - request.submitted)
            if outcome == "misplaced":  # a wrong guess at a forgotten stream's home
                self._homes.remember(request.stream, int(first_seq))
                request.future.set_exception(
                    JournalError(
                        f"append failed, nothing written: stream {request.stream} lives in "
                        f"shard {int(first_seq)}, not {shard}"
                    )
                )
                continue
            if outcome == "conflict":
                assert request.expected_seq is not None
                request.future.set_exception(
                    ConcurrencyConflict(request.stream, request.expected_seq, int(first_seq))
                )
                continue
            request.future.set_result(
                AppendResult(
                    stream=request.stream,
                    first_position=int(first_pos),
                    last_position=int(last_pos),
                    first_seq=int(first_seq),
                    last_seq=int(last_seq),
                    event_ids=tuple(event_ids),
                    duplicate=outcome == "duplicate",
                    recorded_at_ms=int(at_ms),
                    events=request.events,
                )
            )
            if outcome == "ok":
                last = max(last, int(last_pos))
        if last:
            self._unsigned = self.node_key is not None
            self._advance(last)

    def _follow(self) -> None:
        """A cluster node's follower thread: advance past what other nodes committed."""
        conn: psycopg.Connection[Any] | None = None
        horizon_due = 0.0
        while self._accepting:
            time.sleep(FOLLOW_S)
            try:
                if conn is None or conn.closed or conn.broken:
                    conn = connect(self.dsn)
                row = conn.execute("SELECT position FROM log_head").fetchone()
                self.followed_at = now = time.monotonic()
                if now >= horizon_due:
                    horizon_due = now + HORIZON_EVERY_S
                    lag = conn.execute(_HORIZON_LAG).fetchone()
                    self.horizon_lag_s = float(lag[0]) if lag is not None else 0.0
            except (psycopg.Error, JournalError):  # the database is away: look again later
                time.sleep(1.0)
                continue
            if row is not None and int(row[0]) > self._committed_position:
                self._advance(int(row[0]))
        if conn is not None:
            with contextlib.suppress(Exception):
                conn.close()

    def _advance(self, last: int) -> None:
        """Rows up to ``last`` committed: wake the waiters, tell the listeners. Only forward:
        the writer and (in a cluster) the follower both call it."""
        with self._committed:
            if last <= self._committed_position:
                return
            self._committed_position = last
            self._committed.notify_all()
            listeners = list(self._listeners)
        for listener in listeners:
            with contextlib.suppress(Exception):  # a faulty listener must not stop the writer
                listener(last)


if TYPE_CHECKING:  # mypy proves the PostgreSQL classes implement the ports (no runtime cost)
    from events.port import JournalReadPort, NodeJournal

    _reader_port: type[JournalReadPort] = PostgresReader
    _journal_port: type[NodeJournal] = PostgresJournal
