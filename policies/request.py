"""What the engine is asked: one proposed tool call, as plain values.

The vocabularies below are reel's, not Cedar's: a value outside them is refused with
:class:`~policies.errors.PolicyRequestError` before Cedar sees it, so a typo in a tool
declaration can never turn into a silently non-sensitive tool.
"""

from __future__ import annotations

from typing import Final

import msgspec

CAPABILITIES: Final[frozenset[str]] = frozenset(
    {"fs.read", "fs.write", "net.egress", "process.exec", "secrets.read", "memory.write"}
)
"""Every capability a tool may declare (``memory.write``: records a durable memory item that
later runs are shown, see ``tools/spec.py``)."""

SENSITIVE_CAPABILITIES: Final[tuple[str, ...]] = (
    "process.exec",
    "net.egress",
    "fs.write",
    "secrets.read",
    "memory.write",
)
"""Capabilities that make a tool sensitive. The rule that acts on them lives in
``tool_execute.cedar`` (``baseline.tool.low_risk``); this copy only words the reason."""

RISKS: Final[tuple[str, ...]] = ("low", "medium", "high", "critical")
"""Risk levels, lowest first."""

SENSITIVE_RISKS: Final[frozenset[str]] = frozenset({"high", "critical"})
"""Risk levels that make a tool sensitive."""

POSTURES: Final[tuple[str, ...]] = ("always_allow", "ask_each_time", "disabled")
"""Tool postures: the operator's per-tool default, possibly overridden per scope."""


CHANNEL_PRINCIPAL_PREFIX: Final = "channel:"
"""How a chat sender's principal begins (``channel:<channel>:<sender>``): no token is ever made
for one, so a sender holds no role."""


class UsageToday(msgspec.Struct, frozen=True, kw_only=True):
    """What a principal used so far today (UTC), as ``context.usage_today`` gives it to Cedar
    (docs/usage.md): whole numbers, since Cedar compares Longs."""

    tokens: int = 0
    """Input plus output tokens."""
    input_tokens: int = 0
    output_tokens: int = 0
    cached_tokens: int = 0
    cost_micros: int = 0
    """The cost by ``[usage.prices]`` in millionths of the price unit (unpriced models: 0)."""
    runs: int = 0
    """Runs accepted."""


class ToolRequest(msgspec.Struct, frozen=True, kw_only=True):
    """One proposed tool call, described by the node to the engine.

    ``capabilities``, ``risk`` and ``posture`` are the tool's declaration and its
    effective posture for this call; ``approved`` is true when a human approved this call
    or a cached approval grant covers it.
    """

    principal: str
    """Who asks, e.g. ``alice`` or ``channel:discord``."""
    tool: str
    """The tool's catalog name, e.g. ``shell.run``."""
    capabilities: tuple[str, ...]
    """Members of :data:`CAPABILITIES`."""
    risk: str
    """One of :data:`RISKS`."""
    posture: str
    """One of :data:`POSTURES`."""
    channel: str | None = None
    """The channel the run came from, or None for direct API / CLI use."""
    session_id: str = ""
    """The session the call belongs to ("" when there is none, e.g. ``reel policy check``)."""
    run_id: str = ""
    """The run the call belongs to ("" when there is none)."""
    approved: bool = False
    """Whether this call is already approved."""
    roles: tuple[str, ...] = ()
    """The principal's roles (Cedar entity parents: ``principal in Role::"operator"``), from
    the tokens it holds; members of :data:`policies.access.ROLES`."""
    usage_today: UsageToday = UsageToday()
    """The principal's usage so far today (``context.usage_today``)."""

    @property
    def stranger(self) -> bool:
        """The principal is a chat sender holding no role: paired or not, it gets no tool
        without a human's approval (``baseline.tool.stranger``, the context's ``stranger``)."""
        return self.principal.startswith(CHANNEL_PRINCIPAL_PREFIX) and not self.roles


class SecretRequest(msgspec.Struct, frozen=True, kw_only=True):
    """One secret a proposed tool call names by handle (``vault.use``), described to the
    engine: who the run acts for (with its roles), the tool and the secret's name."""

    principal: str
    tool: str
    secret: str
    """The secret's name (``Secret::"<name>"``)."""
    roles: tuple[str, ...] = ()
    session_id: str = ""
    run_id: str = ""
