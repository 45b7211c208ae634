"""WatchdogActor: the node service that looks every ``interval_s`` and records incidents.

A thin shell around :mod:`actors.watchdog.checks` (the checks) and :mod:`actors.watchdog.decide`
(the fold and the decisions). Each tick it reads a :class:`Snapshot` through a
:class:`WatchdogPort` (views and journal: :class:`projections.watch.WatchReads`), asks
:func:`check` for findings and :func:`decide` for what to append and do, appends the incident
events as principal ``watchdog`` on ``incident/<id>`` (it is the only writer of those
streams), folds them, and in ``auto`` mode acts:

- a stalled run is told :class:`StallRun` (it ends ``failed``, reason ``stalled``);
- an overdue approval is denied ``expired`` by ``watchdog`` through the directory, the same
  :class:`ResolveApproval` path the API takes;
- a lapsed task is reclaimed through the task queue (:meth:`actors.tasks.queue.TaskQueue.reclaim`,
  which never breaks a live lease).

It starts with the node (after recovery, once the views follow the journal) and stops first
when the node drains, so it never acts on runs the drain is ending.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable, Sequence
from typing import Any, Protocol

import msgspec
import pykka

from actors.actor_threads import PooledActor
from actors.aggregate import fold
from actors.io_loop import Timer
from actors.log_fields import fields
from actors.messages import ResolveApproval, StallRun
from actors.services import Services
from actors.stream import Recorded, recorded
from actors.watchdog import decide as watchdog_decider
from actors.watchdog.checks import Memory, Snapshot, StoppedSchedule, WatchdogConfig, check
from actors.watchdog.decide import Act, Incidents, apply, decide
from events import new_id
from events.catalog import INCIDENT_KINDS, kind_of
from projections.watch import JournalVerdict, Lag, PendingApproval, RunActivity, TaskLease

log = logging.getLogger("reel.watchdog")

PRINCIPAL = "watchdog"
"""Who the watchdog's events and acts are recorded as."""


class WatchdogPort(Protocol):
    """What the watchdog reads of the node (all plain values; see :mod:`projections.watch`)."""

    def runs_in_progress(self) -> Sequence[RunActivity]: ...
    def pending_approvals(self) -> Sequence[PendingApproval]: ...
    def lag(self) -> Lag: ...
    def verify_journal(self) -> JournalVerdict: ...
    def task_leases(self) -> Sequence[TaskLease] | None:
        """Running tasks and their claims; None when there are none to know of."""
        ...

    def close(self) -> None:
        """Release what the reads hold (the watchdog calls it when it stops)."""
        ...


class Tick(msgspec.Struct, frozen=True):
    """Timer -> watchdog: time to look."""


def wall_ms() -> int:
    return time.time_ns() // 1_000_000


