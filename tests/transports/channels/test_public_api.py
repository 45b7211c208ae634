"""``transports.channels`` exports what connectors and transports use: every public class and
function it holds from its own modules is in ``__all__``, and every name there exists."""

from __future__ import annotations

import types

import transports.channels as channels


def test_all_is_complete_and_exists() -> None:
    ours = {
        name
        for name, value in vars(channels).items()
        if not name.startswith("_")
        and not isinstance(value, types.ModuleType)
        and getattr(value, "__module__", "").startswith("transports.channels")
    }
    assert ours <= set(channels.__all__)
    for name in channels.__all__:
        assert hasattr(channels, name), name


def test_the_webhook_kind_is_registered() -> None:
    from transports.channels import webhook  # noqa: F401 - registers itself

    assert "webhook" in channels.CONNECTORS
