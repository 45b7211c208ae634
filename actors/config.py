"""Settings the actors run under (the daemon decodes them from config.toml + ``REEL_*``)."""

from __future__ import annotations

from typing import Annotated

import msgspec


class RunBudgets(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Limits every run stops at, recording the matching termination reason."""

    max_turns: int = 16
    """Provider calls per run (reason ``max_turns``)."""
    max_tool_calls: int = 8
    """Tool calls per run (reason ``max_tool_calls``)."""
    wall_clock_s: float = 900.0
    """Time in progress, not counting time awaiting approval (reason ``wall_clock``)."""
    max_parallel_tool_calls: Annotated[int, msgspec.Meta(ge=1, le=64)] = 4
    """Read-only calls of one turn that run at once (``[runs] max_parallel_tool_calls``; 1: one
    call at a time). Calls that may write, or that wait for a human, always run alone."""


class ActorsConfig(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Node-wide behaviour of sessions, runs and tool invocations."""

    budgets: RunBudgets = RunBudgets()
    provider_model: str = ""
    """The configured model of the node's provider (``[provider] model``), recorded on
    ``run.started`` ("" records none)."""
    system_prompt: str = "You are a helpful assistant run by reel. Use tools when they help."
    max_message_bytes: int = 64 * 1024
    """A user message larger than this is refused (field ``text``)."""
    idle_passivate_s: float = 2.0
    """A session with nothing live is stopped (its thread returned) after this long without a
    command; 0 stops it as soon as it is idle. It wakes on its next message either way. A few
    seconds keep a conversation's thread between its messages (stopping and waking a session
    for every run cost 10-15% of throughput with 100 busy sessions) while idle sessions still
    cost no thread."""
    passivate_check_s: float = 1.0
    chunk_max_words: int = 16
    chunk_max_age_s: float = 0.05
    approval_timeout_s: float = 600.0
    """A pending approval older than this is denied with reason ``timeout``."""
    tool_result_max_chars: int = 16_000
    """Tool output fed back to the model is cut to this many characters."""
    context_budget_tokens: int = 16_000
    """Estimated input tokens a run's first model call may use (``[context] budget_tokens``):
    the system prompt, the compaction summary, earlier turns, injected memory, references and
    the message (docs/context.md splits it)."""
    compact_at: float = 0.75
    """A session is compacted after a run when its history (the summary in force plus the
    completed runs it does not cover) passes this fraction of the tokens earlier turns may use
    (``[context] compact_at``; docs/context.md, "Compaction"). 0 or less: never automatically."""
    compact_cooldown_s: float = 60.0
    """At least this long between a session's compaction and its next automatic one
    (``[context] cooldown_s``); a requested compaction ignores it."""
    memory_inject_k: int = 3
    """Memory items injected into a run's context at most (0: none)."""
    memory_min_score: float = 0.35
    """A memory hit is injected at or above this final score (0-1)..."""
    memory_min_evidence: float = 2.0
    """...or when at least :data:`actors.runs.context.EVIDENCE_TERMS` of the message's words are in
    it and they weigh at least this (``MemoryHit.evidence``: in IDFs of a word one item holds),
    whatever the rest of a long message says. 0: by final score only."""
    cancel_grace_s: float = 1.0
    """How long a cancelled run waits for an in-flight tool to stop before it records the end."""

    @property
    def passivates_at_once(self) -> bool:
        """Whether a session that reports itself idle is stopped at once (``idle_passivate_s``
        <= 0); otherwise the directory's tick stops it once idle long enough."""
        return self.idle_passivate_s <= 0
