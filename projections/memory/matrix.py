"""The memory index's vectors as one float32 matrix in this process: an exact KNN by one
matrix-vector product, instead of sqlite-vec's scan.

sqlite-vec 0.1.9's wheel is built without SIMD and reads every row of ``memory_vec`` for each
query: at 100,000 items of 256 dimensions ~30-45 ms a search. The same vectors in one contiguous
numpy matrix answer the same question (the ``k`` nearest by Euclidean distance among the rows
an audience may see and that have not expired) in ~10 ms, bound by reading the matrix's 100 MB:
exact, so the search's results do not change (tests/projections/test_memory_matrix.py holds
them equal to sqlite-vec's).

The matrix is derived from the view, never a second source of truth: it is loaded from
``memory_vec`` by the first search that needs it, in that search's read transaction, and it
answers only a search whose snapshot is at the generation it holds (``memory_index.changed_at``,
as :mod:`projections.memory.stats`); any other search reads sqlite-vec as before. A node keeps it
current without reloading: the memory projection (:class:`projections.memory.view.
MemoryProjection`) hands it each committed batch's inserts and deletes (:meth:`VectorMatrix.
committed`). Without a projection (a view over a views.db another process writes), a search at
a newer generation reloads it.

numpy is imported by the first load, never at a node's start (tests/transports/node/
test_daemon_imports.py)."""

from __future__ import annotations

import importlib
import os
import sys
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import TYPE_CHECKING

import apsw

if TYPE_CHECKING:
    import numpy as np
    from numpy.typing import NDArray

BLAS_THREADS = "OPENBLAS_NUM_THREADS"


def load_numpy() -> ModuleType:
    """numpy, imported with its BLAS on one thread: a search is one matrix-vector product, which
    the memory's bandwidth bounds, and OpenBLAS's threads (one per core) took a 3,000 x 256
    product from 0.2 to 11 ms on this 2-core machine under load (they wake, spin and wait for a
    core each call; 100,000 x 256: median 12 against 21 ms). OpenBLAS reads the variable once,
    as it loads; it is removed again, so no child process inherits it. When numpy was imported
    before (the ``e5-small`` embedder imports it through this too), its setting stays."""
    if "numpy" not in sys.modules and BLAS_THREADS not in os.environ:
        os.environ[BLAS_THREADS] = "1"
        try:
            return importlib.import_module("numpy")
        finally:
            del os.environ[BLAS_THREADS]
    return importlib.import_module("numpy")


Added = dict[int, tuple[bytes, int, int]]
"""Rows added by a batch: row -> (its vector as sqlite-vec's blob, audience key, expiry)."""


@dataclass
class _Loaded:
    """The matrix at one generation: ``count`` rows of each array are live, in no order."""

    generation: int
    dim: int
    count: int
    rows: NDArray[np.int64]
    vectors: NDArray[np.float32]
    norms: NDArray[np.float32]
    """Each vector's squared length (1 up to rounding: the L2 distance is computed exactly
    from it, as ``|x|^2 - 2 q.x + |q|^2``)."""
    keys: NDArray[np.int64]
    """Each row's ``audience_key``."""
    expires: NDArray[np.int64]
    slots: dict[int, int]
    """Where each row is."""


