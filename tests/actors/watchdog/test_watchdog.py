"""The watchdog's checks and its decider: pure functions, no node (actors/watchdog/checks.py,
actors/watchdog/decide.py). Limits are exercised to the millisecond on both sides."""

from __future__ import annotations

import itertools
from collections.abc import Callable

import msgspec
import pytest

from actors.aggregate import fold
from actors.stream import Recorded
from actors.watchdog import decide as watchdog_decider
from actors.watchdog.checks import (
    Checked,
    Finding,
    Memory,
    Snapshot,
    WatchdogConfig,
    check,
)
from actors.watchdog.decide import Incidents, apply, decide
from events.catalog import IncidentOpened, IncidentResolved
from projections import JournalVerdict, Lag, PendingApproval, RunActivity, TaskLease

NOW = 1_800_000_000_000
CONFIG = WatchdogConfig(
    run_stall_s=10,
    approval_grace_s=5,
    projector_lag_events=100,
    projector_lag_s=30,
    task_lapse_s=20,
)


def ids() -> Callable[[], str]:
    counter = itertools.count(1)
    return lambda: f"I{next(counter)}"


def look(memory: Memory | None = None, now: int = NOW, **seen: object) -> Checked:
    return check(CONFIG, Snapshot(now_ms=now, **seen), memory)  # type: ignore[arg-type]


# --- checks -------------------------------------------------------------------------------


def test_a_run_is_stalled_only_past_the_limit() -> None:
    runs = (
        RunActivity(run_id="R-exactly", last_entry_ms=NOW - 10_000),
        RunActivity(run_id="R-past", last_entry_ms=NOW - 10_001),
        RunActivity(run_id="R-busy", last_entry_ms=NOW - 200),
    )
    checked = look(runs=runs)
    assert checked.checked == {"run"}
    (finding,) = checked.findings
    assert (finding.domain, finding.subject, finding.action) == ("run", "R-past", "fail_run")
    evidence = finding.evidence
    assert evidence.measure == "seconds_without_tape_entry"
    assert (evidence.value, evidence.limit, evidence.unit) == (10.001, 10, "s")
    assert evidence.since_ms == NOW - 10_001


def test_an_approval_is_overdue_only_past_expiry_and_grace() -> None:
    approvals = (
        PendingApproval(approval_id="A-grace", run_id="R", expires_at_ms=NOW - 5_000),
        PendingApproval(approval_id="A-late", run_id="R", expires_at_ms=NOW - 5_001),
        PendingApproval(approval_id="A-none", run_id="R", expires_at_ms=0),
        PendingApproval(approval_id="A-future", run_id="R", expires_at_ms=NOW + 60_000),
    )
    (finding,) = look(approvals=approvals).findings
    assert (finding.subject, finding.action) == ("A-late", "expire_approval")
    assert finding.evidence.since_ms == NOW - 5_001
    assert finding.evidence.detail == "run R"


def test_views_lagging_open_an_incident_only_after_lagging_for_the_whole_limit() -> None:
    behind = Lag(committed=1_000, applied=899)
    at_limit = Lag(committed=1_000, applied=900)
    first = look(lag=behind)
    assert first.findings == ()
    assert first.memory.lagging_since_ms == NOW
    early = look(first.memory, now=NOW + 29_999, lag=behind)
    assert early.findings == ()
    due = look(early.memory, now=NOW + 30_000, lag=behind)
    (finding,) = due.findings
    assert (finding.domain, finding.subject, finding.action) == ("projector", "views", None)
    assert (finding.evidence.value, finding.evidence.limit) == (101, 100)
    assert finding.evidence.since_ms == NOW
    # a break resets the count: the next lag starts again
    caught = look(due.memory, now=NOW + 31_000, lag=at_limit)
    assert caught.findings == () and caught.memory.lagging_since_ms is None
    again = look(caught.memory, now=NOW + 32_000, lag=behind)
    assert again.findings == () and again.memory.lagging_since_ms == NOW + 32_000


def test_a_projector_failure_is_the_evidence_detail() -> None:
    lag = Lag(committed=500, applied=0, error="BusyError: database is locked")
    memory = look(lag=lag).memory
    (finding,) = look(memory, now=NOW + 30_000, lag=lag).findings
    assert finding.evidence.detail == "BusyError: database is locked"


