"""The webhook-channel fixtures (tests/transports/channels/fixtures.py) for connector tests."""

from tests.transports.channels.fixtures import log, receiver, webhook_secret

__all__ = ["log", "receiver", "webhook_secret"]
