"""The memory view: memory items folded from ``memory.*`` events, with the two indexes that the
hybrid search (:mod:`projections.memory.search`) reads.

Tables (all in views.db, all rebuilt from the journal like every view):

``memory_items``
    One row per item ever written, keyed by ``item_id``; ``row`` is the journal position of the
    item's latest ``memory.item_written`` and is the rowid of its entries in both indexes. A
    deleted item keeps its row (``deleted_at_ms`` set) and leaves both indexes.
``memory_fts``
    FTS5 (contentless, with deletes; Porter stemming over unicode61) on text and tags, for bm25.
``memory_vec``
    sqlite-vec ``vec0`` of the embedder's vectors (cosine distance), with the item's audience
    (as :func:`audience_key`) and ``expires_at_ms`` as metadata columns, so a KNN query filters
    by who may see an item and by expiry inside the index instead of after it.
``memory_index``
    One row naming the embedder that built ``memory_vec`` (name, fingerprint, dimensions), and
    ``changed_at``: the journal position of the last event that changed the indexes (0: none).
    The indexes at a given ``changed_at`` are the fold of the journal up to it, so they never
    differ between two reads that see the same value: readers key what they derive from the
    indexes on it (:mod:`projections.memory.stats`) and it is invalidated exactly when the fold
    changes them.

Expiry is a read-time filter (the fold cannot know the reader's clock): an expired item stays in
the tables and the search never returns it. The projection's ``version`` is derived from its
schema version *and* the embedder's fingerprint, so starting the projector with another
embedder drops these tables and folds every memory event again with the new one.

Vectors are computed in ``flush`` (once per projector batch, in chunks) rather than per event:
a real model embeds a batch of texts far faster than the same texts one by one.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import os
import struct
import zlib
from collections.abc import Sequence

import apsw
import msgspec

from events import Event, JournalReadPort, StoredEvent
from events.catalog import MemoryItemDeleted, MemoryItemWritten, kinds_of
from projections.memory.bm25 import tokenize_spec
from projections.memory.embedders import Embedder, HashingEmbedder
from projections.memory.matrix import Added, VectorMatrix

SCHEMA_VERSION = 4
"""Bump when the memory tables change shape or meaning (rebuilds them)."""
NO_EXPIRY = (1 << 63) - 1
"""``memory_vec.expires_at_ms`` of an item that never expires (vec0 metadata cannot be NULL)."""
EMBED_CHUNK = 64
"""How many texts one embedder call gets when a batch is flushed."""

_json = msgspec.json.Encoder()


def load_vec(conn: apsw.Connection) -> None:
    """Load the sqlite-vec extension into ``conn`` (every connection that reads or writes
    ``memory_vec`` needs it; loading twice is harmless). Extension loading is switched off
    again afterwards, so SQL run on the connection cannot load another library."""
    conn.enable_load_extension(True)
    try:
        conn.load_extension(vec_library())
    finally:
        conn.enable_load_extension(False)


@functools.cache
def vec_library() -> str:
    """Where sqlite-vec's loadable library is (``sqlite_vec.loadable_path()``: its package's
    ``vec0``), found without importing the package: its ``__init__`` imports numpy (about 0.15 s
    of CPU at the node's start) for a helper reel does not use."""
    spec = importlib.util.find_spec("sqlite_vec")
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError("sqlite_vec is not installed", name="sqlite_vec")
    return os.path.join(spec.submodule_search_locations[0], "vec0")


def pack_vector(vector: Sequence[float]) -> bytes:
    """A vector as sqlite-vec's ``float[]`` blob: little-endian float32s."""
    return struct.pack(f"<{len(vector)}f", *vector)


def audience_key(audience: str) -> int:
    """``audience`` (:func:`audience_of`) as ``memory_vec``'s metadata: the first 63 bits of its
    SHA-256. vec0 compares an integer per row in a KNN scan far faster than a string (at 100,000
    items 20 ms against 44 ms); a collision could only add another audience's rows to the
    candidates, and the search checks every candidate's audience where it reads the item."""
    return int.from_bytes(hashlib.sha256(audience.encode()).digest()[:8], "big") >> 1


def audience_of(scope: str, principal: str | None, session_id: str | None) -> str:
    """Who may see an item, as one comparable string: ``global``, ``principal:<p>`` or
    ``session:<id>`` (an item of a scope whose owner is missing is seen by no one)."""
    if scope == "global":
        return "global"
    if scope == "session":
        return f"session:{session_id or ''}"
    return f"principal:{principal or ''}"


def projection_version(embedder: Embedder) -> int:
    """The memory projection's version: the schema version in the high 32 bits, the CRC-32 of
    the embedder's fingerprint in the low ones, so either changing rebuilds the view."""
    return (SCHEMA_VERSION << 32) | zlib.crc32(embedder.fingerprint.encode())


def embedding_text(text: str, tags: tuple[str, ...]) -> str:
    """What an item's vector is computed from: its text, then its tags."""
    return f"{text}\n{' '.join(tags)}" if tags else text


def _sql_text(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


class MemoryProjection:
    """Folds ``memory.item_written`` / ``memory.item_deleted`` into the memory tables."""

    name: str = "memory"
    tables: tuple[str, ...] = ("memory_items", "memory_fts", "memory_vec", "memory_index")
    kinds: frozenset[str] | None = frozenset(kinds_of(MemoryItemWritten, MemoryItemDeleted))

    def __init__(
        self, embedder: Embedder | None = None, matrix: VectorMatrix | None = None
    ) -> None:
        self.embedder: Embedder = embedder if embedder is not None else HashingEmbedder()
        self.matrix = matrix
        """The vectors a view of this process searches in memory (:mod:`projections.memory.
        matrix`): this projection hands it every committed batch's changes."""
        if matrix is not None:
            matrix.kept = True
        self.version: int = projection_version(self.embedder)
        self.ddl: str = f"""
        CREATE TABLE IF NOT EXISTS memory_items(
            item_id TEXT PRIMARY KEY,
            row INTEGER NOT NULL UNIQUE,
            text TEXT NOT NULL,
            source TEXT NOT NULL,
            tags TEXT NOT NULL,
            scope TEXT NOT NULL,
            principal TEXT,
            session_id TEXT,
            audience TEXT NOT NULL,
            written_by TEXT NOT NULL,
            created_at_ms INTEGER NOT NULL,
            updated_at_ms INTEGER NOT NULL,
            expires_at_ms INTEGER,
            deleted_at_ms INTEGER,
            deleted_by TEXT,
            deleted_reason TEXT
        );
        CREATE INDEX IF NOT EXISTS memory_items_by_audience ON memory_items(audience, item_id);
        CREATE VIRTUAL TABLE IF NOT EXISTS memory_fts USING fts5(
            text, tags, content='', contentless_delete=1,
            tokenize='{tokenize_spec()}'
        );
        CREATE VIRTUAL TABLE IF NOT EXISTS memory_vec USING vec0(
            item_row INTEGER PRIMARY KEY,
            embedding float[{self.embedder.dim}] distance_metric=l2,
            audience_key INTEGER,
            expires_at_ms INTEGER
        );
        CREATE TABLE IF NOT EXISTS memory_index(
            id INTEGER PRIMARY KEY CHECK (id = 1),
            embedder TEXT NOT NULL,
            fingerprint TEXT NOT NULL,
            dim INTEGER NOT NULL,
            changed_at INTEGER NOT NULL DEFAULT 0
        );
        INSERT INTO memory_index(id, embedder, fingerprint, dim) VALUES (
            1, {_sql_text(self.embedder.name)}, {_sql_text(self.embedder.fingerprint)},
            {int(self.embedder.dim)}
        ) ON CONFLICT(id) DO UPDATE SET embedder = excluded.embedder,
            fingerprint = excluded.fingerprint, dim = excluded.dim;
        """
        self._pending: dict[int, tuple[str, str, int]] = {}
        """Rows whose vectors are still to be written at ``flush``: row -> (text, audience,
        expiry)."""
        self._base: int | None = None
        """``memory_index.changed_at`` before this batch's first change (``None``: none yet)."""
        self._changed_at = 0
        self._added: Added = {}
        self._removed: set[int] = set()
        """This batch's changes to ``memory_vec``, for :attr:`matrix` once it commits."""

    def resume(self, reader: JournalReadPort, position: int, conn: apsw.Connection) -> None:
        """The projector opened views.db (rebuilt, perhaps): the matrix is loaded again."""
        if self.matrix is not None:
            self.matrix.drop()

    def apply(self, conn: apsw.Connection, stored: StoredEvent, event: Event) -> None:
        if isinstance(event, MemoryItemWritten):
            self._written(conn, stored, event)
        elif isinstance(event, MemoryItemDeleted):
            if not self._deleted(conn, stored, event):
                return
        else:
            return
        if self.matrix is not None and self._base is None:
            self._base = int(conn.execute("SELECT changed_at FROM memory_index").get)
        # Re-running the DDL (every projector start) keeps this: only a fold moves it.
        conn.execute("UPDATE memory_index SET changed_at = ?", (stored.position,))
        self._changed_at = stored.position

    def _unindex(self, conn: apsw.Connection, row: int) -> None:
        conn.execute("DELETE FROM memory_fts WHERE rowid = ?", (row,))
        if self._pending.pop(row, None) is None:
            conn.execute("DELETE FROM memory_vec WHERE item_row = ?", (row,))
            if self.matrix is not None:
                self._removed.add(row)

    def _written(
        self, conn: apsw.Connection, stored: StoredEvent, event: MemoryItemWritten
    ) -> None:
        created = stored.recorded_at_ms
        previous = conn.execute(
            "SELECT row, created_at_ms, deleted_at_ms FROM memory_items WHERE item_id = ?",
            (event.item_id,),
        ).fetchone()
        if previous is not None:
            row, created, deleted_at = previous
            if deleted_at is None:
                self._unindex(conn, int(row))
        owner = (event.principal or stored.principal) if event.scope == "principal" else None
        session_id = event.session_id if event.scope == "session" else None
        audience = audience_of(event.scope, owner, session_id)
        tags = tuple(event.tags)
        conn.execute(
            "INSERT OR REPLACE INTO memory_items(item_id, row, text, source, tags, scope,"
            " principal, session_id, audience, written_by, created_at_ms, updated_at_ms,"
            " expires_at_ms) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)",
            (
                event.item_id,
                stored.position,
                event.text,
                event.source,
                _json.encode(tags).decode(),
                event.scope,
                owner,
                session_id,
                audience,
                stored.principal,
                created,
                stored.recorded_at_ms,
                event.expires_at_ms,
            ),
        )
        conn.execute(
            "INSERT INTO memory_fts(rowid, text, tags) VALUES (?,?,?)",
            (stored.position, event.text, " ".join(tags)),
        )
        expiry = NO_EXPIRY if event.expires_at_ms is None else event.expires_at_ms
        self._pending[stored.position] = (embedding_text(event.text, tags), audience, expiry)

    def _deleted(
        self, conn: apsw.Connection, stored: StoredEvent, event: MemoryItemDeleted
    ) -> bool:
        """Forget the item; whether there was one to forget (the indexes changed)."""
        found = conn.execute(
            "SELECT row FROM memory_items WHERE item_id = ? AND deleted_at_ms IS NULL",
            (event.item_id,),
        ).fetchone()
        if found is None:
            return False  # unknown or already deleted: nothing to forget
        self._unindex(conn, int(found[0]))
        conn.execute(
            "UPDATE memory_items SET deleted_at_ms = ?, deleted_by = ?, deleted_reason = ?"
            " WHERE item_id = ?",
            (stored.recorded_at_ms, stored.principal, event.reason, event.item_id),
        )
        return True

    def flush(self, conn: apsw.Connection) -> None:
        """Embed the items written in this batch and store their vectors. An item with nothing
        to embed (a zero vector) is left out of ``memory_vec``: lexical search still finds it."""
        pending = sorted(self._pending.items())
        self._pending.clear()
        for start in range(0, len(pending), EMBED_CHUNK):
            chunk = pending[start : start + EMBED_CHUNK]
            vectors = self.embedder.embed([text for _, (text, _, _) in chunk])
            for (row, (_, audience, expiry)), vector in zip(chunk, vectors, strict=True):
                if not any(vector):
                    continue
                blob, key = pack_vector(vector), audience_key(audience)
                conn.execute(
                    "INSERT INTO memory_vec(item_row, embedding, audience_key, expires_at_ms)"
                    " VALUES (?,?,?,?)",
                    (row, blob, key, expiry),
                )
                if self.matrix is not None:
                    self._added[row] = (blob, key, expiry)

    def committed(self) -> None:
        """The batch is durable: the matrix follows it."""
        base, self._base = self._base, None
        added, removed = self._added, self._removed
        self._added, self._removed = {}, set()
        if self.matrix is not None and base is not None:
            self.matrix.committed(base, self._changed_at, added, removed)

    def reset(self) -> None:
        """The batch rolled back: forget the vectors it would have written."""
        self._pending.clear()
        self._base = None
        self._added, self._removed = {}, set()
