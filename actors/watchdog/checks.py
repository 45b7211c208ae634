"""The watchdog's checks: a snapshot of the node in, findings out. Pure functions, no clock and
no I/O (the snapshot carries ``now_ms``), so every limit is testable to the millisecond.

What is wrong, and the limit that says so (``[watchdog]`` in config.toml, docs/operations.md):

- ``run``: a run in progress with no new tape entry for ``run_stall_s``. A run waiting for a
  human is ``awaiting_approval``, never in progress, so it is never stalled.
- ``approval``: an approval still pending ``approval_grace_s`` after its ``expires_at_ms``
  (its own time-out should have denied it by then: something is stuck).
- ``projector``: the views behind the journal by more than ``projector_lag_events`` for
  ``projector_lag_s`` without a break (a burst of appends is not an incident).
- ``journal``: verification from the last checkpoint fails (run every ``journal_check_s``).
- ``task``: a running task whose claim lapsed (no heartbeat renewed its lease) more than
  ``task_lapse_s`` ago: the task queue reclaims a lapsed claim at once, so it is stuck.
- ``schedule``: a schedule the node stopped because the principal it runs as holds no live
  token (docs/schedules.md); open until the schedule is deleted. Nothing to act on: someone
  decides whether it should run as someone else.
- ``budget``: a principal or session past a budget's soft limit in the current period
  (``[budgets]``, docs/usage.md). The subject names the budget, whom it counts and the period,
  so one incident opens per budget, subject and period, whatever the number of runs; it is
  resolved ``cleared`` when the period ends.

A domain the snapshot did not look at (``None``) has no findings and is not in ``checked``: its
open incidents stay open, neither cleared nor acted on.
"""

from __future__ import annotations

import hashlib
import re
from typing import Annotated, Literal

import msgspec

from actors.budgets.decide import Breach
from events.catalog import INCIDENT_DOMAINS, IncidentAction, IncidentDomain
from projections.watch import JournalVerdict, Lag, PendingApproval, RunActivity, TaskLease

Seconds = Annotated[float, msgspec.Meta(gt=0)]
_ID = re.compile(r"[0-9A-Za-z_.:-]+")
Mode = Literal["observe", "auto"]

ACTIONS: dict[IncidentDomain, IncidentAction | None] = {
    "run": "fail_run",
    "approval": "expire_approval",
    "task": "reclaim_task",
    "projector": None,
    "journal": None,
    "schedule": None,
    "budget": None,
}
"""What ``auto`` mode does about each domain (nothing can be done about views, the journal or a
soft budget but telling someone)."""


class WatchdogConfig(msgspec.Struct, frozen=True, kw_only=True):
    """``[watchdog]``: the mode and every limit (``REEL_WATCHDOG_<KEY>`` overrides each)."""

    mode: Mode = "observe"
    """``observe`` records incidents only; ``auto`` also fails stalled runs (reason
    ``stalled``), expires overdue approvals (denied ``expired`` by ``watchdog``) and reclaims
    lapsed tasks."""
    run_stall_s: Seconds = 300.0
    """A run in progress with no new tape entry for this long is stalled."""
    approval_grace_s: Annotated[float, msgspec.Meta(ge=0)] = 60.0
    """How long past its ``expires_at`` an approval may still be pending."""
    projector_lag_events: Annotated[int, msgspec.Meta(ge=1)] = 10_000
    """The views may lag the journal by this many events..."""
    projector_lag_s: Annotated[float, msgspec.Meta(ge=0)] = 30.0
    """...for at most this long."""
    journal_check_s: Seconds = 300.0
    """How often the journal is verified from its last checkpoint."""
    task_lapse_s: Seconds = 60.0
    """A running task whose lease lapsed longer ago than this is stuck (not reclaimed)."""
    interval_s: Seconds = 5.0
    """How often the watchdog looks."""


class StoppedSchedule(msgspec.Struct, frozen=True, kw_only=True):
    """A schedule the node stopped (its principal holds no live token)."""

    schedule_id: str
    name: str
    runs_as: str
    stopped_at_ms: int


