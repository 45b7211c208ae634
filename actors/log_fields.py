"""Structured values on a log line: what ``transports.logs.JsonFormatter`` writes as top-level
keys of the line (after redaction). Defined below the transports so that actors log the same
way the edges do."""

from __future__ import annotations

FIELDS = "reel_fields"
"""The ``LogRecord`` attribute ``fields()`` stores a line's structured values under."""


def fields(**values: object) -> dict[str, object]:
    """``extra=`` for a log call: each value becomes a top-level key of the JSON line.

    ``log.info("drain progress", extra=fields(runs_in_flight=2))``. A ``ts`` value (an ISO 8601
    string) replaces the record's time: a line about a journaled fact carries when it was
    recorded. The other core keys (level, logger, msg) cannot be replaced."""
    return {FIELDS: values}
