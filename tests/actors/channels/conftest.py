"""The channel actor is driven through a real node's webhook channel: the same fixtures as the
connector's tests (tests/transports/channels/fixtures.py)."""

from tests.transports.channels.fixtures import log, receiver, webhook_secret

__all__ = ["log", "receiver", "webhook_secret"]
