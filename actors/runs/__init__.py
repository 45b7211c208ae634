"""A run: its tape, the loop of model turns and tool calls, its context."""
