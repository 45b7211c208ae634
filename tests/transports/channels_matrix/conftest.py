"""One Synapse homeserver per test module (start ~3 s; each test registers its own users)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.transports.channels_matrix.synapse import Homeserver, start_homeserver


@pytest.fixture(scope="module")
def homeserver(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Homeserver]:
    server = start_homeserver(tmp_path_factory.mktemp("synapse"))
    try:
        yield server
    finally:
        server.stop()
