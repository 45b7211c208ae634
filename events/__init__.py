"""reel's events: the catalog, the hash-chained journal, redaction and verification.

``events`` imports nothing else of reel's; everything else stands on it.

Public surface::

    from events import Journal, JournalReader, NodeKey, Witness, verify
    from events import JournalPort, JournalReadPort   # what the rest of reel types against
    from events.catalog import RunAccepted, ...   # the event kinds

Exceptions (all raised on purpose derive from :class:`JournalError`)::

    JournalError
    ├── JournalUnavailable        cannot open/use the file: missing, read-only, SQLite-locked
    │   ├── NotAJournal           not a reel journal (other database, not SQLite)
    │   ├── SchemaTooNew          written by a newer reel
    │   ├── SchemaTooOld          written by an older reel (checkpoints outside the chain)
    │   └── JournalLocked         another process holds it for writing (.holder_pid)
    ├── JournalClosed             used after close()
    ├── AppendRejected            bad append, nothing written (empty, oversize, not an event)
    │   ├── ConcurrencyConflict   expected_seq is not the stream's next seq
    │   └── InvalidField          an identifier field that does not fit or looks like a secret
    │                             (events.fields; .kind, .field; never quotes the value)
    ├── Fenced                    a shard append with a token no longer current (PostgreSQL)
    ├── ShardNotOwned             an append to a shard this node holds no live lease on
    ├── ShardsFixed               journal init asked for another shard count than the database's
    ├── UnknownEventKind          a payload the catalog cannot decode or upcast
    ├── CheckpointKeyError        node key (or pinned public key) missing, unreadable, unsafe
    ├── JournalTampered           opening for writing found it altered (.kind, .position)
    ├── VerifyStopped             a verification was stopped before it ended (a closing journal)
    └── WitnessError              the checkpoint witness cannot be read, written or trusted

Two ``ValueError`` subclasses name a file that cannot be used: ``NoteError`` (a signed
checkpoint note that is not well formed) and ``RulesError`` (the vendored redaction rules are
not the pinned ones). Every class's failure kind is in :mod:`transports.failures`.
"""

from typing import TYPE_CHECKING

from events.lazy import exports

if TYPE_CHECKING:
    from events.catalog import CATALOG, Event, kind_of
    from events.chain import GENESIS
    from events.checkpoint import Checkpoint, NodeKey, load_public_key
    from events.codec import decode, encode
    from events.envelope import AppendResult, Head, StoredEvent
    from events.errors import (
        AppendRejected,
        CheckpointKeyError,
        ConcurrencyConflict,
        Fenced,
        JournalClosed,
        JournalError,
        JournalLocked,
        JournalTampered,
        JournalUnavailable,
        NotAJournal,
        SchemaTooNew,
        SchemaTooOld,
        ShardNotOwned,
        ShardsFixed,
        UnknownEventKind,
        VerifyStopped,
        WitnessError,
    )
    from events.fields import InvalidField
    from events.ids import is_ulid, new_id
    from events.port import JournalPort, JournalReadPort, Listener
    from events.redaction.redact import MARKER, redact_event, redact_text, redact_value
    from events.redaction.redact_stream import StreamRedactor
    from events.sqlite.journal import MAX_PAYLOAD_BYTES, Journal
    from events.sqlite.reader import JournalReader
    from events.sqlite.verify import Fault, VerifyReport, verify, verify_recent
    from events.witness import Witness, WitnessStatus

    # mypy proves here that the SQLite classes implement the ports (no runtime cost).
    _reader_port: type[JournalReadPort] = JournalReader
    _journal_port: type[JournalPort] = Journal

__all__ = [
    "CATALOG",
    "GENESIS",
    "MARKER",
    "MAX_PAYLOAD_BYTES",
    "AppendRejected",
    "AppendResult",
    "Checkpoint",
    "CheckpointKeyError",
    "ConcurrencyConflict",
    "Event",
    "Fault",
    "Fenced",
    "Head",
    "InvalidField",
    "Journal",
    "JournalClosed",
    "JournalError",
    "JournalLocked",
    "JournalPort",
    "JournalReadPort",
    "JournalReader",
    "JournalTampered",
    "JournalUnavailable",
    "Listener",
    "NodeKey",
    "NotAJournal",
    "SchemaTooNew",
    "SchemaTooOld",
    "ShardNotOwned",
    "ShardsFixed",
    "StoredEvent",
    "StreamRedactor",
    "UnknownEventKind",
    "VerifyReport",
    "VerifyStopped",
    "Witness",
    "WitnessError",
    "WitnessStatus",
    "decode",
    "encode",
    "is_ulid",
    "kind_of",
    "load_public_key",
    "new_id",
    "redact_event",
    "redact_text",
    "redact_value",
    "verify",
    "verify_recent",
]

__getattr__ = exports(
    __name__,
    {
        "events.catalog": ("CATALOG", "Event", "kind_of"),
        "events.chain": ("GENESIS",),
        "events.checkpoint": ("Checkpoint", "NodeKey", "load_public_key"),
        "events.codec": ("decode", "encode"),
        "events.envelope": ("AppendResult", "Head", "StoredEvent"),
        "events.errors": (
            "AppendRejected",
            "CheckpointKeyError",
            "ConcurrencyConflict",
            "Fenced",
            "JournalClosed",
            "JournalError",
            "JournalLocked",
            "JournalTampered",
            "JournalUnavailable",
            "NotAJournal",
            "SchemaTooNew",
            "SchemaTooOld",
            "ShardNotOwned",
            "ShardsFixed",
            "UnknownEventKind",
            "VerifyStopped",
            "WitnessError",
        ),
        "events.fields": ("InvalidField",),
        "events.ids": ("is_ulid", "new_id"),
        "events.sqlite.journal": ("MAX_PAYLOAD_BYTES", "Journal"),
        "events.port": ("JournalPort", "JournalReadPort", "Listener"),
        "events.sqlite.reader": ("JournalReader",),
        "events.redaction.redact": ("MARKER", "redact_event", "redact_text", "redact_value"),
        "events.redaction.redact_stream": ("StreamRedactor",),
        "events.sqlite.verify": ("Fault", "VerifyReport", "verify", "verify_recent"),
        "events.witness": ("Witness", "WitnessStatus"),
    },
)
"""Each name is imported from its module when first used (:mod:`events.lazy`): a process that
reads only the catalog never loads the journal."""