class WatchdogActor(PooledActor):
    """Looks at the node every ``config.interval_s``; see the module docstring."""

    def __init__(
        self,
        services: Services,
        port: WatchdogPort,
        config: WatchdogConfig,
        *,
        clock: Callable[[], int] = wall_ms,
        reclaim_task: Callable[[str, str], None] | None = None,
        holding: Callable[[], bool] | None = None,
    ) -> None:
        """``clock``: milliseconds since the epoch (what limits are measured against);
        ``reclaim_task(task_id, reason)``: default the node's task queue's; ``holding``: in a
        cluster, whether this node still holds the watchdog's singleton lease, asked before
        every look (a node frozen past its lease looks no more once it runs again)."""
        super().__init__()
        self.s = services
        self.port = port
        self.config = config
        self.clock = clock
        tasks = services.tasks
        self.reclaim_task = reclaim_task or (tasks.reclaim if tasks is not None else None)
        self.holding = holding
        self.state = Incidents()
        self.memory = Memory()
        self.acted: frozenset[str] = frozenset()
        """Incidents this watchdog acted on (each is acted on once)."""
        self.next_journal_check_ms = 0
        self.timer: Timer | None = None
        self.looks = 0
        """How many looks completed (tests wait for one)."""

    # --- pykka hooks -----------------------------------------------------------------------

    def on_start(self) -> None:
        records = recorded(self.s.journal.events_of_kinds(INCIDENT_KINDS))
        self.state = fold(watchdog_decider, records) or Incidents()
        # The node verified the journal before it started: the first check is one period on.
        self.next_journal_check_ms = self.clock() + int(self.config.journal_check_s * 1000)
        self._schedule()

    def on_stop(self) -> None:
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        with contextlib.suppress(Exception):
            self.port.close()

    def on_receive(self, message: Any) -> Any:
        if isinstance(message, Tick):
            self.timer = None
            try:
                self.look()
            finally:
                self._schedule()
        return None

    # --- one look --------------------------------------------------------------------------

    def look(self) -> None:
        """Read, check, record, act. A port that cannot answer skips this look (logged): the
        incidents of what could not be read stay as they are."""
        if self.holding is not None and not self.holding():
            return
        try:
            snapshot = self._snapshot()
        except Exception:
            log.warning("watchdog could not read the node; skipping this look", exc_info=True)
            return
        checked = check(self.config, snapshot, self.memory)
        self.memory = checked.memory
        decision = decide(
            self.state, checked, mode=self.config.mode, acted=self.acted, new_id=new_id
        )
        for append in decision.appends:
            result = self.s.journal.append(
                append.stream,
                [append.event],
                expected_seq=append.expected_seq,
                principal=PRINCIPAL,
            )
            self.state = apply(
                self.state,
                Recorded(append.event, append.stream, result.recorded_at_ms, PRINCIPAL),
            )
            log.warning(
                kind_of(append.event),
                extra=fields(**msgspec.to_builtins(append.event)),
            )
        for act in decision.acts:
            self._act(act)
        self.looks += 1

    def _snapshot(self) -> Snapshot:
        now = self.clock()
        port = self.port
        journal: JournalVerdict | None = None
        if now >= self.next_journal_check_ms:
            journal = port.verify_journal()
            self.next_journal_check_ms = now + int(self.config.journal_check_s * 1000)
        tasks = port.task_leases()
        desk = self.s.schedules
        schedules = None
        if desk is not None:
            schedules = tuple(
                StoppedSchedule(
                    schedule_id=s.schedule_id,
                    name=s.name,
                    runs_as=s.runs_as,
                    stopped_at_ms=s.stopped_at_ms,
                )
                for s in desk.stopped()
            )
        guard = self.s.budgets
        budgets = guard.soft_breaches(now) if guard is not None else None
        return Snapshot(
            now_ms=now,
            runs=tuple(port.runs_in_progress()),
            approvals=tuple(port.pending_approvals()),
            lag=port.lag(),
            journal=journal,
            tasks=tuple(tasks) if tasks is not None else None,
            schedules=schedules,
            budgets=tuple(budgets) if budgets is not None else None,
        )

    def _act(self, act: Act) -> None:
        """Do what ``auto`` mode does about ``act``'s incident (once: remembered in
        ``acted``). The act's own event is written by the subject's owner."""
        self.acted = self.acted | {act.incident_id}
        finding = act.finding
        evidence = finding.evidence
        if act.action == "fail_run":
            detail = (
                f"no progress for {evidence.value:g} s (watchdog limit run_stall_s "
                f"{evidence.limit:g} s)"
            )
            stall = StallRun(run_id=finding.subject, detail=detail, principal=PRINCIPAL)
            ref = self.s.registry.live_run(finding.subject)
            if ref is not None:
                with contextlib.suppress(pykka.ActorDeadError):
                    ref.tell(stall)
            elif self.s.elsewhere is not None:  # a cluster: the run's node stops it
                self.s.elsewhere(stall)
            else:
                log.warning("watchdog: run %s has no live actor to stop", finding.subject)
        elif act.action == "expire_approval":
            expire = ResolveApproval(
                approval_id=finding.subject, decision="deny", principal=PRINCIPAL, reason="expired"
            )
            directory = self.s.directory
            if self.s.elsewhere is not None:  # a cluster: the approval's node decides it
                self.s.elsewhere(expire)
            elif directory is not None:
                with contextlib.suppress(pykka.ActorDeadError):
                    directory.tell(expire)
        elif act.action == "reclaim_task":
            if self.reclaim_task is None:
                log.warning("watchdog: no task queue to reclaim task %s", finding.subject)
                return
            self.reclaim_task(finding.subject, "lapsed")

    def _schedule(self) -> None:
        ref = self.actor_ref

        def tick() -> None:
            with contextlib.suppress(pykka.ActorDeadError):
                ref.tell(Tick())

        self.timer = self.s.io.call_later(self.config.interval_s, tick)
