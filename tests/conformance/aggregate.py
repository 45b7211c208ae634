"""The aggregate conformance suite: one abstract class, subclassed for every stream owner's
state (:class:`actors.aggregate.Aggregate`), proving on a tape recorded from a real node:

- **live equals replayed**: every record a live writer folded is one the journal holds, as it
  holds it (the redacted event, its stream, its commit time and its principal), and the state it
  folded to equals the fold of the journal up to that record, at every prefix; every record of
  the journal was folded by its live writer;
- **apply is total**: every state of the tape, given a record of every kind of the catalog (its
  own kinds aimed at it, and kinds it ignores), folds to a state and never raises; so does
  ``initial``;
- **a finished state decides nothing**: every decision the aggregate makes on a finished state
  (a run that ended, a completed invocation, a deleted memory item, ...) emits no event.

The tape (:mod:`tests.conformance.aggregate_tape`) is recorded once per session from a real
node (journal, actors, Cedar, HTTP, a webhook channel, the watchdog, reflection, the task
queue), with every aggregate's ``initial`` and ``apply`` wrapped to record what each live writer
folded (:func:`recording`).
"""

from __future__ import annotations

import sys
import threading
import types
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Annotated, Any, Generic, Literal, TypeVar, Union, get_args, get_origin

import msgspec
import pytest

from actors.aggregate import fold
from actors.stream import Recorded
from events import StoredEvent
from events.catalog import CATALOG, Event, kind_of

S = TypeVar("S")


# --- recording what the live writers fold -----------------------------------------------------


@dataclass(frozen=True)
class Call:
    """One fold step a writer made: ``before`` (None: ``initial``), the record, the state after."""

    before: Any
    rec: Recorded
    after: Any
    from_journal: bool
    """The record was read back from the journal (a recovery or a re-fold), not appended by the
    writer that folded it."""


@dataclass
class Recording:
    """Every fold step of each aggregate module while a node ran, by module name."""

    calls: dict[str, list[Call]] = field(default_factory=dict)
    _read: dict[int, Recorded] = field(default_factory=dict)
    """Records made from journal rows (:meth:`Recorded.of`), by id (kept alive: ids stay unique)."""
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def read(self, rec: Recorded) -> Recorded:
        with self._lock:
            self._read[id(rec)] = rec
        return rec

    def add(self, module: str, before: Any, rec: Recorded, after: Any) -> None:
        with self._lock:
            from_journal = self._read.get(id(rec)) is rec
            self.calls.setdefault(module, []).append(Call(before, rec, after, from_journal))


@contextmanager
def recording(modules: Iterable[types.ModuleType]) -> Iterator[Recording]:
    """Wrap each aggregate module's ``initial`` and ``apply`` (wherever a loaded module bound
    them, under any name) and :meth:`Recorded.of`, for as long as the block runs."""
    out = Recording()
    mp = pytest.MonkeyPatch()
    try:
        of = Recorded.of.__func__  # type: ignore[attr-defined]
        mp.setattr(Recorded, "of", classmethod(lambda cls, stored: out.read(of(cls, stored))))
        for module in modules:
            name = module.__name__
            initial, apply = module.initial, module.apply

            def recorded_initial(first: Recorded, _f: Any = initial, _n: str = name) -> Any:
                after = _f(first)
                if after is not None:
                    out.add(_n, None, first, after)
                return after

            def recorded_apply(state: Any, rec: Recorded, _f: Any = apply, _n: str = name) -> Any:
                after = _f(state, rec)
                out.add(_n, state, rec, after)
                return after

            for original, wrapper in ((initial, recorded_initial), (apply, recorded_apply)):
                for loaded in list(sys.modules.values()):
                    if not loaded.__name__.startswith(("actors", "transports")):
                        continue
                    for attr, value in list(vars(loaded).items()):
                        if value is original:
                            mp.setattr(loaded, attr, wrapper)
        yield out
    finally:
        mp.undo()