def test_a_journal_fault_is_a_finding_and_a_clean_verdict_is_none() -> None:
    assert look(journal=JournalVerdict(rows=12)).findings == ()
    bad = JournalVerdict(fault_position=7, fault="hash_mismatch: row 7")
    (finding,) = look(journal=bad).findings
    assert (finding.domain, finding.subject) == ("journal", "journal")
    assert (finding.evidence.value, finding.evidence.detail) == (7, "hash_mismatch: row 7")


def test_a_task_is_stuck_only_when_its_lease_lapsed_past_the_limit() -> None:
    tasks = (
        TaskLease(task_id="T-ok", lease_until_ms=NOW - 20_000, heartbeat_ms=NOW - 30_000),
        TaskLease(
            task_id="T-lapsed",
            lease_until_ms=NOW - 20_001,
            heartbeat_ms=NOW - 30_001,
            holder="node-a.1",
        ),
        TaskLease(task_id="T-live", lease_until_ms=NOW + 8_000, heartbeat_ms=NOW - 2_000),
    )
    (finding,) = look(tasks=tasks).findings
    assert (finding.subject, finding.action) == ("T-lapsed", "reclaim_task")
    evidence = finding.evidence
    assert (evidence.measure, evidence.value, evidence.since_ms) == (
        "seconds_past_lease",
        20.001,
        NOW - 20_001,
    )
    assert evidence.detail == "held by node-a.1, last heartbeat 30 s ago"


def test_domains_not_looked_at_are_not_checked_and_findings_are_ordered() -> None:
    assert look().checked == frozenset()
    checked = look(
        runs=(RunActivity(run_id="R2", last_entry_ms=0), RunActivity(run_id="R1", last_entry_ms=0)),
        approvals=(PendingApproval(approval_id="A", run_id="R1", expires_at_ms=1),),
        journal=JournalVerdict(fault_position=1, fault="x"),
        tasks=(),
    )
    assert checked.checked == {"run", "approval", "journal", "task"}
    assert [(f.domain, f.subject) for f in checked.findings] == [
        ("run", "R1"),
        ("run", "R2"),
        ("approval", "A"),
        ("journal", "journal"),
    ]


@pytest.mark.parametrize(
    ("key", "value"),
    [("run_stall_s", 0), ("journal_check_s", -1), ("projector_lag_events", 0), ("mode", "loud")],
)
def test_config_refuses_bad_limits(key: str, value: object) -> None:
    with pytest.raises(msgspec.ValidationError, match=key):
        msgspec.convert({key: value}, WatchdogConfig)


# --- the decider --------------------------------------------------------------------------


def stalled(run_id: str) -> Finding:
    return look(runs=(RunActivity(run_id=run_id, last_entry_ms=0),)).findings[0]


def checked(*findings: Finding, domains: tuple[str, ...] = ("run",)) -> Checked:
    return Checked(findings=findings, checked=frozenset(domains), memory=Memory())  # type: ignore[arg-type]


def folded(state: Incidents, decision_appends: object) -> Incidents:
    for append in decision_appends:  # type: ignore[attr-defined]
        state = apply(state, Recorded(append.event, append.stream, NOW))
    return state


def test_observe_opens_one_incident_per_subject_and_acts_on_nothing() -> None:
    new_id = ids()
    decision = decide(
        Incidents(), checked(stalled("R1")), mode="observe", acted=frozenset(), new_id=new_id
    )
    (append,) = decision.appends
    assert (append.stream, append.expected_seq) == ("incident/I1", 0)
    event = append.event
    assert isinstance(event, IncidentOpened)
    assert (event.incident_id, event.domain, event.subject, event.action) == (
        "I1",
        "run",
        "R1",
        None,
    )
    assert event.evidence["measure"] == "seconds_without_tape_entry"
    assert "detail" not in event.evidence  # only what applies
    assert decision.acts == ()
    state = folded(Incidents(), decision.appends)
    again = decide(state, checked(stalled("R1")), mode="observe", acted=frozenset(), new_id=new_id)
    assert again.appends == () and again.acts == ()


