"""The JSON log lines (transports/logs.py): one object per line, and no secret in any of them."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator

import pytest

from actors.log_fields import fields
from events import JournalUnavailable
from transports.logs import JsonFormatter, outage_in_one_line

SECRET = "ghp_" + "A1b2C3d4" * 4 + "Ef"


@pytest.fixture
def written() -> Iterator[io.StringIO]:
    """What the ``reel.test`` logger writes through the node's formatter."""
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JsonFormatter())
    logger = logging.getLogger("reel.test")
    logger.addHandler(handler)
    logger.propagate = False
    logger.setLevel(logging.INFO)
    try:
        yield stream
    finally:
        logger.removeHandler(handler)
        logger.propagate = True


def lines(stream: io.StringIO) -> list[dict[str, object]]:
    return [json.loads(line) for line in stream.getvalue().splitlines()]


def test_a_secret_in_a_message_a_field_or_a_traceback_is_redacted(written: io.StringIO) -> None:
    log = logging.getLogger("reel.test")
    log.warning(
        "token %s refused", SECRET, extra=fields(error=f"bad {SECRET}", config={"k": SECRET})
    )
    try:
        raise RuntimeError(f"provider said {SECRET}")
    except RuntimeError:
        log.exception("failed")
    assert SECRET not in written.getvalue()
    first, second = lines(written)
    assert first["msg"] == "token [REDACTED] refused"
    assert first["error"] == "bad [REDACTED]" and first["config"] == {"k": "[REDACTED]"}
    assert "provider said [REDACTED]" in str(second["exc"])


def test_identifiers_and_numbers_are_written_as_they_are(written: io.StringIO) -> None:
    run_id = "01M8E6578D37X63H2F73QHG1JH"
    logging.getLogger("reel.test").info(
        "run state", extra=fields(run_id=run_id, state="done", pid=42, ok=True, reason=None)
    )
    (line,) = lines(written)
    assert (line["run_id"], line["state"], line["pid"], line["ok"]) == (run_id, "done", 42, True)
    assert line["reason"] is None


def test_an_unreachable_journal_is_one_warning_line_without_its_traceback() -> None:
    """pykka and the thread hook log what ends an actor or a thread with its traceback; a
    journal database restarting is an operational condition, said in one line."""
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JsonFormatter())
    handler.addFilter(outage_in_one_line)
    logger = logging.getLogger("reel.test.outage")
    logger.addHandler(handler)
    logger.propagate = False
    try:
        try:
            raise JournalUnavailable("cannot use the journal database db:5432/reel:\nrefused")
        except JournalUnavailable:
            logger.exception("Unhandled exception in %s:", "SessionActor (urn:x)")
        try:
            raise RuntimeError("a defect")
        except RuntimeError:
            logger.exception("Unhandled exception in %s:", "RunActor (urn:y)")
    finally:
        logger.removeHandler(handler)
    outage, defect = lines(stream)
    assert outage == {
        "ts": outage["ts"],
        "level": "warning",
        "logger": "reel.test.outage",
        "msg": "Unhandled exception in SessionActor (urn:x): cannot use the journal database "
        "db:5432/reel: refused",
    }
    assert defect["level"] == "error" and "RuntimeError: a defect" in str(defect["exc"])