@dataclass
class Tape:
    """A real node's run: the journal's rows, in order, and what every live writer folded."""

    rows: list[StoredEvent]
    recording: Recording

    def __repr__(self) -> str:
        return f"Tape({len(self.rows)} rows)"

    @property
    def records(self) -> list[Recorded]:
        return [Recorded.of(row) for row in self.rows]


# --- example events ---------------------------------------------------------------------------


def example(cls: type[Event], ids: dict[str, Any]) -> Event:
    """An instance of ``cls`` with a plain value of its type in every field, and ``ids``'
    values in the fields of those names (the ids of the aggregate it is aimed at)."""
    values = {
        f.name: ids[f.name] if f.name in ids else _value(f.type)
        for f in msgspec.structs.fields(cls)
    }
    return cls(**values)


def _value(tp: Any) -> Any:
    origin, args = get_origin(tp), get_args(tp)
    if origin is Annotated:
        return _value(args[0])
    if origin is Union or isinstance(tp, types.UnionType):
        return None if type(None) in args else _value(args[0])
    if origin is Literal:
        return args[0]
    if origin in (tuple, list, set, frozenset):
        return origin()
    if origin is dict:
        return {}
    if isinstance(tp, type):
        if issubclass(tp, bool):
            return False
        if issubclass(tp, int | float):
            return tp(1)
        if issubclass(tp, str):
            return "x"
        if issubclass(tp, bytes):
            return b""
        if issubclass(tp, msgspec.Struct):
            return tp(**{f.name: _value(f.type) for f in msgspec.structs.fields(tp)})
    return None


def _ids(first: Event) -> dict[str, Any]:
    return {
        f.name: getattr(first, f.name)
        for f in msgspec.structs.fields(first)
        if f.name.endswith("_id") or f.name in ("channel", "tool")
    }


# --- the suite --------------------------------------------------------------------------------


