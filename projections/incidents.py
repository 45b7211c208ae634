"""The incidents view: what the watchdog found, open or resolved, with its evidence.

Folded from ``incident.opened`` / ``incident.resolved`` (streams ``incident/<id>``, written by
the watchdog: :mod:`actors.watchdog.actor`). :class:`IncidentsView` answers the API's list and
the ``reel_incidents_open`` gauge; :func:`load_incidents` folds the same records straight from
the journal for ``reel incidents list`` on a stopped node.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import apsw
import msgspec

from events import Event, JournalReadPort, StoredEvent
from events.catalog import INCIDENT_DOMAINS, INCIDENT_KINDS, IncidentOpened, IncidentResolved
from projections.base import folded
from projections.pool import PooledReader, ReaderLimits

INCIDENT_STATES: tuple[str, ...] = ("open", "resolved")
"""The states the incidents view records (``incidents.state``)."""

_json = msgspec.json.Encoder()
_decode = msgspec.json.Decoder(dict[str, Any])


class IncidentRecord(msgspec.Struct, frozen=True, kw_only=True):
    """One incident (``GET /v1/incidents``, ``reel incidents list``)."""

    incident_id: str
    domain: str
    """run, task, approval, projector or journal."""
    subject: str
    """The run, task or approval id; ``views`` or ``journal``."""
    state: str
    """open or resolved."""
    opened_at_ms: int
    evidence: dict[str, Any]
    """What was measured against which limit: ``measure``, ``value``, ``limit``, ``unit``,
    and where it applies ``since_ms`` and ``detail``."""
    action: str | None
    """What ``auto`` mode did about it (``fail_run``, ``expire_approval``, ``reclaim_task``);
    null when the watchdog only observed."""
    resolved_at_ms: int | None
    how: str | None
    """cleared (the condition went away by itself) or acted (after the watchdog acted)."""


class IncidentFilter(msgspec.Struct, frozen=True, kw_only=True):
    """Which incidents a list keeps (set fields must match exactly; None keeps any)."""

    state: str | None = None
    """One of :data:`INCIDENT_STATES`."""
    domain: str | None = None
    """One of :data:`events.catalog.INCIDENT_DOMAINS`."""


class IncidentsProjection:
    name: str = "incidents"
    version: int = 1
    tables: tuple[str, ...] = ("incidents",)
    kinds: frozenset[str] | None = frozenset(INCIDENT_KINDS)
    ddl: str = """
    CREATE TABLE IF NOT EXISTS incidents(
        incident_id TEXT PRIMARY KEY,
        domain TEXT NOT NULL,
        subject TEXT NOT NULL,
        state TEXT NOT NULL,
        opened_at_ms INTEGER NOT NULL,
        evidence TEXT NOT NULL,
        action TEXT,
        resolved_at_ms INTEGER,
        how TEXT
    );
    CREATE INDEX IF NOT EXISTS incidents_by_state ON incidents(state, domain);
    """

    def apply(self, conn: apsw.Connection, stored: StoredEvent, event: Event) -> None:
        if isinstance(event, IncidentOpened):
            conn.execute(
                "INSERT OR REPLACE INTO incidents(incident_id, domain, subject, state,"
                " opened_at_ms, evidence, action) VALUES (?,?,?,'open',?,?,?)",
                (
                    event.incident_id,
                    event.domain,
                    event.subject,
                    stored.recorded_at_ms,
                    _json.encode(event.evidence).decode(),
                    event.action,
                ),
            )
        elif isinstance(event, IncidentResolved):
            conn.execute(
                "UPDATE incidents SET state = 'resolved', resolved_at_ms = ?, how = ?"
                " WHERE incident_id = ?",
                (stored.recorded_at_ms, event.how, event.incident_id),
            )


_COLUMNS = (
    "incident_id, domain, subject, state, opened_at_ms, evidence, action, resolved_at_ms, how"
)


def _record(row: tuple[Any, ...]) -> IncidentRecord:
    (incident_id, domain, subject, state, opened, evidence, action, resolved, how) = row
    return IncidentRecord(
        incident_id=incident_id,
        domain=domain,
        subject=subject,
        state=state,
        opened_at_ms=opened,
        evidence=_decode.decode(evidence),
        action=action,
        resolved_at_ms=resolved,
        how=how,
    )


class IncidentsView(PooledReader):
    """Typed queries over the incidents table of views.db (read-only, pooled connections, safe
    from many threads)."""

    def __init__(self, path: Path, limits: ReaderLimits | None = None) -> None:
        super().__init__(path, limits)

    def _select(self, where: str, args: tuple[Any, ...]) -> list[IncidentRecord]:
        with self._borrow() as conn:
            rows = conn.execute(f"SELECT {_COLUMNS} FROM incidents {where}", args).fetchall()
        return [_record(row) for row in rows]

    def incidents(
        self, where: IncidentFilter | None = None, after: str | None = None, limit: int = 100
    ) -> list[IncidentRecord]:
        """Incidents by id (opening order) after the given id, narrowed by ``where``."""
        clauses = ["incident_id > ?"]
        args: list[Any] = [after or ""]
        for column, value in msgspec.structs.asdict(where or IncidentFilter()).items():
            if value is not None:
                clauses.append(f"{column} = ?")  # our field names, never the caller's
                args.append(value)
        sql = f"WHERE {' AND '.join(clauses)} ORDER BY incident_id LIMIT ?"
        return self._select(sql, (*args, limit))

    def incident(self, incident_id: str) -> IncidentRecord | None:
        rows = self._select("WHERE incident_id = ?", (incident_id,))
        return rows[0] if rows else None

    def open_counts(self) -> dict[str, int]:
        """Open incidents per domain, every domain listed (0 when none)."""
        with self._borrow() as conn:
            rows: list[Any] = conn.execute(
                "SELECT domain, count(*) FROM incidents WHERE state = 'open' GROUP BY domain"
            ).fetchall()
        counts: dict[str, int] = dict.fromkeys(INCIDENT_DOMAINS, 0)
        counts.update({str(domain): int(n) for domain, n in rows})
        return counts


def load_incidents(reader: JournalReadPort) -> dict[str, IncidentRecord]:
    """Every incident the journal holds, by id, in opening order (for commands that read a
    stopped node's journal): the view's own fold, run in memory."""
    with folded(IncidentsProjection(), reader.events_of_kinds(INCIDENT_KINDS)) as conn:
        rows = conn.execute(f"SELECT {_COLUMNS} FROM incidents ORDER BY rowid").fetchall()
    return {record.incident_id: record for record in map(_record, rows)}
