"""Fixtures every webhook-channel test uses, wherever it lives (the connector's own tests here,
the channel actor's in tests/actors/channels): the webhook secret in the environment (as an
operator sets it), the platform's receiving end of the outbound webhook, and the process's log
records. Each folder's conftest imports them."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.transports.channels.kit import SECRET, SECRET_ENV, Receiver
from tests.transports.records import Records


@pytest.fixture(autouse=True)
def webhook_secret(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(SECRET_ENV, SECRET)


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    running = Receiver().start()
    try:
        yield running
    finally:
        running.stop()


@pytest.fixture
def log() -> Iterator[Records]:
    """Every log record while the test runs (``faults()``: tracebacks and errors)."""
    with Records() as records:
        yield records
