"""What every actor of a node shares: the journal, the I/O loop, the provider, tools, policy."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from actors.config import ActorsConfig
from actors.context import TurnCache
from actors.gate import ToolGate
from actors.io_loop import IoLoop
from actors.provider import ModelProvider, ToolDefinition
from actors.registry import LiveRegistry
from events import JournalPort
from tools import ToolCatalog

if TYPE_CHECKING:
    import pykka


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
    directory: pykka.ActorRef[Any] | None = None
    tool_definitions: tuple[ToolDefinition, ...] = ()
    draining: bool = False

    def offer_tools(self) -> None:
        """Compute the tool list the model is offered (tools not disabled by posture)."""
        self.tool_definitions = tuple(
            ToolDefinition(name=s.name, description=s.description, parameters=s.json_schema())
            for s in self.catalog.specs()
            if self.gate.posture(s) != "disabled"
        )
