"""The public surface of transports.models and of the provider seam."""

from __future__ import annotations

import actors.provider
import transports.models


def test_models_package_exports_every_provider() -> None:
    exported = set(transports.models.__all__)

    assert {"DeterministicProvider", "OpenAIProvider", "OpenAIConfig"} <= exported
    assert all(hasattr(transports.models, name) for name in exported)


def test_provider_seam_all_is_complete() -> None:
    defined = {
        name
        for name, value in vars(actors.provider).items()
        if not name.startswith("_") and getattr(value, "__module__", None) == "actors.provider"
    }

    assert defined <= set(actors.provider.__all__)
    assert all(hasattr(actors.provider, name) for name in actors.provider.__all__)
