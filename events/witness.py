"""The checkpoint witness: every signed checkpoint, appended to a file outside the data dir.

Someone who holds the whole data dir (journal and ``node.key``) can rewrite the chain and sign
it again; they cannot reach back into a file on another volume (or another machine's mount)
and unsay what it recorded. The node appends each checkpoint there as a C2SP signed note
(:mod:`events.note`) followed by an empty line; ``reel journal verify --witness FILE`` and the
node's start-up check then require every recorded checkpoint to still be in the journal, at its
position, with its hash and signature.

Appends never block the journal writer: the writer hands a note over and a thread of its own
writes it and ``fsync``s. A failed write is kept, retried every few seconds, counted
(:attr:`Witness.status`) and logged on ``reel.witness``: never silently dropped.
"""

from __future__ import annotations

import contextlib
import logging
import os
import queue
import stat
import threading
from collections.abc import Sequence
from pathlib import Path

import msgspec

from events.checkpoint import Checkpoint
from events.errors import WitnessError
from events.note import CheckpointNote, NoteError, parse_checkpoint_note

log = logging.getLogger("reel.witness")

RETRY_S = 5.0
"""How long a failed append waits before it is tried again."""

_STOP = object()


class WitnessStatus(msgspec.Struct, frozen=True, kw_only=True):
    """What the witness thread has done (for ``/metrics`` and the checkpoints route)."""

    path: str
    appended: int
    """Notes written and fsynced since the node started (catch-up at start included)."""
    failures: int
    """Append attempts that failed since the node started."""
    pending: int
    """Notes waiting to be written (after a failure, until a retry succeeds)."""
    last_size: int
    """The size of the last checkpoint the witness holds (0 when none)."""
    last_error: str | None = None
    """The last failure, cleared by the next successful append."""


def read_notes(path: Path) -> tuple[list[CheckpointNote], int]:
    """Every complete note in the witness file at ``path`` and the byte length they take.

    An incomplete last entry (a crash during its write) ends the list; anything malformed
    before it raises :class:`WitnessError` naming the entry."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise WitnessError(f"cannot read witness {path}: {exc.strerror}") from None
    return parse_witness(data, str(path))


def parse_witness(data: bytes, name: str = "witness") -> tuple[list[CheckpointNote], int]:
    """Parse a witness file's bytes: notes, each followed by an empty line."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise WitnessError(f"{name} is not UTF-8 text") from None
    notes: list[CheckpointNote] = []
    offset = 0
    while offset < len(text):
        body_end = text.find("\n\n", offset)
        end = text.find("\n\n", body_end + 2) if body_end >= 0 else -1
        if end < 0:
            break  # an incomplete last entry: torn by a crash
        entry = text[offset : end + 1]
        try:
            notes.append(parse_checkpoint_note(entry))
        except NoteError as exc:
            raise WitnessError(
                f"{name}: entry {len(notes) + 1} is not a checkpoint note: {exc}"
            ) from None
        offset = end + 2
    return notes, len(text[:offset].encode("utf-8"))


