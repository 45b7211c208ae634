"""The journal's ULIDs: each the 26-character Crockford form of its value (as python-ulid
reads it), and strictly increasing, within a millisecond, across milliseconds, when the clock
steps back, and when the random part overflows into the time field (the generator keeps the
encoded time of the last id: a carry must not leave it stale)."""

from __future__ import annotations

import os
import random
import time

from ulid import ULID

from events.ids import UlidGenerator, encode_ulid, new_id


class _AllOnes(random.Random):
    """Random bits that are all ones: the next id of the same millisecond carries."""

    def getrandbits(self, k: int) -> int:
        return (1 << k) - 1


def _value(text: str) -> int:
    return int(ULID.from_str(text))


def test_ids_are_their_values_encoded_and_strictly_increasing() -> None:
    ids = UlidGenerator()
    clock = [5, 5, 5, 6, 6, 1_700_000_000_000, 1_700_000_000_000, 3, 3, (1 << 48) - 2]
    made = [ids.new(ms) for ms in clock for _ in range(50)]
    assert made == sorted(set(made))
    for text in made:
        assert len(text) == 26
        assert encode_ulid(_value(text)) == text
    assert _value(made[0]) >> 80 == 5
    assert _value(made[-1]) >> 80 == (1 << 48) - 2
    assert _value(made[-51]) >> 80 == 1_700_000_000_000  # the clock stepped back to 3: kept


def test_a_carry_into_the_time_field_is_encoded() -> None:
    ids = UlidGenerator()
    ids._random = _AllOnes()
    first, second, third = ids.new(7), ids.new(7), ids.new(8)
    assert _value(first) == (7 << 80) | ((1 << 80) - 1)
    assert _value(second) == 8 << 80
    assert second[:10] != first[:10]
    assert _value(third) == (8 << 80) | ((1 << 80) - 1)
    assert first < second < third


def test_a_forked_child_makes_ids_of_its_own() -> None:
    """A child forked from a process that made ids (the suite's CLI zygote, tests/zygote.py, is
    one) draws its random parts afresh: a copy of the parent's state made the parent's next ids
    in every child, in the same millisecond, whatever generator (the module's or a journal's)."""
    own = UlidGenerator()
    own.new(7)
    new_id()
    # The ids compared are of a later millisecond than the last: none is the last one plus 1.
    time.sleep(0.002)
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: its next ids, then gone without pytest's teardown
        os.close(read)
        os.write(write, f"{own.new(8)} {new_id()}".encode())
        os._exit(0)
    os.close(write)
    with os.fdopen(read) as answer:
        child_own, child_default = answer.read().split()
    assert os.waitpid(pid, 0)[1] == 0
    assert child_own[10:] != own.new(8)[10:]
    assert child_default[10:] != new_id()[10:]