def test_auto_opens_with_its_action_and_acts_once() -> None:
    decision = decide(
        Incidents(), checked(stalled("R1")), mode="auto", acted=frozenset(), new_id=ids()
    )
    (append,) = decision.appends
    assert isinstance(append.event, IncidentOpened)
    assert append.event.action == "fail_run"
    (act,) = decision.acts
    assert (act.incident_id, act.action, act.finding.subject) == ("I1", "fail_run", "R1")
    state = folded(Incidents(), decision.appends)
    later = decide(state, checked(stalled("R1")), mode="auto", acted={"I1"}, new_id=ids())  # type: ignore[arg-type]
    assert later.appends == () and later.acts == ()


def test_an_incident_observed_before_is_acted_on_in_auto_mode() -> None:
    observed = decide(
        Incidents(), checked(stalled("R1")), mode="observe", acted=frozenset(), new_id=ids()
    )
    state = folded(Incidents(), observed.appends)
    auto = decide(state, checked(stalled("R1")), mode="auto", acted=frozenset(), new_id=ids())
    assert auto.appends == ()
    (act,) = auto.acts
    assert act.incident_id == "I1"
    cleared = decide(state, checked(), mode="auto", acted=frozenset({"I1"}), new_id=ids())
    (append,) = cleared.appends
    assert isinstance(append.event, IncidentResolved) and append.event.how == "acted"


def test_conditions_that_go_away_resolve_cleared_or_acted() -> None:
    new_id = ids()
    opened = decide(
        Incidents(),
        checked(stalled("R1"), stalled("R2")),
        mode="observe",
        acted=frozenset(),
        new_id=new_id,
    )
    state = folded(Incidents(), opened.appends)
    decision = decide(
        state, checked(stalled("R2")), mode="observe", acted=frozenset(), new_id=new_id
    )
    (append,) = decision.appends
    assert (append.stream, append.expected_seq) == ("incident/I1", 1)
    assert append.event == IncidentResolved(incident_id="I1", how="cleared")
    state = folded(state, decision.appends)
    assert [i.subject for i in state.open.values()] == ["R2"]
    # the same subject stalling again later is a new incident
    reopened = decide(
        state,
        checked(stalled("R1"), stalled("R2")),
        mode="observe",
        acted=frozenset(),
        new_id=new_id,
    )
    (append,) = reopened.appends
    assert isinstance(append.event, IncidentOpened) and append.event.incident_id == "I3"

    auto = decide(Incidents(), checked(stalled("R9")), mode="auto", acted=frozenset(), new_id=ids())
    state = folded(Incidents(), auto.appends)
    done = decide(state, checked(), mode="auto", acted=frozenset(), new_id=ids())
    (append,) = done.appends
    assert append.event == IncidentResolved(incident_id="I1", how="acted")


def test_a_domain_not_looked_at_keeps_its_incidents_open() -> None:
    bad = JournalVerdict(fault_position=3, fault="hash_mismatch")
    finding = look(journal=bad).findings[0]
    state = folded(
        Incidents(),
        decide(
            Incidents(),
            checked(finding, domains=("journal",)),
            mode="auto",
            acted=frozenset(),
            new_id=ids(),
        ).appends,
    )
    between = decide(state, checked(domains=("run",)), mode="auto", acted=frozenset(), new_id=ids())
    assert between.appends == () and between.acts == ()  # nothing to do about a journal
    verified = decide(
        state, checked(domains=("journal",)), mode="auto", acted=frozenset(), new_id=ids()
    )
    (append,) = verified.appends
    assert append.event == IncidentResolved(incident_id="I1", how="cleared")


def test_the_fold_of_recorded_events_is_the_live_fold() -> None:
    records = [
        Recorded(
            IncidentOpened(
                incident_id="I1", domain="run", subject="R1", evidence={}, action="fail_run"
            ),
            "incident/I1",
            NOW,
        ),
        Recorded(
            IncidentOpened(incident_id="I2", domain="projector", subject="views", evidence={}),
            "incident/I2",
            NOW + 1,
        ),
        Recorded(IncidentResolved(incident_id="I1", how="acted"), "incident/I1", NOW + 2),
    ]
    state = fold(watchdog_decider, records)
    assert state is not None
    (incident,) = state.open.values()
    assert (incident.incident_id, incident.key, incident.opened_at_ms) == (
        "I2",
        ("projector", "views"),
        NOW + 1,
    )
    assert incident.next_seq == 1