class Snapshot(msgspec.Struct, frozen=True, kw_only=True):
    """What the watchdog saw at ``now_ms``; ``None``: not looked at this time."""

    now_ms: int
    runs: tuple[RunActivity, ...] | None = None
    approvals: tuple[PendingApproval, ...] | None = None
    lag: Lag | None = None
    journal: JournalVerdict | None = None
    tasks: tuple[TaskLease, ...] | None = None
    schedules: tuple[StoppedSchedule, ...] | None = None
    budgets: tuple[Breach, ...] | None = None
    """The soft budget limits reached in their current period."""


class Measured(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """What was measured against which limit (``incident.opened``'s ``evidence``)."""

    measure: str
    value: float
    limit: float
    unit: str
    since_ms: int = 0
    """When the condition began (0: unknown)."""
    detail: str = ""


class Finding(msgspec.Struct, frozen=True, kw_only=True):
    """Something wrong with ``subject`` now."""

    domain: IncidentDomain
    subject: str
    evidence: Measured

    @property
    def key(self) -> tuple[str, str]:
        return self.domain, self.subject

    @property
    def action(self) -> IncidentAction | None:
        """What ``auto`` mode does about it."""
        return ACTIONS[self.domain]


class Memory(msgspec.Struct, frozen=True, kw_only=True):
    """What one look carries to the next: since when the views have lagged past the limit.
    Observation, not domain state: it is never journaled (a restart starts counting again)."""

    lagging_since_ms: int | None = None


class Checked(msgspec.Struct, frozen=True, kw_only=True):
    """The findings of one look, the domains it looked at, and the memory for the next."""

    findings: tuple[Finding, ...]
    checked: frozenset[IncidentDomain]
    memory: Memory


def check(config: WatchdogConfig, snapshot: Snapshot, memory: Memory | None = None) -> Checked:
    """Every finding in ``snapshot``, in domain order then subject order."""
    memory = memory or Memory()
    now = snapshot.now_ms
    findings: list[Finding] = []
    checked: set[IncidentDomain] = set()
    if snapshot.runs is not None:
        checked.add("run")
        findings += stalled_runs(snapshot.runs, now, config.run_stall_s)
    if snapshot.approvals is not None:
        checked.add("approval")
        findings += overdue_approvals(snapshot.approvals, now, config.approval_grace_s)
    if snapshot.lag is not None:
        checked.add("projector")
        since = lagging_since(snapshot.lag, now, config, memory.lagging_since_ms)
        memory = msgspec.structs.replace(memory, lagging_since_ms=since)
        finding = lagging_views(snapshot.lag, now, config, since)
        findings += [finding] if finding is not None else []
    if snapshot.journal is not None:
        checked.add("journal")
        finding = journal_fault(snapshot.journal)
        findings += [finding] if finding is not None else []
    if snapshot.tasks is not None:
        checked.add("task")
        findings += lapsed_tasks(snapshot.tasks, now, config.task_lapse_s)
    if snapshot.schedules is not None:
        checked.add("schedule")
        findings += [stopped_schedule(s) for s in snapshot.schedules]
    if snapshot.budgets is not None:
        checked.add("budget")
        findings += [soft_budget(breach) for breach in snapshot.budgets]
    order = {domain: i for i, domain in enumerate(INCIDENT_DOMAINS)}
    findings.sort(key=lambda f: (order[f.domain], f.subject))
    return Checked(findings=tuple(findings), checked=frozenset(checked), memory=memory)


def stalled_runs(runs: tuple[RunActivity, ...], now_ms: int, limit_s: float) -> list[Finding]:
    """Runs in progress whose latest tape entry is older than ``limit_s``."""
    out = []
    for run in runs:
        idle_s = (now_ms - run.last_entry_ms) / 1000
        if idle_s > limit_s:
            evidence = Measured(
                measure="seconds_without_tape_entry",
                value=round(idle_s, 3),
                limit=limit_s,
                unit="s",
                since_ms=run.last_entry_ms,
            )
            out.append(Finding(domain="run", subject=run.run_id, evidence=evidence))
    return out


def overdue_approvals(
    approvals: tuple[PendingApproval, ...], now_ms: int, grace_s: float
) -> list[Finding]:
    """Pending approvals more than ``grace_s`` past their expiry."""
    out = []
    for approval in approvals:
        if approval.expires_at_ms <= 0:
            continue  # recorded without a time-out: nothing to be late for
        late_s = (now_ms - approval.expires_at_ms) / 1000
        if late_s > grace_s:
            evidence = Measured(
                measure="seconds_pending_past_expiry",
                value=round(late_s, 3),
                limit=grace_s,
                unit="s",
                since_ms=approval.expires_at_ms,
                detail=f"run {approval.run_id}",
            )
            out.append(Finding(domain="approval", subject=approval.approval_id, evidence=evidence))
    return out


def lagging_since(
    lag: Lag, now_ms: int, config: WatchdogConfig, since_ms: int | None
) -> int | None:
    """Since when the views have lagged past ``projector_lag_events`` without a break (None:
    they do not now)."""
    if lag.events <= config.projector_lag_events:
        return None
    return since_ms if since_ms is not None else now_ms


def lagging_views(
    lag: Lag, now_ms: int, config: WatchdogConfig, since_ms: int | None
) -> Finding | None:
    """The views past the event limit for longer than ``projector_lag_s``."""
    if since_ms is None or (now_ms - since_ms) / 1000 < config.projector_lag_s:
        return None
    evidence = Measured(
        measure="events_behind_journal",
        value=lag.events,
        limit=config.projector_lag_events,
        unit="events",
        since_ms=since_ms,
        detail=lag.error or f"views at {lag.applied}, journal at {lag.committed}",
    )
    return Finding(domain="projector", subject="views", evidence=evidence)


def journal_fault(verdict: JournalVerdict) -> Finding | None:
    """The journal failing verification from its last checkpoint."""
    if verdict.ok:
        return None
    evidence = Measured(
        measure="first_bad_position",
        value=verdict.fault_position or 0,
        limit=0,
        unit="position",
        detail=verdict.fault,
    )
    return Finding(domain="journal", subject="journal", evidence=evidence)


def lapsed_tasks(tasks: tuple[TaskLease, ...], now_ms: int, limit_s: float) -> list[Finding]:
    """Running tasks whose lease lapsed more than ``limit_s`` ago."""
    out = []
    for task in tasks:
        lapsed_s = (now_ms - task.lease_until_ms) / 1000
        if lapsed_s > limit_s:
            held = f"held by {task.holder}, " if task.holder else ""
            silent_s = (now_ms - task.heartbeat_ms) / 1000
            evidence = Measured(
                measure="seconds_past_lease",
                value=round(lapsed_s, 3),
                limit=limit_s,
                unit="s",
                since_ms=task.lease_until_ms,
                detail=f"{held}last heartbeat {silent_s:.0f} s ago",
            )
            out.append(Finding(domain="task", subject=task.task_id, evidence=evidence))
    return out


def stopped_schedule(schedule: StoppedSchedule) -> Finding:
    """A schedule stopped for want of a live token of its principal."""
    evidence = Measured(
        measure="live_tokens_of_principal",
        value=0,
        limit=1,
        unit="tokens",
        since_ms=schedule.stopped_at_ms,
        detail=f"schedule {schedule.name} runs as {schedule.runs_as}",
    )
    return Finding(domain="schedule", subject=schedule.schedule_id, evidence=evidence)


def soft_budget(breach: Breach) -> Finding:
    """A soft budget limit reached: one subject per budget, counted subject and period."""
    evidence = Measured(
        measure=f"{breach.measure}_per_{breach.period}",
        value=breach.used,
        limit=breach.limit,
        unit=breach.measure,
        detail=breach.describe(),
    )
    return Finding(domain="budget", subject=budget_subject(breach), evidence=evidence)


def budget_subject(breach: Breach) -> str:
    """``<budget>.<period>.<whom>``: the incident's subject (an id: whom it counted is a
    digest when it is not one, or too long; the evidence names it in full)."""
    whom = breach.counted
    subject = f"{breach.budget}.{breach.period_key}.{whom}"
    if len(subject) > 64 or not _ID.fullmatch(whom):
        digest = hashlib.sha256(whom.encode()).hexdigest()[:16]
        subject = f"{breach.budget}.{breach.period_key}.{digest}"
    return subject
