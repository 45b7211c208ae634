"""The aggregate conformance suite (tests/conformance/aggregate.py), once per aggregate: sessions,
runs, tool invocations, tasks, learning candidates, the watchdog's incidents, channels, memory
items and tokens, all on the one tape recorded from a real node."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

from actors import IllegalTransition
from actors.channels import router
from actors.channels.pairing import undecidable
from actors.channels.router import ChannelState
from actors.errors import ApprovalAlreadyResolved
from actors.invocations import state as tool_fold
from actors.invocations.decide import denial, resolve, withdrawn
from actors.invocations.decide import interrupt as interrupt_invocation
from actors.invocations.state import InvocationState
from actors.learning import state as learning_state
from actors.learning.state import CandidateState
from actors.memory import items as memory
from actors.memory.items import ItemState, MemoryItemAlreadyDeleted, deletion
from actors.messages import ResolveApproval
from actors.runs import state as run_fold
from actors.runs.decide import Ended, interrupt, next_step
from actors.runs.state import RunState
from actors.schedules import decide as schedule_decide
from actors.schedules import state as schedule_state
from actors.schedules.decide import UnknownSchedule
from actors.schedules.state import Schedules
from actors.sessions import state as session_state
from actors.sessions.state import SessionState
from actors.stream import Recorded
from actors.tasks import state as task_state
from actors.tasks.decide import (
    Done,
    TaskNotActive,
    cancelled,
    claimed,
    failed,
    heartbeat,
    next_action,
    settled,
    succeeded,
)
from actors.tasks.state import TaskState
from actors.vault import decide as vault_decide
from actors.vault import state as vault_state
from actors.vault.decide import UnknownSecret
from actors.vault.state import VaultState
from actors.watchdog import decide as watchdog_decider
from actors.watchdog.decide import Incidents
from events.catalog import (
    INCIDENT_KINDS,
    SCHEDULE_KINDS,
    TOKEN_KINDS,
    VAULT_KINDS,
    ApprovalRequested,
    ApprovalResolved,
    ChannelMessageRefused,
    ChannelMessageRouted,
    ChannelPairCodeMinted,
    ChannelPairingRequested,
    ChannelPairingResolved,
    ChannelRunStarted,
    Event,
    IncidentOpened,
    IncidentResolved,
    LearningCandidateApplied,
    LearningCandidateProposed,
    LearningCandidateRejected,
    LearningCandidateRolledBack,
    MemoryItemDeleted,
    MemoryItemWritten,
    RunAccepted,
    RunAwaitingApproval,
    RunCancelled,
    RunCompleted,
    RunFailed,
    RunResumed,
    RunStarted,
    ScheduleCreated,
    ScheduleDeleted,
    ScheduleFired,
    SchedulePaused,
    ScheduleResumed,
    ScheduleRunStarted,
    SessionCompacted,
    SessionCreated,
    SessionGrantAdded,
    SessionPostureSet,
    SessionReset,
    SessionRestored,
    TaskClaimed,
    TaskEnqueued,
    TaskSucceeded,
    TokenCreated,
    TokenRevoked,
    TokenUsed,
    ToolCompleted,
    ToolDecided,
    ToolProposed,
    VaultSecretDeleted,
    VaultSecretRotated,
    VaultSecretSet,
    kind_of,
)
from tests.conformance.aggregate import AggregateConformance, Tape, example
from transports.access import tokens
from transports.access.tokens import TokenAlreadyRevoked, Tokens, revocation

Decisions = Sequence[Callable[[], Any]]


def kinds(*classes: type[Event]) -> frozenset[str]:
    return frozenset(kind_of(c) for c in classes)


def by_stream(tape: Tape, prefix: str) -> dict[str, list[Recorded]]:
    """The records of every stream named ``<prefix><id>``, by id."""
    out: dict[str, list[Recorded]] = {}
    for rec in tape.records:
        if rec.stream.startswith(prefix):
            out.setdefault(rec.stream.removeprefix(prefix), []).append(rec)
    return out


def of_kinds(tape: Tape, names: Sequence[str]) -> list[Recorded]:
    return [rec for rec in tape.records if kind_of(rec.event) in names]


class TestSessionAggregate(AggregateConformance[SessionState]):
    aggregate = session_state
    kinds_on_tape = kinds(
        SessionCreated,
        RunAccepted,
        SessionGrantAdded,
        SessionPostureSet,
        SessionCompacted,
        SessionRestored,
        SessionReset,
    )

    def key(self, state: SessionState) -> str:
        return state.session_id

    def instances(self, tape: Tape) -> dict[str, list[Recorded]]:
        return by_stream(tape, "session/")


class TestRunAggregate(AggregateConformance[RunState]):
    aggregate = run_fold
    kinds_on_tape = kinds(
        RunAccepted,
        RunStarted,
        RunAwaitingApproval,
        RunResumed,
        RunCompleted,
        RunFailed,
        RunCancelled,
        ToolProposed,
        ApprovalResolved,
    )
    refusals = (IllegalTransition,)

    def key(self, state: RunState) -> str:
        return state.run_id

    def instances(self, tape: Tape) -> dict[str, list[Recorded]]:
        """A run's tape as recovery reads it: every row correlated to it, from its
        ``run.accepted`` on, on the run's, the session's and its tools' streams."""
        out: dict[str, list[Recorded]] = {}
        for row, rec in zip(tape.rows, tape.records, strict=True):
            run_id = row.correlation_id
            if run_id is None or not row.stream.startswith(("session/", "run/", "tool/")):
                continue
            if isinstance(rec.event, RunAccepted) or run_id in out:
                out.setdefault(run_id, []).append(rec)
        return out

    def finished(self, state: RunState) -> Decisions:
        if not state.status.terminal:
            return ()
        steps: list[Callable[[], Any]] = [
            partial(stepped, state),
            partial(interrupt, state, {}),
        ]
        for cls in (RunStarted, RunAwaitingApproval, RunResumed, RunCompleted, RunFailed):
            steps.append(partial(appended, state, example(cls, {"run_id": state.run_id})))
        return steps


