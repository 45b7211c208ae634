"""The one shape of every stream owner's state: an :class:`Aggregate` folded from
:class:`~actors.stream.Recorded` records.

An aggregate is a frozen state and two pure functions: :meth:`Aggregate.initial` makes the
state from the record that starts it (a session's ``session.created``, a run's
``run.accepted``, ...) and :meth:`Aggregate.apply` folds every later record into it. A module
that defines both functions is an aggregate (``fold(actors.sessions.state, records)``), as are
:mod:`actors.runs.state`, :mod:`actors.invocations.state`, :mod:`actors.tasks.state`,
:mod:`actors.learning.state`, :mod:`actors.watchdog.decide`,
:mod:`actors.channels.router`, :mod:`transports.access.tokens` and :mod:`actors.memory.items`.

The contract every one of them keeps (``tests/conformance/aggregate.py`` proves it for each):

- ``Recorded`` is the only input, so a live writer (folding the records its own append
  returned) and recovery (folding the journal's rows) cannot differ by what they were fed;
- ``apply`` is total: it never raises, whatever the record (a kind it ignores changes nothing
  but the stream's next seq). A record the aggregate's rules forbid is refused by the writer
  before it is appended, never by the fold, so a journal always folds;
- ``initial`` answers None for a record that starts nothing (a record of another aggregate,
  or an out-of-order one): :func:`fold` skips records until one starts the state.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol, TypeVar

from actors.stream import Recorded

S = TypeVar("S")


class Aggregate(Protocol[S]):
    """A stream owner: a frozen state folded from its own records."""

    def initial(self, first: Recorded) -> S | None:
        """The state ``first`` starts, or None when it starts none."""
        ...

    def apply(self, state: S, rec: Recorded) -> S:
        """``state`` after ``rec``; total, never raises."""
        ...


def fold(aggregate: Aggregate[S], records: Iterable[Recorded], state: S | None = None) -> S | None:
    """``state`` (None: nothing yet) after ``records``, in order: the first record that starts
    the aggregate makes it, every later one is applied. None when no record started it."""
    for rec in records:
        state = aggregate.initial(rec) if state is None else aggregate.apply(state, rec)
    return state
