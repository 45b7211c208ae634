"""Start-up recovery: resolve from the journal whatever a crash or a stop left in flight.

Before any actor starts, every run the journal shows accepted but not ended is folded
(:mod:`actors.runs.state`, :mod:`actors.invocations.state`: the same folds the live actors use) and
the run decider is asked what it would do next (:func:`actors.runs.decide.next_step`):

* a run waiting for a human (or about to) is *resumed*: its actor starts with the folded state,
  the approval is pending again, or takes effect if an operator decided it while the node was
  down (``reel approvals``);
* a run in a batch of read-only calls (``batching``: the catalog's, as the live run uses) is
  resumed too: the results recorded stay, the calls cut off run again;
* every other run was doing machine work the crash cut off: it fails ``interrupted``, its
  unfinished tool invocations completed ``interrupted`` first, so its terminal event stays last
  in its tape. Each append states the seq its stream's folded state expects.

``always`` grants are loaded into the gate, which follows the journal from then on
(:meth:`~actors.approvals.gate.ToolGate.follow_grants`).

A node of a cluster recovers shard by shard as it acquires them (``shards``): only the runs whose
streams are in those shards (a session's runs live in its shard), the grants once at its start.
"""

from __future__ import annotations

from collections.abc import Container

import msgspec

from actors.aggregate import fold
from actors.approvals.gate import ToolGate
from actors.approvals.grants import Grant
from actors.config import ActorsConfig
from actors.invocations.state import InvocationState, fold_invocations
from actors.runs import state as run_fold
from actors.runs.context import Prior, TurnCache, prior_budget, prior_of
from actors.runs.decide import SEQUENTIAL, Batching, interrupt, next_step, resumable
from actors.runs.state import RunState
from actors.sessions import state as session_state
from actors.stream import recorded
from events import JournalPort, JournalReadPort
from events.catalog import ApprovalResolved, RunAccepted, kind_of
from events.lifecycle import TERMINAL_KINDS


class Resumed(msgspec.Struct, frozen=True, kw_only=True):
    """A run to continue: its folded state and what its actor needs besides."""

    state: RunState
    invocations: tuple[InvocationState, ...]
    """The run's unfinished calls (the one waiting for its approval, the read-only calls of a
    batch)."""
    prior: Prior
    grants: tuple[Grant, ...] = ()
    postures: tuple[tuple[str, str], ...] = ()


class RecoveryReport(msgspec.Struct, frozen=True):
    """What recovery resolved, and the runs to resume."""

    interrupted_runs: tuple[str, ...] = ()
    closed_approvals: tuple[str, ...] = ()
    always_grants: int = 0
    resumed: tuple[Resumed, ...] = ()


def recover(
    journal: JournalPort,
    gate: ToolGate,
    turns: TurnCache,
    config: ActorsConfig,
    batching: Batching = SEQUENTIAL,
    shards: Container[int] | None = None,
    grants: bool = True,
) -> RecoveryReport:
    """Resolve in-flight runs, tools and approvals; load the ``always`` grants into ``gate``,
    which follows the journal from then on. ``batching``: which calls the live runs batch (the
    same answer decides which runs resume). ``shards``: only the runs in these shards (a
    cluster node acquiring them); ``grants=False``: leave the gate's grants as they are (it
    follows them already)."""
    interrupted: list[str] = []
    approvals: list[str] = []
    resumed: list[Resumed] = []
    # Through the kind index, the runs that ended left out by SQLite: start-up reads what is
    # in flight, not every run the journal ever held.
    for accepted in journal.open_events(
        kind_of(RunAccepted), tuple(TERMINAL_KINDS), "correlation_id"
    ):
        run_id = accepted.correlation_id
        if run_id is None or (shards is not None and accepted.shard not in shards):
            continue
        tape = recorded(journal.read_correlated(run_id))
        state = fold(run_fold, tape)
        assert state is not None, "a run's tape starts with its run.accepted"
        invocations = fold_invocations(tape)
        if resumable(next_step(state, batching)):
            resumed.append(_resume(journal, turns, state, invocations, config))
            continue
        for stream, expected_seq, events in interrupt(state, invocations):
            journal.append(
                stream,
                events,
                expected_seq=expected_seq,
                principal="node",
                correlation_id=run_id,
                causation_id=run_id if stream.startswith("tool/") else state.session_id,
                home=state.session_id,
            )
            approvals.extend(e.approval_id for e in events if isinstance(e, ApprovalResolved))
        interrupted.append(run_id)
    active = gate.follow_grants(journal).active if grants else frozenset()
    return RecoveryReport(tuple(interrupted), tuple(approvals), len(active), tuple(resumed))


def _resume(
    journal: JournalReadPort,
    turns: TurnCache,
    state: RunState,
    invocations: dict[str, InvocationState],
    config: ActorsConfig,
) -> Resumed:
    stream = session_state.stream_of(state.session_id)
    session = fold(session_state, recorded(journal.read_stream(stream)))
    history = session.history if session is not None else ()
    prior = turns.prior(
        journal,
        prior_of(history, state.run_id),
        session.compaction if session is not None else None,
        prior_budget(config.context_budget_tokens, config.system_prompt, state.text),
    )
    return Resumed(
        state=state,
        invocations=tuple(i for i in invocations.values() if i.completed is None),
        prior=prior,
        grants=session.grants if session is not None else (),
        postures=tuple(session.overrides.items()) if session is not None else (),
    )
