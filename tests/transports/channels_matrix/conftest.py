"""One Synapse homeserver per test session (per xdist worker), shared by the modules here: it
starts in ~3 s, and each test registers its own users, so no test sees another's rooms or
people (test_matrix_ratelimit.py starts its own, with the rate limit it tests)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.transports.channels_matrix.synapse import Homeserver, start_homeserver


@pytest.fixture(scope="session")
def homeserver(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Homeserver]:
    server = start_homeserver(tmp_path_factory.mktemp("synapse"))
    try:
        yield server
    finally:
        server.stop()
