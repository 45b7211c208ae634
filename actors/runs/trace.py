"""The spans of a run's own work (actors.tracing): the run, its context assembly with the memory
search in it, and each model turn. Pure: built from the run's folded state and the times and
span ids its actor took; the actor records them when a tracer is configured, else builds none.

What each span says is counted or named, never quoted: the message's size, not its text; a
turn's token counts and finish code, not its output; how many memory items matched, not which
text they hold.
"""

from __future__ import annotations

from dataclasses import dataclass

from actors.runs.state import RunState
from actors.tracing import CONTEXT, MEMORY_SEARCH, RUN, TURN, Attribute, Span, code, run_span_id
from events.catalog import RunCompleted, RunContextAssembled, RunTurnCompleted


@dataclass(frozen=True, slots=True)
class Searched:
    """The memory search of a context assembly, as the run actor timed it."""

    span_id: int
    start_ns: int
    end_ns: int
    k: int
    hits: int
    injected: int
    failed: bool = False


def ids(state: RunState) -> dict[str, Attribute]:
    """The attributes every span of the run carries: whose run it is and where."""
    out: dict[str, Attribute] = {
        "reel.run_id": state.run_id,
        "reel.session_id": state.session_id,
        "reel.principal": state.principal,
    }
    if state.channel:
        out["reel.channel"] = state.channel
    return out


def run_span(state: RunState, start_ns: int, end_ns: int) -> Span:
    """The run's root span, once it has ended (``state.end`` set)."""
    end = state.end
    status = state.status.value
    reason = end.reason if end is not None else ""
    return Span(
        name=RUN,
        run_id=state.run_id,
        span_id=run_span_id(state.run_id),
        parent_id=None,
        start_ns=start_ns,
        end_ns=end_ns,
        attributes={
            **ids(state),
            "gen_ai.operation.name": "invoke_agent",
            "reel.run.status": status,
            "reel.run.reason": reason,
            "reel.run.turns": len(state.turns),
            "reel.run.tool_calls": state.tool_calls,
            "reel.message.bytes": len(state.text.encode()),
            "gen_ai.usage.input_tokens": state.prompt_tokens,
            "gen_ai.usage.output_tokens": state.completion_tokens,
        },
        error=None if isinstance(end, RunCompleted) else reason or status,
    )


def context_spans(
    state: RunState,
    event: RunContextAssembled,
    *,
    span_id: int,
    start_ns: int,
    end_ns: int,
    searched: Searched | None,
) -> tuple[Span, ...]:
    """The context assembly's span and, when memory was searched, the search's (its child)."""
    context = Span(
        name=CONTEXT,
        run_id=state.run_id,
        span_id=span_id,
        parent_id=run_span_id(state.run_id),
        start_ns=start_ns,
        end_ns=end_ns,
        attributes={
            **ids(state),
            "reel.context.prior_runs": len(event.prior_runs),
            "reel.context.dropped_runs": event.dropped_runs,
            "reel.context.memory_items": len(event.memory),
            "reel.context.references": len(event.references),
            "reel.context.learned": len(event.learned),
            "reel.context.estimated_input_tokens": event.estimated_input_tokens,
            "reel.context.budget_tokens": event.budget_tokens,
        },
    )
    if searched is None:
        return (context,)
    search = Span(
        name=MEMORY_SEARCH,
        run_id=state.run_id,
        span_id=searched.span_id,
        parent_id=span_id,
        start_ns=searched.start_ns,
        end_ns=searched.end_ns,
        attributes={
            **ids(state),
            "reel.memory.k": searched.k,
            "reel.memory.hits": searched.hits,
            "reel.memory.injected": searched.injected,
        },
        error="memory_error" if searched.failed else None,
    )
    return (search, context)


def turn_span(
    state: RunState,
    number: int,
    *,
    span_id: int,
    provider: str,
    start_ns: int,
    end_ns: int,
    completed: RunTurnCompleted | None,
    output_chars: int,
    error: str | None = None,
) -> Span:
    """One model turn: with its ``run.turn_completed`` when the provider finished it, else
    ``error`` (the code the run stopped with: ``provider_error``, ``cancelled``...)."""
    attributes: dict[str, Attribute] = {
        **ids(state),
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": code(provider),
        "reel.turn": number,
        "reel.turn.output_chars": output_chars,
    }
    if completed is not None:
        attributes |= {
            "gen_ai.response.model": code(completed.model),
            "gen_ai.usage.input_tokens": completed.prompt_tokens,
            "gen_ai.usage.output_tokens": completed.completion_tokens,
            "reel.turn.cached_tokens": completed.cached_tokens,
            "reel.turn.finish_reason": code(completed.finish_reason),
            "reel.turn.tool_calls": completed.tool_calls,
        }
    return Span(
        name=TURN,
        run_id=state.run_id,
        span_id=span_id,
        parent_id=run_span_id(state.run_id),
        start_ns=start_ns,
        end_ns=end_ns,
        attributes=attributes,
        error=error,
    )