def stepped(state: RunState) -> tuple[object, ...]:
    """What the run's decider asks for next: nothing once it says ``Ended``."""
    step = next_step(state)
    return () if isinstance(step, Ended) else (step,)


def appended(state: RunState, event: Event) -> tuple[Event, ...]:
    """``event``, if the run actor would append it after ``state`` (it checks first)."""
    run_fold.check(state, [event])
    return (event,)


class TestInvocationAggregate(AggregateConformance[InvocationState]):
    aggregate = tool_fold
    kinds_on_tape = kinds(
        ToolProposed, ToolDecided, ApprovalRequested, ApprovalResolved, ToolCompleted
    )
    refusals = (ApprovalAlreadyResolved,)

    def key(self, state: InvocationState) -> str:
        return state.invocation_id

    def instances(self, tape: Tape) -> dict[str, list[Recorded]]:
        out: dict[str, list[Recorded]] = {}
        for rec in tape.records:
            invocation_id = getattr(rec.event, "invocation_id", None)
            if isinstance(invocation_id, str) and rec.stream.startswith(("tool/", "approval/")):
                out.setdefault(invocation_id, []).append(rec)
        return out

    def finished(self, state: InvocationState) -> Decisions:
        if state.completed is None:
            return ()
        approval = state.request.approval_id if state.request is not None else "none"
        return (
            partial(interrupt_invocation, state, "interrupted"),
            partial(denial, state),
            partial(
                resolve,
                state,
                approval_id=approval,
                decision="allow",
                scope="once",
                decided_by="someone",
                reason="",
                grant_principal="someone",
                now_ms=state.requested_at_ms + 1,
            ),
            partial(withdrawn, state, "cancelled", grant_principal="someone", now_ms=0),
        )


class TestTaskAggregate(AggregateConformance[TaskState]):
    aggregate = task_state
    kinds_on_tape = kinds(TaskEnqueued, TaskClaimed, TaskSucceeded)
    refusals = (TaskNotActive,)

    def key(self, state: TaskState) -> str:
        return state.task_id

    def instances(self, tape: Tape) -> dict[str, list[Recorded]]:
        return by_stream(tape, "task/")

    def finished(self, state: TaskState) -> Decisions:
        if not state.status.terminal:
            return ()
        worker, attempt = state.worker or "w", state.attempt
        steps: list[Callable[[], Any]] = [
            partial(cancelled, state, "someone", ""),
            partial(succeeded, state, worker, attempt, None, 0),
        ]
        for now in (state.enqueued_at_ms, (state.ended_at_ms or 0) + 10**9):
            steps += [
                partial(due, state, now),
                partial(claimed, state, now, worker, 1_000),
                partial(heartbeat, state, worker, attempt, now, 1_000),
                partial(failed, state, worker, attempt, "x", now),
                partial(settled, state, now),
            ]
        return steps


def due(state: TaskState, now_ms: int) -> tuple[object, ...]:
    """What the task's decider finds due: nothing once it says ``Done``."""
    action = next_action(state, now_ms)
    return () if isinstance(action, Done) else (action,)


class TestLearningAggregate(AggregateConformance[CandidateState]):
    aggregate = learning_state
    kinds_on_tape = kinds(
        LearningCandidateProposed,
        LearningCandidateApplied,
        LearningCandidateRolledBack,
        LearningCandidateRejected,
    )

    def key(self, state: CandidateState) -> str:
        return state.candidate_id

    def instances(self, tape: Tape) -> dict[str, list[Recorded]]:
        return by_stream(tape, "learning/")


