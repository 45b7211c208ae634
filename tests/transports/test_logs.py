"""The JSON log lines (transports/logs.py): one object per line, and no secret in any of them."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator

import pytest

from actors.log_fields import fields
from transports.logs import JsonFormatter

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