class AggregateConformance(Generic[S]):
    """Subclass per aggregate: set :attr:`aggregate` and :attr:`kinds_on_tape`, define
    :meth:`key` and :meth:`instances`, and :meth:`finished` where the aggregate has finished
    states. The ``tape`` fixture is the session's recorded node run."""

    aggregate: types.ModuleType
    """The module that is the aggregate (its ``initial`` and ``apply``)."""
    kinds_on_tape: frozenset[str]
    """Kinds the tape must hold for this aggregate (so the recording exercised them)."""
    refusals: tuple[type[Exception], ...] = ()
    """What a decision on a finished state may raise instead of emitting nothing."""
    unfolded_kinds: frozenset[str] = frozenset()
    """Kinds a live writer appends without folding them (it does not wait for the commit):
    allowed only where folding them changes nothing, which the suite checks."""
    read_back_kinds: frozenset[str] = frozenset()
    """Kinds a live writer submits without waiting, folding its own result once durable: a
    cache's follower reading the journal may fold the record first (the same fold, checked
    above), so it must be folded, live or read back."""

    def key(self, state: S) -> str:
        """Which instance ``state`` is (a session id, a run id, ...)."""
        raise NotImplementedError

    def instances(self, tape: Tape) -> dict[str, list[Recorded]]:
        """Each instance's records in the journal, in order: what recovery folds."""
        raise NotImplementedError

    def finished(self, state: S) -> Sequence[Callable[[], Sequence[Event] | Event | None]]:
        """Every decision the aggregate could make on the finished parts of ``state`` (none:
        nothing of it is finished); each returns the events it decides."""
        return ()

    # --- helpers ----------------------------------------------------------------------------

    def fold(self, records: Sequence[Recorded]) -> S | None:
        state: S | None = fold(self.aggregate, records)
        return state

    def calls(self, tape: Tape) -> list[Call]:
        return tape.recording.calls.get(self.aggregate.__name__, [])

    def states(self, tape: Tape) -> Iterator[tuple[list[Recorded], S]]:
        """Every prefix of every instance of the tape, with its fold."""
        for records in self.instances(tape).values():
            for end in range(1, len(records) + 1):
                state = self.fold(records[:end])
                if state is not None:
                    yield records[:end], state

    # --- the tests --------------------------------------------------------------------------

    def test_the_tape_exercises_the_aggregate(self, tape: Tape) -> None:
        instances = self.instances(tape)
        assert instances, "the recorded run has no instance of this aggregate"
        kinds = {kind_of(rec.event) for records in instances.values() for rec in records}
        assert self.kinds_on_tape <= kinds, sorted(self.kinds_on_tape - kinds)
        assert any(not c.from_journal for c in self.calls(tape)), "no live writer folded"

    def test_live_state_equals_the_fold_of_the_journal_at_every_prefix(self, tape: Tape) -> None:
        """Each state a writer folded equals the fold, in journal order, of exactly the records
        that writer had folded by then (its prefix: for a run, its own records and those its
        tools reported, which may reach it after a later record of its own was committed)."""
        instances = self.instances(tape)
        folded: dict[tuple[str, frozenset[int]], Any] = {}
        seen: dict[int, frozenset[int]] = {}
        """State (by id: every state stays referenced by its call) -> the records behind it."""
        live: dict[str, set[int]] = {key: set() for key in instances}
        anyhow: dict[str, set[int]] = {key: set() for key in instances}

        def replayed(key: str, indices: frozenset[int]) -> Any:
            if (key, indices) not in folded:
                records = instances[key]
                folded[key, indices] = self.fold([records[i] for i in sorted(indices)])
            return folded[key, indices]

        for call in self.calls(tape):
            key = self.key(call.after)
            records = instances.get(key, [])
            before = (
                seen.get(id(call.before), frozenset()) if call.before is not None else frozenset()
            )
            at = [i for i, rec in enumerate(records) if rec == call.rec]
            assert at, f"{key}: a writer folded a record the journal does not hold: {call.rec!r}"
            index = next((i for i in at if i not in before), at[0])
            after = before | {index}
            expected = replayed(key, after)
            assert call.after == expected, (
                f"{key}: folding {kind_of(call.rec.event)} gave a state the journal's fold of "
                f"the same records does not:\n live   {call.after!r}\n replay {expected!r}"
            )
            seen[id(call.after)] = after
            anyhow.setdefault(key, set()).add(index)
            if not call.from_journal:
                live[key].add(index)
        for key, records in instances.items():
            missed = [i for i in range(len(records)) if i not in live[key]]
            for i in missed:
                kind = kind_of(records[i].event)
                if kind in self.read_back_kinds and i in anyhow[key]:
                    continue
                assert kind in self.unfolded_kinds, f"{key}: no live writer folded {kind} ({i})"
                state = self.fold(records[:i])
                assert state is None or self.aggregate.apply(state, records[i]) == state, kind

    def test_apply_is_total(self, tape: Tape) -> None:
        applied = 0
        for records, state in self.states(tape):
            first, last = records[0], records[-1]
            ids = _ids(first.event)
            for cls in CATALOG:
                for event in (example(cls, ids), example(cls, {})):
                    for stream in (last.stream, "elsewhere/x"):
                        rec = Recorded(event, stream, last.at_ms + 1, "someone")
                        after = self.aggregate.apply(state, rec)
                        assert isinstance(after, type(state)), (cls, after)
                        initial = self.aggregate.initial(rec)
                        assert initial is None or isinstance(initial, type(state))
                        applied += 1
        assert applied

    def test_decide_on_a_finished_state_emits_nothing(self, tape: Tape) -> None:
        if type(self).finished is AggregateConformance.finished:
            pytest.skip("this aggregate has no finished state: it lives as long as the node")
        decisions = [d for _, state in self.states(tape) for d in self.finished(state)]
        assert decisions, "the recorded run has no finished state of this aggregate"
        for decide in decisions:
            try:
                emitted = decide()
            except self.refusals:
                continue
            assert not emitted, emitted
