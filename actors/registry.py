"""Routing tables for what is live right now: runs and pending approvals.

Like pykka's own actor registry this is routing infrastructure, not domain state: it only says
where to deliver a cancel or a decision. Everything it holds is also derivable from the journal.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Collection
from typing import Any

import pykka

ENDED_MEMORY = 10_000
"""How many ended run ids the registry remembers (a late registration comes within moments)."""


class LiveRegistry:
    """Thread-safe maps: live run -> (session, actor); queued run -> session;
    pending approval -> (run, tool actor)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._runs: dict[str, tuple[str, pykka.ActorRef[Any]]] = {}
        self._queued: dict[str, str] = {}
        self._approvals: dict[str, tuple[str, pykka.ActorRef[Any]]] = {}
        self._ended: dict[str, None] = {}
        """Recently ended runs (insertion-ordered), so a late registration cannot revive one."""

    def run_started(self, run_id: str, session_id: str, ref: pykka.ActorRef[Any]) -> None:
        """Route to a run. Both the session (when it starts the actor) and the actor itself
        register it, in either order; a run that has already ended is not registered again."""
        with self._lock:
            self._queued.pop(run_id, None)
            if run_id not in self._ended:
                self._runs[run_id] = (session_id, ref)

    def run_queued(self, run_id: str, session_id: str) -> None:
        with self._lock:
            self._queued[run_id] = session_id

    def run_dropped(self, run_id: str) -> None:
        """Stop routing to a run this node no longer runs, without counting it ended: a
        cluster node that lost its shard (the new owner's recovery ends or resumes it, and if
        the shard comes back here, this node's does, and registers it again)."""
        with self._lock:
            self._runs.pop(run_id, None)
            self._queued.pop(run_id, None)

    def run_ended(self, run_id: str) -> None:
        with self._lock:
            self._runs.pop(run_id, None)
            self._queued.pop(run_id, None)
            self._ended[run_id] = None
            if len(self._ended) > ENDED_MEMORY:
                self._ended.pop(next(iter(self._ended)))

    def live_run(self, run_id: str) -> pykka.ActorRef[Any] | None:
        with self._lock:
            entry = self._runs.get(run_id)
        return entry[1] if entry else None

    def queued_session(self, run_id: str) -> str | None:
        with self._lock:
            return self._queued.get(run_id)

    def live_runs_of(self, session_id: str) -> list[str]:
        with self._lock:
            return [r for r, (s, _) in self._runs.items() if s == session_id]

    def live_run_count(self) -> int:
        with self._lock:
            return len(self._runs)

    def live_runs(self) -> dict[str, pykka.ActorRef[Any]]:
        """Live run id -> run actor."""
        with self._lock:
            return {run_id: ref for run_id, (_, ref) in self._runs.items()}

    def queued_runs_where(self, session: Callable[[str], bool]) -> list[str]:
        """Queued run ids of the sessions ``session(session_id)`` picks."""
        with self._lock:
            return [run_id for run_id, s in self._queued.items() if session(s)]

    def live_runs_where(self, session: Callable[[str], bool]) -> dict[str, pykka.ActorRef[Any]]:
        """Live run id -> run actor, of the sessions ``session(session_id)`` picks."""
        with self._lock:
            return {run_id: ref for run_id, (s, ref) in self._runs.items() if session(s)}

    def runs_awaiting_approval(self) -> set[str]:
        """Runs that have an approval pending."""
        with self._lock:
            return {run_id for run_id, _ in self._approvals.values()}

    def approval_pending(self, approval_id: str, run_id: str, ref: pykka.ActorRef[Any]) -> None:
        with self._lock:
            self._approvals[approval_id] = (run_id, ref)

    def approval_closed(self, approval_id: str) -> None:
        with self._lock:
            self._approvals.pop(approval_id, None)

    def approvals_of(self, run_ids: Collection[str]) -> dict[str, pykka.ActorRef[Any]]:
        """Pending approval id -> tool actor, of the runs ``run_ids``."""
        with self._lock:
            return {a: ref for a, (run, ref) in self._approvals.items() if run in run_ids}

    def approval(self, approval_id: str) -> pykka.ActorRef[Any] | None:
        with self._lock:
            entry = self._approvals.get(approval_id)
        return entry[1] if entry else None

    def pending_approvals(self) -> list[str]:
        with self._lock:
            return list(self._approvals)
