"""The views reader pool: bounded, waits for a free connection, closes idle ones, never
deadlocks a thread that borrows twice."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import cast

import apsw
import msgspec
import pytest

from projections.pool import PooledReader, ReaderLimits


@pytest.fixture()
def views_db(tmp_path: Path) -> Path:
    path = tmp_path / "views.db"
    conn = apsw.Connection(str(path))
    conn.execute("CREATE TABLE t(x); INSERT INTO t VALUES (1)")
    conn.close()
    return path


class Counting(PooledReader):
    """A reader that counts what it opens and how many are lent out at once."""

    def __init__(self, path: Path, limits: ReaderLimits) -> None:
        super().__init__(path, limits)
        self.opened = 0
        self.lent = 0
        self.most_lent = 0
        self.lock = threading.Lock()

    def _connect(self) -> apsw.Connection:
        self.opened += 1
        return super()._connect()

    def read(self, hold_s: float) -> int:
        with self._borrow() as conn:
            with self.lock:
                self.lent += 1
                self.most_lent = max(self.most_lent, self.lent)
            time.sleep(hold_s)
            value = cast(int, conn.execute("SELECT x FROM t").fetchall()[0][0])
            with self.lock:
                self.lent -= 1
            return value


def test_a_burst_of_readers_never_opens_more_than_the_limit(views_db: Path) -> None:
    reader = Counting(views_db, ReaderLimits(readers=3))
    results: list[int] = []
    threads = [
        threading.Thread(target=lambda: results.append(reader.read(0.02))) for _ in range(40)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert results == [1] * 40  # every borrower was served, none failed
    assert reader.opened == 3
    assert reader.most_lent == 3  # the limit was reached, so the waiting was real
    assert reader.connections == 3
    reader.close()
    assert reader.connections == 0


def test_a_thread_borrowing_again_gets_a_second_connection_even_past_the_limit(
    views_db: Path,
) -> None:
    reader = Counting(views_db, ReaderLimits(readers=1))
    # Waiting for its own connection would deadlock a pool of one; sharing it would nest two
    # read transactions on one connection.
    with reader._borrow() as outer, reader._borrow() as inner:
        assert inner is not outer
        outer.execute("BEGIN")
        inner.execute("BEGIN")
        assert reader.connections == 2
        inner.execute("COMMIT")
        outer.execute("COMMIT")
    assert reader.connections == 1  # the extra one is closed when it comes back
    reader.close()


def test_an_idle_connection_is_closed_at_the_next_hand_back(views_db: Path) -> None:
    reader = Counting(views_db, ReaderLimits(readers=4, idle_close_s=0.05))
    done = threading.Barrier(3)

    def hold() -> None:
        with reader._borrow():
            done.wait(10)

    threads = [threading.Thread(target=hold) for _ in range(2)]
    for thread in threads:
        thread.start()
    done.wait(10)
    for thread in threads:
        thread.join(10)
    assert reader.connections == 2
    time.sleep(0.1)
    reader.read(0)  # takes one of the two, and hands it back: the other is stale by now
    assert reader.connections == 1
    reader.close()


def test_zero_idle_time_closes_each_connection_when_it_comes_back(views_db: Path) -> None:
    reader = Counting(views_db, ReaderLimits(readers=2, idle_close_s=0))
    assert reader.read(0) == reader.read(0) == 1
    assert reader.opened == 2
    assert reader.connections == 0


def test_a_connection_lent_out_at_close_is_closed_when_it_comes_back(views_db: Path) -> None:
    reader = Counting(views_db, ReaderLimits(readers=2))
    with reader._borrow() as conn:
        reader.close()
        assert conn.execute("SELECT x FROM t").fetchall() == [(1,)]
    assert reader.connections == 0
    with pytest.raises(apsw.ConnectionClosedError):
        conn.execute("SELECT 1")


def test_limits_refuse_nonsense() -> None:
    with pytest.raises(msgspec.ValidationError, match="readers"):
        msgspec.convert({"readers": 0}, ReaderLimits)
    with pytest.raises(msgspec.ValidationError, match="idle_close_s"):
        msgspec.convert({"idle_close_s": -1}, ReaderLimits)
