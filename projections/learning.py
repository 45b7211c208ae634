"""The learning view: candidates reflection proposed (facts, preferences, procedures), their
evidence and status, and what runs are offered of them (docs/learning.md).

Two tables, both folded from the journal alone:

- ``learning_candidates``: one row per candidate (``learning/<candidate_id>``): kind, text, the
  principal it concerns, confidence, evidence (runs and their tape positions) and status
  (``pending``, ``applied``, ``rejected``, ``rolled_back``), who decided last and why, the
  memory item an applied fact produced.
- ``learning_runs``: one row per run, the request's content words and the tool sequence the
  model chose, so reflection finds the earlier runs that did the same thing for a similar
  request (a procedure needs two) without reading the whole journal.

"Similar" is defined here, once, because both the extraction (actors/learning/rules.py) and
:meth:`LearningView.offered` ask it: two requests are similar when the Jaccard index of their
content-word sets is at least :data:`SIMILARITY` (0.5). Content words: the words (letters and
digits) of the request's lines that are not deterministic-provider directives (a line starting
with ``/``), lowercased, at least two characters, minus :data:`STOP_WORDS`.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import apsw
import msgspec

from events import Event, JournalReadPort, StoredEvent
from events.catalog import (
    CANDIDATE_STATUSES,
    LearningCandidateApplied,
    LearningCandidateProposed,
    LearningCandidateRejected,
    LearningCandidateRolledBack,
    LearningEvidenceAdded,
    RunAccepted,
    RunCancelled,
    RunCompleted,
    RunFailed,
    ToolCompleted,
    ToolProposed,
    kinds_of,
)
from events.lifecycle import STATUS_OF
from projections.base import folded
from projections.pool import PooledReader, ReaderLimits

SIMILARITY = 0.5
"""Two requests are similar at or above this Jaccard index of their content words."""
MAX_WORDS = 64
"""Content words kept per request (the first ones): enough to compare, bounded to store."""
OFFERED_PREFERENCES = 8
"""At most this many applied preferences are offered to one run (the most recent)."""
OFFERED_PROCEDURES = 2
"""At most this many procedure hints are offered to one run (the most similar)."""
PEERS = 50
"""Reflection compares a run with at most this many earlier runs that used the same tools."""
REFERENCE_CALL = "ref-"
"""Call ids of the reads a run's ``@file`` / ``@url`` references make: not the model's choice,
so not part of a procedure."""

_STOP = """a about above after again all also am an and any are as at be been before being below
between both but by can could did do does doing done down during each few for from further had
has have having he her here hers him his how i if in into is it its itself just let me more most
my no nor not now of off on once only or other our ours out over own please same she should so
some such than that the their theirs them then there these they this those through to too under
until up very was we were what when where which while who whom why will with would you your yours"""
STOP_WORDS = frozenset(_STOP.split())
"""Words too common to make two requests alike."""

_WORD = re.compile(r"[^\W_]+")
_json = msgspec.json.Encoder()


def request_text(text: str) -> str:
    """The request in a message: its lines that are not directives (``/tool ...``)."""
    return "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("/"))


def content_words(text: str) -> frozenset[str]:
    """The content words of a request (see the module docstring)."""
    out: list[str] = []
    for word in _WORD.findall(request_text(text).lower()):
        if (len(word) >= 2 or word.isdigit()) and word not in STOP_WORDS and word not in out:
            out.append(word)
            if len(out) >= MAX_WORDS:
                break
    return frozenset(out)


def jaccard(a: frozenset[str], b: frozenset[str]) -> float:
    """The Jaccard index: shared words over all words (0 when either is empty: a request
    without words is like nothing)."""
    if not a or not b:
        return 0.0
    return len(a & b) / len(a | b)


def similar(a: frozenset[str], b: frozenset[str]) -> bool:
    return jaccard(a, b) >= SIMILARITY


def words_of(column: str) -> frozenset[str]:
    """Content words as a view column stores them (space-separated, sorted)."""
    return frozenset(column.split())


def words_column(words: frozenset[str]) -> str:
    return " ".join(sorted(words))


# --- records ----------------------------------------------------------------------------------


class Evidence(msgspec.Struct, frozen=True, kw_only=True):
    """One run that shows a candidate, and the journal positions in its tape that do."""

    run_id: str
    positions: tuple[int, ...] = ()


class CandidateRecord(msgspec.Struct, frozen=True, kw_only=True):
    """A learning candidate as the view holds it (``GET /v1/learning/candidates/{id}``)."""

    candidate_id: str
    kind: str
    """fact, preference or procedure."""
    principal: str
    """Whom it concerns (whose runs showed it; whose runs it is offered to)."""
    text: str
    confidence_bps: int
    status: str
    """pending, applied, rejected or rolled_back."""
    evidence: tuple[Evidence, ...]
    runs: int
    """How many runs show it."""
    dedupe_key: str
    trigger: str
    """For a procedure: the content words a later request is compared with."""
    tools: tuple[str, ...]
    """For a procedure: the tool sequence."""
    extractor: str
    """rules (the deterministic provider's documented rules) or model."""
    proposed_at_ms: int
    proposed_position: int
    updated_at_ms: int
    decided_by: str | None
    """Who applied, rejected or rolled it back last (``reflection`` when automatic)."""
    decided_at_ms: int | None
    reason: str | None
    memory_item_id: str | None
    """The memory item an applied fact produced (kept after a rollback deleted it)."""


class Offered(msgspec.Struct, frozen=True, kw_only=True):
    """An applied learning offered to a run (:class:`actors.services.Learned`)."""

    candidate_id: str
    kind: str
    text: str


class KnownProcedure(msgspec.Struct, frozen=True, kw_only=True):
    """A procedure candidate reflection already proposed (any status): a later similar run
    adds its evidence there rather than start another."""

    candidate_id: str
    dedupe_key: str
    trigger: str
    text: str
    runs: int
    confidence_bps: int


class PeerRun(msgspec.Struct, frozen=True, kw_only=True):
    """An earlier completed run that used the same tools, as reflection compares it."""

    run_id: str
    accepted_position: int
    words: frozenset[str]
    request: str
    positions: tuple[int, ...]


# --- the projection ---------------------------------------------------------------------------


class LearningProjection:
    name: str = "learning"
    version: int = 1
    tables: tuple[str, ...] = ("learning_candidates", "learning_runs")
    kinds: frozenset[str] | None = frozenset(
        kinds_of(
            LearningCandidateProposed,
            LearningEvidenceAdded,
            LearningCandidateApplied,
            LearningCandidateRejected,
            LearningCandidateRolledBack,
            RunAccepted,
            ToolProposed,
            ToolCompleted,
            RunCompleted,
            RunFailed,
            RunCancelled,
        )
    )
    ddl: str = """
    CREATE TABLE IF NOT EXISTS learning_candidates(
        candidate_id TEXT PRIMARY KEY,
        kind TEXT NOT NULL,
        principal TEXT NOT NULL,
        text TEXT NOT NULL,
        confidence_bps INTEGER NOT NULL,
        status TEXT NOT NULL,
        evidence TEXT NOT NULL,
        runs INTEGER NOT NULL,
        dedupe_key TEXT NOT NULL,
        trigger TEXT NOT NULL,
        tools TEXT NOT NULL,
        extractor TEXT NOT NULL,
        proposed_at_ms INTEGER NOT NULL,
        proposed_position INTEGER NOT NULL,
        updated_at_ms INTEGER NOT NULL,
        decided_by TEXT,
        decided_at_ms INTEGER,
        reason TEXT,
        memory_item_id TEXT
    );
    CREATE INDEX IF NOT EXISTS learning_by_position ON learning_candidates(proposed_position);
    CREATE INDEX IF NOT EXISTS learning_offered ON learning_candidates(principal, status, kind);
    CREATE TABLE IF NOT EXISTS learning_runs(
        run_id TEXT PRIMARY KEY,
        principal TEXT NOT NULL,
        accepted_position INTEGER NOT NULL,
        words TEXT NOT NULL,
        request TEXT NOT NULL,
        tools TEXT NOT NULL,
        positions TEXT NOT NULL,
        ok INTEGER NOT NULL,
        state TEXT NOT NULL
    );
    CREATE INDEX IF NOT EXISTS learning_runs_by_tools ON learning_runs(principal, tools, state);
    """

    def __init__(self) -> None:
        self._runs: dict[str, list[Any]] = {}
        """Runs accepted in this batch: their ``learning_runs`` rows (the columns in order,
        tools and positions as lists), written by :meth:`flush`: one statement for a run's
        whole life in the batch that accepts it, where each event was one (a rebuild)."""

    def apply(self, conn: apsw.Connection, stored: StoredEvent, event: Event) -> None:
        at = stored.recorded_at_ms
        if isinstance(event, LearningCandidateProposed):
            evidence = _evidence(event.runs, event.positions)
            conn.execute(
                "INSERT OR REPLACE INTO learning_candidates(candidate_id, kind, principal, text,"
                " confidence_bps, status, evidence, runs, dedupe_key, trigger, tools, extractor,"
                " proposed_at_ms, proposed_position, updated_at_ms)"
                " VALUES (?,?,?,?,?,'pending',?,?,?,?,?,?,?,?,?)",
                (
                    event.candidate_id,
                    event.learning_kind,
                    event.principal,
                    event.text,
                    event.confidence_bps,
                    _json.encode(evidence).decode(),
                    len(evidence),
                    event.dedupe_key,
                    event.trigger,
                    _json.encode(event.tools).decode(),
                    event.extractor,
                    at,
                    stored.position,
                    at,
                ),
            )
        elif isinstance(event, LearningEvidenceAdded):
            row = conn.execute(
                "SELECT evidence FROM learning_candidates WHERE candidate_id = ?",
                (event.candidate_id,),
            ).fetchone()
            if row is None:
                return
            known = msgspec.json.decode(str(row[0]), type=list[Evidence])
            seen = {e.run_id for e in known}
            known += [e for e in _evidence(event.runs, event.positions) if e.run_id not in seen]
            conn.execute(
                "UPDATE learning_candidates SET evidence = ?, runs = ?, confidence_bps = ?,"
                " updated_at_ms = ? WHERE candidate_id = ?",
                (
                    _json.encode(known).decode(),
                    len(known),
                    event.confidence_bps,
                    at,
                    event.candidate_id,
                ),
            )
        elif isinstance(event, LearningCandidateApplied):
            conn.execute(
                "UPDATE learning_candidates SET status = 'applied', decided_by = ?,"
                " decided_at_ms = ?, reason = ?, memory_item_id = COALESCE(?, memory_item_id),"
                " updated_at_ms = ? WHERE candidate_id = ?",
                (event.by, at, event.reason, event.memory_item_id, at, event.candidate_id),
            )
        elif isinstance(event, LearningCandidateRejected | LearningCandidateRolledBack):
            status = "rejected" if isinstance(event, LearningCandidateRejected) else "rolled_back"
            conn.execute(
                "UPDATE learning_candidates SET status = ?, decided_by = ?, decided_at_ms = ?,"
                " reason = ?, updated_at_ms = ? WHERE candidate_id = ?",
                (status, event.by, at, event.reason, at, event.candidate_id),
            )
        else:
            self._run(conn, stored, event)

    def _run(self, conn: apsw.Connection, stored: StoredEvent, event: Event) -> None:
        """``learning_runs``: a run's request words, and the tools the model chose, in order."""
        if isinstance(event, RunAccepted):
            # INSERT OR REPLACE at the flush: the row as a fresh acceptance leaves it.
            self._runs[event.run_id] = [
                event.run_id,
                stored.principal,
                stored.position,
                words_column(content_words(event.text)),
                " ".join(request_text(event.text).split())[:120],
                [],
                [],
                1,
                "accepted",
            ]
            return
        row = self._runs.get(getattr(event, "run_id", ""))
        if isinstance(event, ToolProposed):
            if event.call_id.startswith(REFERENCE_CALL):
                return
            if row is not None:
                row[5].append(event.tool)
                row[6].append(stored.position)
                return
            conn.execute(
                "UPDATE learning_runs SET tools = json_insert(tools, '$[#]', ?),"
                " positions = json_insert(positions, '$[#]', ?) WHERE run_id = ?",
                (event.tool, stored.position, event.run_id),
            )
        elif isinstance(event, ToolCompleted):
            if event.ok:
                return
            if row is not None:
                row[7] = 0
                return
            conn.execute("UPDATE learning_runs SET ok = 0 WHERE run_id = ?", (event.run_id,))
        elif isinstance(event, RunCompleted | RunFailed | RunCancelled):
            state = STATUS_OF[type(event)].value
            if row is not None:
                row[8] = state
                return
            conn.execute(
                "UPDATE learning_runs SET state = ? WHERE run_id = ?", (state, event.run_id)
            )

    def flush(self, conn: apsw.Connection) -> None:
        """Write the ``learning_runs`` rows of the runs accepted in this batch."""
        if self._runs:
            conn.executemany(
                "INSERT OR REPLACE INTO learning_runs(run_id, principal, accepted_position,"
                " words, request, tools, positions, ok, state) VALUES (?,?,?,?,?,?,?,?,?)",
                [
                    (
                        *row[:5],
                        _json.encode(row[5]).decode(),
                        _json.encode(row[6]).decode(),
                        *row[7:],
                    )
                    for row in self._runs.values()
                ],
            )
            self._runs = {}

    def reset(self) -> None:
        """The batch rolled back: forget its rows."""
        self._runs = {}


def _evidence(runs: tuple[str, ...], positions: tuple[tuple[int, ...], ...]) -> list[Evidence]:
    return [
        Evidence(run_id=run, positions=positions[i] if i < len(positions) else ())
        for i, run in enumerate(runs)
    ]


# --- reading ----------------------------------------------------------------------------------


class CandidateFilter(msgspec.Struct, frozen=True, kw_only=True):
    """Which candidates a list keeps: each set field must match its column exactly."""

    status: str | None = None
    """One of :data:`CANDIDATE_STATUSES`."""
    kind: str | None = None
    """One of :data:`LEARNING_KINDS`."""
    principal: str | None = None


_COLUMNS = (
    "candidate_id, kind, principal, text, confidence_bps, status, evidence, runs, dedupe_key,"
    " trigger, tools, extractor, proposed_at_ms, proposed_position, updated_at_ms, decided_by,"
    " decided_at_ms, reason, memory_item_id"
)


class LearningView(PooledReader):
    """Reads of the learning view: safe from many threads, never writes (the projector owns
    views.db). Also the node's :class:`actors.services.LearningPort` (:meth:`offered`) and
    reflection's history of runs (:meth:`peers`).

    ``wait_for(position, timeout)``: waits until the views include a journal position (the
    projector's); reflection asks for peers only once the run it reflects on is folded."""

    def __init__(
        self,
        path: Path,
        wait_for: Callable[[int, float], object] | None = None,
        limits: ReaderLimits | None = None,
    ) -> None:
        super().__init__(path, limits)
        self._wait_for = wait_for

    def _query(self, sql: str, args: tuple[Any, ...]) -> list[tuple[Any, ...]]:
        with self._borrow() as conn:
            try:
                return list(conn.execute(sql, args))
            except apsw.SQLError as exc:
                if "no such table" in str(exc):  # views.db before the projector made it
                    return []
                raise

    def candidate(self, candidate_id: str) -> CandidateRecord | None:
        rows = self._query(
            f"SELECT {_COLUMNS} FROM learning_candidates WHERE candidate_id = ?", (candidate_id,)
        )
        return _record(rows[0]) if rows else None

    def candidates(
        self,
        where: CandidateFilter | None = None,
        after: str | None = None,
        limit: int = 50,
    ) -> list[CandidateRecord]:
        """Candidates in the order they were proposed, after the candidate ``after``."""
        clauses: list[str] = []
        args: list[Any] = []
        if after is not None:
            clauses.append(
                "proposed_position > COALESCE((SELECT proposed_position FROM learning_candidates"
                " WHERE candidate_id = ?), 0)"
            )
            args.append(after)
        for column, value in msgspec.structs.asdict(where or CandidateFilter()).items():
            if value is not None:
                clauses.append(f"{column} = ?")
                args.append(value)
        sql = f"SELECT {_COLUMNS} FROM learning_candidates"
        if clauses:
            sql += " WHERE " + " AND ".join(clauses)
        sql += " ORDER BY proposed_position LIMIT ?"
        args.append(limit)
        return [_record(row) for row in self._query(sql, tuple(args))]

    def counts(self) -> dict[str, int]:
        """Candidates per status (every status present, 0 when none)."""
        counts: dict[str, int] = dict.fromkeys(CANDIDATE_STATUSES, 0)
        for status, n in self._query(
            "SELECT status, COUNT(*) FROM learning_candidates GROUP BY status", ()
        ):
            counts[str(status)] = int(n)
        return counts

    def offered(self, principal: str, text: str) -> list[Offered]:
        """What a run of ``principal`` asking ``text`` is offered: the principal's applied
        preferences (the most recent :data:`OFFERED_PREFERENCES`, oldest first) and its
        applied procedures whose trigger is similar to the request (the
        :data:`OFFERED_PROCEDURES` most similar)."""
        rows = self._query(
            "SELECT candidate_id, kind, text, trigger FROM learning_candidates"
            " WHERE principal = ? AND status = 'applied' AND kind IN ('preference', 'procedure')"
            " ORDER BY proposed_position",
            (principal,),
        )
        preferences = [
            Offered(candidate_id=str(r[0]), kind=str(r[1]), text=str(r[2]))
            for r in rows
            if r[1] == "preference"
        ][-OFFERED_PREFERENCES:]
        words = content_words(text)
        scored = [
            (jaccard(words, words_of(str(r[3]))), i, r)
            for i, r in enumerate(rows)
            if r[1] == "procedure"
        ]
        procedures = [
            Offered(candidate_id=str(r[0]), kind=str(r[1]), text=str(r[2]))
            for score, _, r in sorted(scored, key=lambda s: (-s[0], s[1]))
            if score >= SIMILARITY
        ][:OFFERED_PROCEDURES]
        return preferences + procedures

    def procedures(
        self, principal: str, tools: tuple[str, ...], *, position: int
    ) -> list[KnownProcedure]:
        """The procedure candidates of ``principal`` for exactly ``tools``, oldest first.
        Waits (up to 5 s) for the views to include ``position`` first: the run reflected on
        has been folded, and so has everything before it."""
        if self._wait_for is not None:
            self._wait_for(position, 5.0)
        rows = self._query(
            "SELECT candidate_id, dedupe_key, trigger, text, runs, confidence_bps"
            " FROM learning_candidates WHERE principal = ? AND kind = 'procedure' AND tools = ?"
            " ORDER BY proposed_position",
            (principal, _json.encode(tools).decode()),
        )
        return [
            KnownProcedure(
                candidate_id=str(r[0]),
                dedupe_key=str(r[1]),
                trigger=str(r[2]),
                text=str(r[3]),
                runs=int(r[4]),
                confidence_bps=int(r[5]),
            )
            for r in rows
        ]

    def peers(
        self, principal: str, tools: tuple[str, ...], *, run_id: str, position: int
    ) -> list[PeerRun]:
        """Completed runs of ``principal`` other than ``run_id`` whose tool calls, all
        successful, were exactly ``tools`` (the newest :data:`PEERS`), once the views include
        ``position`` (as :meth:`procedures`)."""
        if self._wait_for is not None:
            self._wait_for(position, 5.0)
        rows = self._query(
            "SELECT run_id, accepted_position, words, request, positions FROM learning_runs"
            " WHERE principal = ? AND tools = ? AND state = 'done' AND ok = 1 AND run_id != ?"
            " ORDER BY accepted_position DESC LIMIT ?",
            (principal, _json.encode(tools).decode(), run_id, PEERS),
        )
        return [
            PeerRun(
                run_id=str(r[0]),
                accepted_position=int(r[1]),
                words=words_of(str(r[2])),
                request=str(r[3]),
                positions=tuple(msgspec.json.decode(str(r[4]), type=list[int])),
            )
            for r in rows
        ]


def _record(row: tuple[Any, ...]) -> CandidateRecord:
    values = dict(zip(_COLUMNS.replace(" ", "").split(","), row, strict=True))
    values["evidence"] = msgspec.json.decode(str(values["evidence"]), type=tuple[Evidence, ...])
    values["tools"] = msgspec.json.decode(str(values["tools"]), type=tuple[str, ...])
    return msgspec.convert(values, CandidateRecord)


def load_candidates(reader: JournalReadPort) -> list[CandidateRecord]:
    """Every candidate folded from the journal itself, in the order proposed: what the CLI
    shows on a data dir no node holds (the same fold as the view, into memory)."""
    projection = LearningProjection()
    kinds = tuple(sorted(k for k in projection.kinds or () if k.startswith("learning.")))
    with folded(projection, reader.events_of_kinds(kinds)) as conn:
        sql = f"SELECT {_COLUMNS} FROM learning_candidates ORDER BY proposed_position"
        return [_record(row) for row in conn.execute(sql)]