class Witness:
    """An append-only file of signed checkpoint notes; one per journal.

    :meth:`open` checks it can be written (the node refuses to start otherwise), reads what it
    holds and cuts off a torn last entry; :meth:`append_now` writes synchronously (catch-up at
    start); :meth:`submit` hands a note to the witness thread and returns at once."""

    def __init__(self, path: Path, fd: int, notes: list[CheckpointNote]) -> None:
        self.path = path
        self._fd = fd
        self._notes = notes
        self._queue: queue.SimpleQueue[object] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._idle = threading.Condition(self._lock)
        self._appended = 0
        self._failures = 0
        self._pending = 0
        self._last_error: str | None = None
        self._last_size = notes[-1].size if notes else 0
        self._thread: threading.Thread | None = None

    @classmethod
    def open(cls, path: Path, *, data_dir: Path | None = None) -> Witness:
        """Open (creating it) the witness at ``path``. Raises :class:`WitnessError` with one
        line when it sits inside ``data_dir``, cannot be created or written, or holds text
        that is not checkpoint notes."""
        path = path.expanduser()
        resolved = path.resolve()
        if data_dir is not None:
            home = data_dir.expanduser().resolve()
            if resolved == home or home in resolved.parents:
                raise WitnessError(
                    f"witness {path} is inside the data dir {data_dir}: it must live outside "
                    "it (another volume), or whoever holds the data dir can rewrite it too"
                )
        if resolved.is_dir():
            raise WitnessError(f"witness {path} is a directory, not a file")
        created = not resolved.exists()
        try:
            fd = os.open(resolved, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o644)
        except OSError as exc:
            raise WitnessError(
                f"cannot open witness {path} for appending: {exc.strerror}"
            ) from None
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise WitnessError(f"witness {path} is not a regular file")
            data = b""
            while chunk := os.pread(fd, 1 << 20, len(data)):
                data += chunk
            notes, length = parse_witness(data, f"witness {path}")
            if length < len(data):
                log.warning(
                    "witness %s: dropped an incomplete last entry of %d bytes (a crash during "
                    "its write); the checkpoint is appended again from the journal",
                    path,
                    len(data) - length,
                )
                os.ftruncate(fd, length)
                os.fsync(fd)
            if created:
                _fsync_dir(resolved.parent)
        except OSError as exc:
            os.close(fd)
            raise WitnessError(f"cannot use witness {path}: {exc.strerror}") from None
        except BaseException:
            os.close(fd)
            raise
        return cls(path, fd, notes)

    def notes(self) -> list[CheckpointNote]:
        """The notes the witness held when it was opened, plus those appended since."""
        with self._lock:
            return list(self._notes)

    def same_volume_as(self, directory: Path) -> bool:
        """Whether the witness shares a filesystem with ``directory`` (it should not)."""
        try:
            return os.fstat(self._fd).st_dev == directory.stat().st_dev
        except OSError:
            return False

    # --- appending ----------------------------------------------------------------------

    def append_now(self, checkpoints: Sequence[Checkpoint]) -> None:
        """Append and fsync now, in the caller's thread (start-up catch-up). Raises
        :class:`WitnessError` when the write fails."""
        if not checkpoints:
            return
        try:
            self._write([c.note() for c in checkpoints])
        except OSError as exc:
            raise WitnessError(f"cannot append to witness {self.path}: {exc.strerror}") from None
        with self._lock:
            self._notes.extend(parse_checkpoint_note(c.note()) for c in checkpoints)
            self._appended += len(checkpoints)
            self._last_size = checkpoints[-1].position

    def submit(self, checkpoint: Checkpoint) -> None:
        """Hand a signed checkpoint to the witness thread; never blocks."""
        with self._lock:
            self._pending += 1
        self._queue.put(checkpoint)
        if self._thread is None:
            self.start()

    def start(self) -> None:
        """Start the witness thread (idempotent)."""
        with self._lock:
            if self._thread is not None:
                return
            self._thread = threading.Thread(target=self._run, name="journal-witness", daemon=True)
            self._thread.start()

    def flush(self, timeout: float) -> bool:
        """Wait until every submitted note is written (or the timeout); whether it was."""
        with self._idle:
            return self._idle.wait_for(lambda: self._pending == 0, timeout)

    def close(self, timeout: float = 10.0) -> None:
        """Write what is pending (up to ``timeout``; a note still pending then is logged as
        lost to the witness), stop the thread and close the file. Idempotent."""
        if self._fd < 0:
            return
        if not self.flush(timeout):
            log.error(
                "witness %s: %d checkpoint(s) not written before shutdown (%s); they stay in "
                "the journal and are appended when the node starts again",
                self.path,
                self._pending,
                self._last_error or "the write did not finish in time",
            )
        thread = self._thread
        if thread is not None:
            self._queue.put(_STOP)
            thread.join(timeout=1.0)
        with self._lock:
            if thread is None or not thread.is_alive():
                os.close(self._fd)
                self._fd = -1

    @property
    def status(self) -> WitnessStatus:
        with self._lock:
            return WitnessStatus(
                path=str(self.path),
                appended=self._appended,
                failures=self._failures,
                pending=self._pending,
                last_size=self._last_size,
                last_error=self._last_error,
            )

    def _run(self) -> None:
        backlog: list[Checkpoint] = []
        while True:
            try:
                item = self._queue.get(timeout=RETRY_S if backlog else None)
            except queue.Empty:
                item = None
            stop = item is _STOP
            if isinstance(item, Checkpoint):
                backlog.append(item)
            with contextlib.suppress(queue.Empty):
                while True:
                    more = self._queue.get_nowait()
                    if more is _STOP:
                        stop = True
                    elif isinstance(more, Checkpoint):
                        backlog.append(more)
            if backlog:
                try:
                    self._write([c.note() for c in backlog])
                except OSError as exc:
                    # Logged before it is counted: whoever sees the failure in the status
                    # finds it in the log too.
                    log.error(
                        "witness %s: cannot append %d checkpoint(s) (last covers 1..%d): %s; "
                        "retrying every %.0f s",
                        self.path,
                        len(backlog),
                        backlog[-1].position,
                        exc.strerror or exc,
                        RETRY_S,
                    )
                    with self._lock:
                        self._failures += 1
                        self._last_error = f"{exc.strerror or exc}"
                else:
                    with self._idle:
                        self._notes.extend(parse_checkpoint_note(c.note()) for c in backlog)
                        self._appended += len(backlog)
                        self._pending -= len(backlog)
                        self._last_size = backlog[-1].position
                        self._last_error = None
                        self._idle.notify_all()
                    backlog = []
            if stop:
                return

    def _write(self, notes: list[str]) -> None:
        """Append the notes (each followed by an empty line) and fsync; on failure, cut the
        file back to where it was so a retry never leaves a torn entry in the middle."""
        data = "".join(note + "\n" for note in notes).encode("utf-8")
        fd = self._fd
        start = os.lseek(fd, 0, os.SEEK_END)
        try:
            view = memoryview(data)
            while view:
                written = os.write(fd, view)
                view = view[written:]
            os.fsync(fd)
        except OSError:
            with contextlib.suppress(OSError):
                os.ftruncate(fd, start)
            raise


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
