"""What every actor of a node shares: the journal, the I/O loop, the provider, tools, policy."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from actors.approvals.gate import ToolGate
from actors.config import ActorsConfig
from actors.io_loop import IoLoop
from actors.provider import ModelProvider, ToolDefinition
from actors.registry import LiveRegistry
from actors.runs.context import TurnCache
from actors.runs.decide import Batching
from actors.tracing import Tracer
from events import JournalPort, new_id
from projections.memory.search import MemoryHit, MemoryItem
from tools import ToolCatalog

if TYPE_CHECKING:
    import pykka

    from actors.budgets.guard import BudgetGuard
    from actors.schedules.state import Schedule
    from actors.tasks.queue import TaskQueue
    from actors.vault.store import Vault


class Learned(Protocol):
    """An applied learning as the assembler offers it."""

    @property
    def candidate_id(self) -> str: ...
    @property
    def kind(self) -> str: ...
    @property
    def text(self) -> str: ...


class LearningPort(Protocol):
    """What runs read of the learning view: applied preferences of a principal, and
    procedure hints for a request like this one."""

    def offered(self, principal: str, text: str) -> Sequence[Learned]: ...


class MemoryPort(Protocol):
    """What runs read of the memory view (:class:`projections.memory.search.MemoryView`)."""

    def search(
        self, query: str, k: int = 5, *, principal: str | None = None, session_id: str | None = None
    ) -> list[MemoryHit]: ...

    def get(self, item_id: str) -> MemoryItem | None: ...


class SchedulesPort(Protocol):
    """What the watchdog reads of the schedule desk (:class:`actors.schedules.desk.
    ScheduleDesk`)."""

    def stopped(self) -> Sequence[Schedule]: ...


@dataclass
class Services:
    """Collaborators handed to actors at start (composition happens in the node)."""

    journal: JournalPort
    io: IoLoop
    provider: ModelProvider
    catalog: ToolCatalog
    gate: ToolGate
    workspace: Path
    config: ActorsConfig = field(default_factory=ActorsConfig)
    registry: LiveRegistry = field(default_factory=LiveRegistry)
    turns: TurnCache = field(default_factory=TurnCache)
    """Recent runs' text and answer, node-wide: prior turns without re-reading the journal."""
    learning: LearningPort | None = None
    """The learning view runs read applied preferences and procedure hints from (None: none)."""
    memory: MemoryPort | None = None
    """The memory view runs search for auto-injection and ``@memory`` references (None: no
    memory, nothing is injected)."""
    tasks: TaskQueue | None = None
    """The background task queue (actors.tasks.queue): post-run work is enqueued here."""
    vault: Vault | None = None
    """The data dir's vault: tool calls' handles resolve through it and its values are
    redacted from every result (None: no vault, a handle is a tool error)."""
    schedules: SchedulesPort | None = None
    """The node's schedule desk: the watchdog reads the schedules it stopped (None: none)."""
    tracer: Tracer | None = None
    """Where runs and tool calls record their spans (actors.tracing; None: no telemetry, and
    no span is built)."""
    budgets: BudgetGuard | None = None
    """``[budgets]`` over the usage view (docs/usage.md): checked before a run is accepted and
    at each turn boundary, and by the watchdog for soft limits (None: nothing is checked)."""
    directory: pykka.ActorRef[Any] | None = None
    new_session_id: Callable[[str | None], str] = lambda _key: new_id()
    """The id of a session the directory creates (given its key, if any): a fresh ULID; in a
    cluster, one whose shard this node owns (:mod:`transports.cluster.membership`)."""
    elsewhere: Callable[[Any], Future[Any]] | None = None
    """In a cluster, where a command for a session another node may own goes (the router):
    the watchdog's acts, which run on one node for all, and the session a branch with a key
    makes, which the key's shard's owner creates (None: a lone node)."""
    tool_definitions: tuple[ToolDefinition, ...] = ()
    draining: bool = False

    def batching(self) -> Batching:
        """Which calls runs batch: read-only by the catalog's entry, at most the configured
        number at once (recovery and the live runs ask the same)."""
        catalog = self.catalog
        return Batching(
            lambda call: catalog.reads_only(call.name, call.arguments),
            self.config.budgets.max_parallel_tool_calls,
        )

    def offer_tools(self) -> None:
        """Compute the tool list the model is offered (tools not disabled by posture)."""
        self.tool_definitions = tuple(
            ToolDefinition(name=s.name, description=s.description, parameters=s.json_schema())
            for s in self.catalog.specs()
            if self.gate.posture(s) != "disabled"
        )
