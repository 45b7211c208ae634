"""A real node on a tmp dir for the actor tests: real journal, catalog, Cedar engine and the
deterministic provider; helpers to start runs and read their tapes.

The tape of a run is ``journal.read_correlated(run_id)``: the run's own events plus its tool
invocations' events, in journal order (``run.accepted`` lives on the session stream but carries
the run as correlation id, so it is the tape's first entry).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TypeVar

import msgspec

from actors import ActorsConfig, Node, RunBudgets, ToolGate
from actors.messages import RunTicket, StartRun
from actors.provider import ModelProvider
from events import Journal, NodeKey, StoredEvent
from events.catalog import Event
from policies import PolicyEngine
from tools import Posture, ToolCatalog, ToolsConfig, build_catalog
from transports.models import DeterministicProvider

TERMINAL = frozenset({"run.completed", "run.failed", "run.cancelled"})
DEADLINE_S = 30.0
"""Generous: only there so a broken actor fails the test instead of hanging it (a redaction-heavy
run took over 10 s on a loaded two-core machine)."""

SMALL = ActorsConfig(budgets=RunBudgets(max_turns=4, max_tool_calls=8, wall_clock_s=60.0))
"""The default for tests: small budgets, everything else as shipped."""

T = TypeVar("T")


def wait_on_journal(
    journal: Journal, probe: Callable[[], T | None], timeout: float, what: str
) -> T:
    """Poll ``probe`` after each commit of ``journal`` until it returns a value (not None);
    AssertionError naming ``what`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        head = journal.committed_position
        value = probe()
        if value is not None:
            return value
        left = deadline - time.monotonic()
        if left <= 0:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        journal.wait_for(head, timeout=min(left, 0.1))


class NodeKit:
    """One started :class:`actors.Node` over ``root`` (journal, node key, workspace)."""

    def __init__(
        self,
        root: Path,
        *,
        config: ActorsConfig = SMALL,
        tools: ToolsConfig | None = None,
        provider: ModelProvider | None = None,
        postures: Mapping[str, Posture] | None = None,
        policy_dir: Path | None = None,
        catalog: ToolCatalog | None = None,
    ) -> None:
        root.mkdir(parents=True, exist_ok=True)
        self.root = root
        self.workspace = root / "workspace"
        self.workspace.mkdir(exist_ok=True)
        tools_config = tools or ToolsConfig(shell_allowlist=("echo",))
        tools_config = msgspec.structs.replace(tools_config, workspace_dir=str(self.workspace))
        self.catalog = catalog or build_catalog(tools_config)
        self.engine = PolicyEngine.load(policy_dir)
        self.gate = ToolGate(self.engine, postures)
        self.journal = Journal(
            root / "journal.db", node_key=NodeKey.load_or_create(root / "node.key")
        )
        self.node = Node(
            journal=self.journal,
            provider=provider or DeterministicProvider(),
            catalog=self.catalog,
            gate=self.gate,
            workspace=self.workspace,
            config=config,
        )
        self.node.start()
        self._closed = False

    # --- commands --------------------------------------------------------------------------

    def ask(self, command: Any, timeout: float = DEADLINE_S) -> Any:
        """Send a command and wait for its reply (raises the actors error it carries)."""
        return self.node.ask(command, timeout=timeout)

    def start_run(self, text: str, **fields: Any) -> RunTicket:
        """``StartRun`` in a new session unless ``session_id``/``session_key`` is given."""
        if "session_id" not in fields and "session_key" not in fields:
            fields.setdefault("create", True)
        ticket = self.ask(StartRun(text=text, **fields))
        assert isinstance(ticket, RunTicket)
        return ticket

    def run(self, text: str, **fields: Any) -> tuple[RunTicket, Event]:
        """Start a run and wait for its end; returns the ticket and the terminal event."""
        ticket = self.start_run(text, **fields)
        return ticket, self.wait_for_end(ticket.run_id)

    # --- reading ---------------------------------------------------------------------------

    def stored(self, run_id: str) -> list[StoredEvent]:
        """The run's tape as stored rows (positions, streams)."""
        return self.journal.read_correlated(run_id)

    def tape(self, run_id: str) -> list[tuple[str, Event]]:
        """The run's tape as (kind, decoded event)."""
        return [(s.kind, s.decode()) for s in self.stored(run_id)]

    def kinds(self, run_id: str) -> list[str]:
        return [s.kind for s in self.stored(run_id)]

    def events(self, run_id: str, kind: str) -> list[Any]:
        """The decoded events of one kind on the run's tape."""
        return [event for k, event in self.tape(run_id) if k == kind]

    def wait_until(
        self, probe: Callable[[], T | None], timeout: float = DEADLINE_S, what: str = ""
    ) -> T:
        """Poll ``probe`` after each journal commit until it returns a value (not None)."""
        return wait_on_journal(self.journal, probe, timeout, what or str(probe))

    def wait_for_kind(self, run_id: str, kind: str, timeout: float = DEADLINE_S) -> Any:
        """The first event of ``kind`` on the run's tape, waiting for it."""

        def probe() -> Any:
            found = self.events(run_id, kind)
            return found[0] if found else None

        return self.wait_until(probe, timeout, f"{kind} in run {run_id}")

    def wait_for_approval(self, run_id: str, timeout: float = DEADLINE_S) -> Any:
        """The run's first ``tool.approval_requested``, once its approval is routable (the tool
        actor registers it before appending the request; this wait documents that order)."""
        request = self.wait_for_kind(run_id, "tool.approval_requested", timeout)
        registry = self.node.services.registry
        self.wait_until(
            lambda: registry.approval(request.approval_id),
            timeout,
            f"approval {request.approval_id} to be routable",
        )
        return request

    def wait_for_end(self, run_id: str, timeout: float = DEADLINE_S) -> Event:
        """The run's terminal event, waiting for it."""

        def probe() -> Event | None:
            ended = [s for s in self.stored(run_id) if s.kind in TERMINAL]
            return ended[0].decode() if ended else None

        return self.wait_until(probe, timeout, f"the end of run {run_id}")

    # --- lifecycle -------------------------------------------------------------------------

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            try:
                self.node.stop(grace_s=0.5)
            finally:
                self.journal.close()