class TestIncidentsAggregate(AggregateConformance[Incidents]):
    aggregate = watchdog_decider
    kinds_on_tape = kinds(IncidentOpened, IncidentResolved)

    def key(self, state: Incidents) -> str:
        return "incidents"

    def instances(self, tape: Tape) -> dict[str, list[Recorded]]:
        return {"incidents": of_kinds(tape, INCIDENT_KINDS)}


class TestChannelAggregate(AggregateConformance[ChannelState]):
    aggregate = router
    kinds_on_tape = kinds(
        ChannelMessageRefused,
        ChannelPairCodeMinted,
        ChannelPairingRequested,
        ChannelPairingResolved,
        ChannelMessageRouted,
    )
    unfolded_kinds = kinds(ChannelRunStarted)

    def key(self, state: ChannelState) -> str:
        return state.channel

    def instances(self, tape: Tape) -> dict[str, list[Recorded]]:
        return by_stream(tape, "channel/")

    def finished(self, state: ChannelState) -> Decisions:
        return [partial(decided_again, state, approval_id) for approval_id in state.resolved]


def decided_again(state: ChannelState, approval_id: str) -> tuple[object, ...]:
    """A decision on a pairing request already decided: refused (nothing appended)."""
    command = ResolveApproval(approval_id=approval_id, decision="allow")
    return () if undecidable(state, command) is not None else (command,)


class TestMemoryItemAggregate(AggregateConformance[ItemState]):
    aggregate = memory
    kinds_on_tape = kinds(MemoryItemWritten, MemoryItemDeleted)
    refusals = (MemoryItemAlreadyDeleted,)

    def key(self, state: ItemState) -> str:
        return state.item_id

    def instances(self, tape: Tape) -> dict[str, list[Recorded]]:
        return by_stream(tape, "memory/")

    def finished(self, state: ItemState) -> Decisions:
        return (partial(deletion, state, state.item_id, ""),) if state.deleted else ()


class TestTokenAggregate(AggregateConformance[Tokens]):
    aggregate = tokens
    kinds_on_tape = kinds(TokenCreated, TokenUsed, TokenRevoked)
    refusals = (TokenAlreadyRevoked,)
    # Every kind: the book's follower may read a row back before its writer's own fold
    # (Tail.written then folds nothing twice); token.used is also never waited for.
    read_back_kinds = kinds(TokenCreated, TokenUsed, TokenRevoked)

    def key(self, state: Tokens) -> str:
        return "tokens"

    def instances(self, tape: Tape) -> dict[str, list[Recorded]]:
        return {"tokens": of_kinds(tape, TOKEN_KINDS)}

    def finished(self, state: Tokens) -> Decisions:
        return [
            partial(revocation, state, token_id, "")
            for token_id, record in state.records.items()
            if record.revoked_at_ms is not None
        ]


class TestVaultAggregate(AggregateConformance[VaultState]):
    aggregate = vault_state
    kinds_on_tape = kinds(VaultSecretSet, VaultSecretRotated, VaultSecretDeleted)
    refusals = (UnknownSecret,)

    def key(self, state: VaultState) -> str:
        return "vault"

    def instances(self, tape: Tape) -> dict[str, list[Recorded]]:
        return {"vault": of_kinds(tape, VAULT_KINDS)}

    def finished(self, state: VaultState) -> Decisions:
        gone = [name for name, record in state.secrets.items() if record.deleted]
        return [partial(vault_decide.rotation, state, name, "a-new-value") for name in gone] + [
            partial(vault_decide.deletion, state, name) for name in gone
        ]


class TestScheduleAggregate(AggregateConformance[Schedules]):
    aggregate = schedule_state
    kinds_on_tape = kinds(
        ScheduleCreated,
        SchedulePaused,
        ScheduleResumed,
        ScheduleFired,
        ScheduleRunStarted,
        ScheduleDeleted,
    )
    refusals = (UnknownSchedule,)

    def key(self, state: Schedules) -> str:
        return "schedules"

    def instances(self, tape: Tape) -> dict[str, list[Recorded]]:
        return {"schedules": of_kinds(tape, SCHEDULE_KINDS)}

    def finished(self, state: Schedules) -> Decisions:
        gone = [s.name for s in state.by_id.values() if s.deleted]
        return [
            decision
            for name in gone
            for decision in (
                partial(schedule_decide.pausing, state, name),
                partial(schedule_decide.resuming, state, name, 0),
                partial(schedule_decide.deletion, state, name),
                partial(schedule_decide.run_now, state, name, run_id="r", now_ms=0),
            )
        ]
