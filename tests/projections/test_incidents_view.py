"""The incidents view: folded from incident events on a real journal, listed with filters and
pages, counted per domain, equal to the in-memory fold, and rebuilt identically by replay."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from events import Journal, NodeKey
from events.catalog import INCIDENT_DOMAINS, IncidentOpened, IncidentResolved
from projections import IncidentFilter, IncidentsView, Projector, load_incidents, replay


@pytest.fixture
def journal(tmp_path: Path) -> Iterator[Journal]:
    opened = Journal(tmp_path / "journal.db", node_key=NodeKey.load_or_create(tmp_path / "key"))
    yield opened
    opened.close()


def record(journal: Journal) -> None:
    """Four incidents: a run (acted), an approval and the views (open), the journal (cleared)."""
    opened = [
        ("01INC0000000000000000000A1", "run", "01RUN0000000000000000000R1", "fail_run"),
        ("01INC0000000000000000000A2", "approval", "01APR000000000000000000AP1", None),
        ("01INC0000000000000000000A3", "projector", "views", None),
        ("01INC0000000000000000000A4", "journal", "journal", None),
    ]
    for incident_id, domain, subject, action in opened:
        journal.append(
            f"incident/{incident_id}",
            [
                IncidentOpened(
                    incident_id=incident_id,
                    domain=domain,  # type: ignore[arg-type]
                    subject=subject,
                    evidence={"measure": "m", "value": 2.5, "limit": 1, "unit": "s"},
                    action=action,  # type: ignore[arg-type]
                )
            ],
            expected_seq=0,
            principal="watchdog",
        )
    for incident_id, how in (
        ("01INC0000000000000000000A1", "acted"),
        ("01INC0000000000000000000A4", "cleared"),
    ):
        journal.append(
            f"incident/{incident_id}",
            [IncidentResolved(incident_id=incident_id, how=how)],  # type: ignore[arg-type]
            expected_seq=1,
            principal="watchdog",
        )


def test_the_view_lists_filters_pages_and_counts(journal: Journal, tmp_path: Path) -> None:
    record(journal)
    views = tmp_path / "views.db"
    projector = Projector(journal, views)
    projector.catch_up()
    projector.close()
    view = IncidentsView(views)
    try:
        every = view.incidents()
        assert [r.domain for r in every] == ["run", "approval", "projector", "journal"]
        run = every[0]
        assert (run.state, run.how, run.action) == ("resolved", "acted", "fail_run")
        assert run.evidence == {"measure": "m", "value": 2.5, "limit": 1, "unit": "s"}
        assert run.resolved_at_ms is not None and run.resolved_at_ms >= run.opened_at_ms
        assert [r.subject for r in view.incidents(IncidentFilter(state="open"))] == [
            "01APR000000000000000000AP1",
            "views",
        ]
        assert [
            r.how for r in view.incidents(IncidentFilter(state="resolved", domain="journal"))
        ] == ["cleared"]
        first = view.incidents(limit=2)
        rest = view.incidents(after=first[-1].incident_id, limit=2)
        assert [r.incident_id for r in first + rest] == [r.incident_id for r in every]
        assert view.incident("01INC0000000000000000000A3") == every[2]
        assert view.incident("01INC0000000000000000000ZZ") is None
        counts = view.open_counts()
        assert list(counts) == list(INCIDENT_DOMAINS)  # every domain, zero included
        assert counts == {
            "run": 0,
            "task": 0,
            "approval": 1,
            "projector": 1,
            "journal": 0,
            "schedule": 0,
            "budget": 0,
        }
        # the fold straight from the journal (reel incidents list on a stopped node) agrees
        assert list(load_incidents(journal).values()) == every
    finally:
        view.close()


def test_replay_rebuilds_the_view_identically(journal: Journal, tmp_path: Path) -> None:
    record(journal)
    views = tmp_path / "views.db"
    projector = Projector(journal, views)
    projector.catch_up()
    projector.close()
    report = replay(journal, views, tmp_path / "replayed.db")
    assert report.identical, report.differences
    assert report.events == journal.committed_position
