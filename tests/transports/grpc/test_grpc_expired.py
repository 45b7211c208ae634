"""grpclib's "Timeout occurred" for a deadline that passed before the handler started is
logged as the client's deadline (INFO, no traceback); any other timeout stays an error."""

from __future__ import annotations

import asyncio
import logging
import sys

import pytest
from grpclib.utils import DeadlineWrapper

from transports.grpc.expired import install


def _record(exc: BaseException) -> logging.LogRecord:
    try:
        raise exc
    except BaseException as caught:
        assert caught is exc
        return logging.LogRecord(
            "grpclib.server", logging.ERROR, __file__, 1, "Timeout occurred", (), sys.exc_info()
        )


def _expired() -> BaseException:
    """The TimeoutError grpclib's deadline raises when entered past its time."""
    from grpclib.metadata import Deadline

    async def enter() -> None:
        with DeadlineWrapper().start(Deadline.from_timeout(-1.0)):
            pass

    try:
        asyncio.run(enter())
    except TimeoutError as exc:
        return exc
    raise AssertionError("grpclib's deadline did not raise")


def test_an_expired_deadline_is_logged_as_the_clients() -> None:
    install()
    record = _record(_expired())
    assert logging.getLogger("grpclib.server").filter(record)
    assert (record.levelno, record.msg, record.exc_info) == (
        logging.INFO,
        "Deadline exceeded",
        None,
    )


@pytest.mark.parametrize("exc", [TimeoutError("Deadline exceeded"), TimeoutError("other")])
def test_a_handler_s_own_timeout_stays_an_error(exc: BaseException) -> None:
    install()
    record = _record(exc)
    assert logging.getLogger("grpclib.server").filter(record)
    assert record.levelno == logging.ERROR and record.exc_info is not None
