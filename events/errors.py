"""The journal's exceptions. The tree is drawn in :mod:`events` (``events/__init__.py``)."""

from __future__ import annotations


class JournalError(Exception):
    """Base of every error the journal raises on purpose."""


class JournalUnavailable(JournalError):
    """The journal file cannot be opened or used: missing, unreadable, read-only, SQLite-locked;
    or its database cannot be reached (a PostgreSQL restart): an append that raises it may or
    may not have been written."""

    def __str__(self) -> str:
        return " ".join(super().__str__().split())  # one line, whatever the driver said


UNAVAILABLE_RETRY_S = 1.0
"""How long what follows the journal (the run-state log, the reflection feed, the projector)
waits before it reads again after :class:`JournalUnavailable`: it keeps going once the
journal is back, never dies of it."""


class NotAJournal(JournalUnavailable):
    """The file exists but is not a reel journal (another SQLite database, or not SQLite at all)."""


class SchemaTooNew(JournalUnavailable):
    """The journal was written by a newer reel whose schema this version cannot read safely."""


class SchemaTooOld(JournalUnavailable):
    """The journal was written by an older reel whose format this version no longer reads."""


class JournalLocked(JournalUnavailable):
    """Another process holds the data dir for writing; ``holder_pid`` names it when known."""

    def __init__(self, message: str, holder_pid: int | None) -> None:
        super().__init__(message)
        self.holder_pid = holder_pid


class JournalClosed(JournalError):
    """An operation was attempted on a journal that has been closed."""


class VerifyStopped(JournalError):
    """A verification was stopped before it reached the head (its journal is closing): it
    vouches for nothing, and nothing is signed on its word."""


class AppendRejected(JournalError):
    """An append was refused before anything was written (empty batch, oversize payload...)."""


class ConcurrencyConflict(AppendRejected):
    """The stream's next ``stream_seq`` is not the one the append expected; nothing was written."""

    def __init__(self, stream: str, expected_seq: int, actual_seq: int) -> None:
        super().__init__(
            f"stream {stream!r}: expected next stream_seq {expected_seq}, but it is {actual_seq}"
        )
        self.stream = stream
        self.expected_seq = expected_seq
        self.actual_seq = actual_seq


class Fenced(JournalError):
    """A shard append carried a fencing token that is no longer the shard's current one: another
    writer took the shard over. Nothing was written (PostgreSQL backend)."""


class ShardNotOwned(JournalError):
    """This node holds no live lease on the shard an append goes to: it never had it, handed it
    over, or fenced itself (its lease could lapse before a renewal). Nothing was sent to the
    database. The shard's owner takes the append (forwarding to it is step 3 of issue 24)."""


class ShardsFixed(JournalError):
    """``reel journal init`` was asked for a shard count other than the one the journal
    database was created with: S is fixed at creation (a stream's shard is a function of S)."""


class UnknownEventKind(JournalError):
    """A stored payload names a kind/version the catalog cannot decode or upcast."""


class CheckpointKeyError(JournalError):
    """The node key is missing, unreadable or has unsafe permissions."""


class JournalTampered(JournalError):
    """Opening a journal for writing found it altered: the chain from its last signed
    checkpoint, a checkpoint, or the checkpoints its witness recorded do not hold. Nothing is
    signed or appended over it. ``kind`` and ``position`` name the first fault found."""

    def __init__(self, message: str, kind: str, position: int) -> None:
        super().__init__(" ".join(message.split()))  # one line, whatever the rows held
        self.kind = kind
        self.position = position


class WitnessError(JournalError):
    """The checkpoint witness cannot be used: unreadable, unwritable, inside the data dir, or
    holding text that is not a checkpoint note signed by the node key."""
