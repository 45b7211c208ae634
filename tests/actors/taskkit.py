"""A real node for the task queue tests: real journal, catalog, Cedar engine and deterministic
provider (as :mod:`tests.actors.nodekit`), started with a ``[tasks]`` config of the test's own
(short leases and backoffs), and helpers that wait on the journal for a task's events."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from actors import Node, ToolGate
from actors.tasks.queue import TaskQueue, TasksConfig
from actors.tasks.state import TaskState
from events import Journal, NodeKey, StoredEvent
from events.task_lifecycle import task_stream
from policies import PolicyEngine
from tests.actors.nodekit import SMALL, wait_on_journal
from tools import ToolsConfig, build_catalog
from transports.models import DeterministicProvider

DEADLINE_S = 15.0
"""Generous: only there so a broken queue fails the test instead of hanging it."""
QUICK = TasksConfig(workers=2, heartbeat_s=0.1, lease_s=0.5, backoff_base_s=0.2, backoff_max_s=2.0)
"""Short enough that retries and lapses happen within a test."""

T = TypeVar("T")


class TaskKit:
    """One node over ``root`` whose queue runs with ``config``; ``register`` hands handlers
    to the queue before the node starts (as node code must)."""

    def __init__(
        self,
        root: Path,
        config: TasksConfig = QUICK,
        handlers: dict[str, Callable[[Any, Any], Any]] | None = None,
        start: bool = True,
    ) -> None:
        root.mkdir(parents=True, exist_ok=True)
        workspace = root / "workspace"
        workspace.mkdir(exist_ok=True)
        self.journal = Journal(root / "journal.db", node_key=NodeKey.load_or_create(root / "key"))
        self.node = Node(
            journal=self.journal,
            provider=DeterministicProvider(),
            catalog=build_catalog(ToolsConfig(workspace_dir=str(workspace))),
            gate=ToolGate(PolicyEngine.load(None)),
            workspace=workspace,
            config=SMALL,
            tasks=config,
        )
        for kind, handler in (handlers or {}).items():
            self.node.tasks.register(kind, handler)
        self._closed = False
        if start:
            self.node.start()

    @property
    def queue(self) -> TaskQueue:
        return self.node.tasks

    def rows(self, task_id: str) -> list[StoredEvent]:
        return self.journal.read_stream(task_stream(task_id))

    def kinds(self, task_id: str) -> list[str]:
        return [row.kind for row in self.rows(task_id)]

    def wait_until(
        self, probe: Callable[[], T | None], what: str, timeout: float = DEADLINE_S
    ) -> T:
        """Poll ``probe`` after each journal commit until it returns a value (not None)."""
        return wait_on_journal(self.journal, probe, timeout, what)

    def wait_for_kind(self, task_id: str, kind: str, timeout: float = DEADLINE_S) -> StoredEvent:
        def probe() -> StoredEvent | None:
            return next((r for r in self.rows(task_id) if r.kind == kind), None)

        return self.wait_until(probe, f"{kind} of task {task_id}", timeout)

    def wait_for_end(self, task_id: str, timeout: float = DEADLINE_S) -> TaskState:
        def probe() -> TaskState | None:
            state = self.queue.get(task_id)
            return state if state is not None and state.status.terminal else None

        return self.wait_until(probe, f"the end of task {task_id}", timeout)

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            try:
                self.node.stop(grace_s=0.5)
            finally:
                self.journal.close()
