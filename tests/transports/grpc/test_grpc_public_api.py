"""The package's public surface is what its __init__ says."""

from __future__ import annotations

import transports.grpc as package
from transports.grpc.errors import GrpcClientError, GrpcStartError, GrpcTransportError


def test_all_names_exist_and_errors_form_one_tree() -> None:
    for name in package.__all__:
        assert hasattr(package, name), name
    assert issubclass(GrpcStartError, GrpcTransportError)
    assert issubclass(GrpcClientError, GrpcTransportError)
    assert sorted(package.__all__) == package.__all__


def test_a_busy_port_is_a_start_error_naming_the_config_keys(tmp_path: object) -> None:
    import socket
    from pathlib import Path

    import pytest

    from tests.transports.grpc.conftest import start_node

    assert isinstance(tmp_path, Path)
    holder = socket.create_server(("127.0.0.1", 0))
    try:
        with pytest.raises(GrpcStartError) as caught:
            start_node(tmp_path / "data", port=holder.getsockname()[1])
    finally:
        holder.close()
    assert "grpc.port" in str(caught.value)
