"""What the model is told about a finished tool call."""

from __future__ import annotations

from events.catalog import ToolCompleted


def model_content(completed: ToolCompleted) -> str:
    """The tool message content for ``completed`` (also rebuilt from the journal on resume)."""
    if completed.ok:
        return completed.output + ("\n[output truncated]" if completed.truncated else "")
    return f"error ({completed.error_kind}): {completed.error}"