class VectorMatrix:
    """``memory_vec`` in memory, for one process's searches (any thread: one lock)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._loaded: _Loaded | None = None
        self.kept = False
        """Whether a projection in this process hands it every committed change: then a search
        whose snapshot is newer waits for no reload (it reads sqlite-vec once, and the
        projection brings the matrix to that generation as it publishes the batch)."""
        self.loads = 0
        """How many times it was loaded from ``memory_vec``: for tests."""

    @property
    def generation(self) -> int | None:
        """The generation it holds (``None``: not loaded)."""
        loaded = self._loaded
        return None if loaded is None else loaded.generation

    def nbytes(self) -> int:
        """The memory its arrays hold."""
        loaded = self._loaded
        if loaded is None:
            return 0
        arrays = (loaded.rows, loaded.vectors, loaded.norms, loaded.keys, loaded.expires)
        return sum(a.nbytes for a in arrays)

    def drop(self) -> None:
        """Forget the vectors (the view is rebuilt): the next search loads them again."""
        with self._lock:
            self._loaded = None

    def nearest(
        self,
        conn: apsw.Connection,
        generation: int,
        query: Sequence[float],
        k: int,
        keys: Sequence[int],
        expiry: int,
    ) -> list[int] | None:
        """The ``k`` rows nearest ``query`` (ties by row) whose audience key is one of ``keys``
        and whose ``expires_at_ms`` is after ``expiry``, nearest first: what sqlite-vec's KNN
        ``embedding MATCH ? AND k = ? AND audience_key IN (...) AND expires_at_ms > ?`` finds,
        in the snapshot ``conn``'s read transaction is in, whose ``changed_at`` is
        ``generation``. ``None`` when the matrix cannot answer at that generation (the caller
        reads sqlite-vec)."""
        with self._lock:
            loaded = self._loaded
            if loaded is None or (loaded.generation < generation and not self.kept):
                loaded = self._loaded = self._load(conn, generation, len(query))
            if loaded.generation != generation or loaded.dim != len(query):
                return None
            return _nearest(loaded, query, k, keys, expiry)

    def _load(self, conn: apsw.Connection, generation: int, dim: int) -> _Loaded:
        np = load_numpy()
        self.loads += 1
        rows: list[int] = []
        blobs: list[bytes] = []
        keys: list[int] = []
        expires: list[int] = []
        for row, blob, key, expiry in conn.execute(
            "SELECT item_row, embedding, audience_key, expires_at_ms FROM memory_vec"
        ):
            rows.append(row)
            blobs.append(blob)
            keys.append(key)
            expires.append(expiry)
        dim = len(blobs[0]) // 4 if blobs else dim  # the index's; the query's when empty
        vectors = np.frombuffer(b"".join(blobs), dtype="<f4").reshape(len(blobs), dim).copy()
        return _Loaded(
            generation=generation,
            dim=dim,
            count=len(rows),
            rows=np.array(rows, dtype=np.int64),
            vectors=vectors,
            norms=np.einsum("ij,ij->i", vectors, vectors),
            keys=np.array(keys, dtype=np.int64),
            expires=np.array(expires, dtype=np.int64),
            slots={row: i for i, row in enumerate(rows)},
        )

    def committed(self, base: int, generation: int, added: Added, removed: set[int]) -> None:
        """A batch that moved the index from generation ``base`` to ``generation`` committed,
        adding the rows ``added`` and removing ``removed``: the matrix follows when it was at
        ``base``, stays when it was loaded at ``generation`` already, and is dropped otherwise
        (the next search loads it again)."""
        with self._lock:
            loaded = self._loaded
            if loaded is None or loaded.generation == generation:
                return
            if loaded.generation != base:
                self._loaded = None
                return
            for row in removed:
                _remove(loaded, row)
            if added:
                _add(loaded, added)
            loaded.generation = generation


def _nearest(
    loaded: _Loaded, query: Sequence[float], k: int, keys: Sequence[int], expiry: int
) -> list[int]:
    np = load_numpy()
    n = loaded.count
    q = np.asarray(query, dtype=np.float32)
    # Every row's product, then the visible ones: a product of only the visible rows would
    # first copy them (at 100,000 items ~60 MB a query).
    distance = loaded.norms[:n] - 2 * (loaded.vectors[:n] @ q)  # |x - q|^2 less |q|^2
    visible = loaded.expires[:n] > expiry
    audience = np.zeros(n, dtype=bool)
    for key in keys:
        audience |= loaded.keys[:n] == key
    candidates = np.flatnonzero(visible & audience)
    if candidates.size > k:
        candidates = candidates[np.argpartition(distance[candidates], k - 1)[:k]]
    rows = loaded.rows[candidates]
    order = np.lexsort((rows, distance[candidates]))
    return [int(r) for r in rows[order]]


def _remove(loaded: _Loaded, row: int) -> None:
    """Move the last row into ``row``'s slot."""
    slot = loaded.slots.pop(row, None)
    if slot is None:
        return
    last = loaded.count - 1
    if slot != last:
        moved = int(loaded.rows[last])
        for array in (loaded.rows, loaded.vectors, loaded.norms, loaded.keys, loaded.expires):
            array[slot] = array[last]
        loaded.slots[moved] = slot
    loaded.count = last


def _add(loaded: _Loaded, added: Added) -> None:
    np = load_numpy()

    fresh = [(row, entry) for row, entry in added.items() if row not in loaded.slots]
    need = loaded.count + len(fresh)
    if need > len(loaded.rows):  # grow by a quarter at least: a write costs O(1) amortised
        size = max(need, len(loaded.rows) + len(loaded.rows) // 4 + 64)
        loaded.rows = np.resize(loaded.rows, size)
        loaded.vectors = np.resize(loaded.vectors, (size, loaded.dim))
        loaded.norms = np.resize(loaded.norms, size)
        loaded.keys = np.resize(loaded.keys, size)
        loaded.expires = np.resize(loaded.expires, size)
    for row, (blob, key, expiry) in fresh:
        slot = loaded.count
        vector = np.frombuffer(blob, dtype="<f4")
        loaded.rows[slot] = row
        loaded.vectors[slot] = vector
        loaded.norms[slot] = vector @ vector
        loaded.keys[slot] = key
        loaded.expires[slot] = expiry
        loaded.slots[row] = slot
        loaded.count += 1
