"""Every log record of the process while a test runs, and what bad input must never cause."""

from __future__ import annotations

import logging


class Records(logging.Handler):
    """Every log record of the process while installed (any thread)."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)

    def __enter__(self) -> Records:
        root = logging.getLogger()
        self._level = root.level
        root.setLevel(min(self._level, logging.INFO))
        root.addHandler(self)
        return self

    def __exit__(self, *exc: object) -> None:
        root = logging.getLogger()
        root.removeHandler(self)
        root.setLevel(self._level)

    def text(self) -> str:
        return "\n".join(
            self.format(r) + (str(r.exc_info) if r.exc_info else "") for r in self.records
        )

    def refusals(self) -> list[logging.LogRecord]:
        return [r for r in self.records if r.name == "reel.grpc"]

    def faults(self) -> list[logging.LogRecord]:
        """Records that must never come from bad input: tracebacks and errors."""
        return [r for r in self.records if r.exc_info or r.levelno >= logging.ERROR]
