"""Logging for the ``reel`` process: one JSON object per line on stderr, whoever logs.

``configure()`` is called once, by the CLI entry point, before any command runs (reel's loggers
from INFO, libraries' from WARNING). After it, every record (reel's own loggers, aiohttp,
grpclib, asyncio, pykka, ``warnings``, an exception that escapes a thread) becomes one line::

    {"ts": "2026-11-22T18:14:04.041+00:00", "level": "warning", "logger": "reel.http",
     "msg": "refused a malformed HTTP request (BadHttpMessage)", ...fields}

``ts`` is UTC with milliseconds; a record's structured values (``extra=fields(...)``) are keys of
the same object; a traceback is one string under ``exc``, never raw lines. A log line parser
(or ``jq``) never meets anything else on stderr, apart from the CLI's own ``reel: error: ...``.

Secrets: every line goes through the journal's redaction (``events.redaction.redact``) before it is
written: the message, every structured value but the identifiers of `IDENTIFIERS` (ids,
states, counts and addresses reel itself made), and a traceback. A secret that reaches a log
call through a config value (a key pasted into ``runs.system_prompt``), an error or an
exception's text is written ``[REDACTED]``, as the journal would store it. The ``hpack``
header codec (used by grpclib through h2) logs every header, the ``authorization`` metadata
included, at DEBUG: its loggers are pinned at WARNING whatever the root level.
"""

from __future__ import annotations

import json
import logging
import sys
import threading
from datetime import UTC, datetime
from typing import Any, TextIO

from actors.log_fields import FIELDS

CORE = ("ts", "level", "logger", "msg")
"""Keys every line has, in this order."""

QUIET_LOGGERS = ("hpack", "h2")
"""Loggers that write request headers (tokens) at DEBUG: never below WARNING."""

_HANDLER_NAME = "reel.json"

IDENTIFIERS = frozenset(
    {
        "ts",
        "run_id",
        "session_id",
        "event_id",
        "approval_id",
        "task_id",
        "invocation_id",
        "state",
        "kind",
        "position",
        "pid",
        "version",
        "exit_code",
        "signal",
        "journal_head",
        "http_host",
        "http_port",
        "grpc_host",
        "grpc_port",
        "console",
        "grpc",
    }
)
"""Fields written as they are: values reel made itself (redaction would only cost time)."""


def timestamp(seconds: float) -> str:
    """``2026-11-22T18:14:04.041+00:00``: the ``ts`` of every line."""
    return datetime.fromtimestamp(seconds, UTC).isoformat(timespec="milliseconds")


class JsonFormatter(logging.Formatter):
    """A record as one JSON object on one line (newlines inside values are escaped)."""

    def format(self, record: logging.LogRecord) -> str:
        # Imported on the first line, not with the module: every CLI command configures logging,
        # and most never log (the redaction's expressions cost a few hundredths of a second).
        from events.redaction.redact import redact_text, redact_value

        line: dict[str, Any] = {
            "ts": timestamp(record.created),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": redact_text(record.getMessage())[0],
        }
        values: dict[str, Any] = getattr(record, FIELDS, None) or {}
        for key, value in values.items():
            if key in CORE[1:]:
                continue
            plain = key in IDENTIFIERS or value is None or isinstance(value, (bool, int, float))
            line[key] = value if plain else redact_value(value)[0]
        if record.exc_info:
            line["exc"] = redact_text(self.formatException(record.exc_info))[0]
        elif record.exc_text:
            line["exc"] = redact_text(record.exc_text)[0]
        if record.stack_info:
            line["stack"] = self.formatStack(record.stack_info)
        return json.dumps(line, default=str)


def configure(
    level: int = logging.INFO,
    *,
    library_level: int = logging.WARNING,
    stream: TextIO | None = None,
) -> None:
    """Send every log record to ``stream`` (default stderr) as JSON lines; idempotent.

    reel's own loggers (``reel.*``) log from ``level``; everything else from ``library_level``
    (grpclib and pykka report routine events, such as a cancelled request or an error handed
    back to a caller, at INFO). Also routes ``warnings`` and exceptions that end a thread
    (``threading.excepthook``) through logging, so that neither prints a raw traceback."""
    root = logging.getLogger()
    for handler in list(root.handlers):
        if handler.get_name() == _HANDLER_NAME:
            root.removeHandler(handler)
    handler = logging.StreamHandler(stream if stream is not None else sys.stderr)
    handler.set_name(_HANDLER_NAME)
    handler.setFormatter(JsonFormatter())
    handler.addFilter(outage_in_one_line)
    root.addHandler(handler)
    root.setLevel(library_level)
    logging.getLogger("reel").setLevel(level)
    for name in QUIET_LOGGERS:
        logging.getLogger(name).setLevel(max(logging.WARNING, library_level))
    logging.captureWarnings(True)
    threading.excepthook = _thread_died


def outage_in_one_line(record: logging.LogRecord) -> bool:
    """A journal that cannot be reached (a database restarting), and in a cluster a shard this
    node no longer holds (handed over, or fenced), are operational conditions, not defects:
    wherever they end an actor or a thread, each is one warning line, its message after the
    record's, without the traceback."""
    if not record.exc_info:
        return True
    from events.errors import Fenced, JournalUnavailable, ShardNotOwned  # most records have none

    exc = record.exc_info[1]
    if isinstance(exc, JournalUnavailable | ShardNotOwned | Fenced):
        record.msg, record.args = f"{record.getMessage().rstrip(':')}: {exc}", None
        record.exc_info, record.exc_text = None, None
        record.levelno, record.levelname = logging.WARNING, "WARNING"
    return True


def _thread_died(args: threading.ExceptHookArgs) -> None:
    if args.exc_type is SystemExit:
        return
    name = args.thread.name if args.thread is not None else "?"
    exc_info = (args.exc_type, args.exc_value, args.exc_traceback)
    logging.getLogger("reel").error(
        "uncaught exception in thread %s",
        name,
        exc_info=exc_info,  # type: ignore[arg-type]
    )
