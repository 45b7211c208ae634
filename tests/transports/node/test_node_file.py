"""``<data>/node.json``: written whole, read only while its process lives, removed only by its
own node; a client falls back to the config when it is absent, stale or unreadable."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from transports.cli.node_address import grpc_address, http_base
from transports.node.node_file import (
    NodeAddresses,
    node_file,
    read_addresses,
    remove_addresses,
    write_addresses,
)


def mine(port: int = 9001) -> NodeAddresses:
    return NodeAddresses(
        pid=os.getpid(), http_host="0.0.0.0", http_port=port, grpc_host="::", grpc_port=port + 1
    )


def test_a_live_nodes_addresses_win_over_the_config(data_dir: Path) -> None:
    (data_dir / "config.toml").write_text("[http]\nport = 7000\n[grpc]\nport = 7001\n")
    assert (http_base(data_dir), grpc_address(data_dir)) == (
        "http://127.0.0.1:7000",
        "127.0.0.1:7001",
    )
    write_addresses(data_dir, mine())
    assert read_addresses(data_dir) == mine()
    # bound to every interface: reached on loopback
    assert (http_base(data_dir), grpc_address(data_dir)) == ("http://127.0.0.1:9001", "[::1]:9002")


def test_a_dead_process_or_an_unreadable_file_is_ignored(data_dir: Path) -> None:
    gone = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        check=True,
        capture_output=True,
        text=True,
    )
    write_addresses(
        data_dir,
        NodeAddresses(
            pid=int(gone.stdout),
            http_host="127.0.0.1",
            http_port=1,
            grpc_host="127.0.0.1",
            grpc_port=2,
        ),
    )
    assert read_addresses(data_dir) is None
    assert http_base(data_dir) == "http://127.0.0.1:8470"
    for text in ("", "{", '{"pid": "x"}', "[]"):
        node_file(data_dir).write_text(text)
        assert read_addresses(data_dir) is None


def test_only_its_own_node_removes_it(data_dir: Path) -> None:
    write_addresses(data_dir, mine())
    remove_addresses(data_dir, pid=os.getpid() + 1)
    assert read_addresses(data_dir) == mine()
    write_addresses(data_dir, mine(9100))  # replaced whole
    assert read_addresses(data_dir) == mine(9100)
    remove_addresses(data_dir, pid=os.getpid())
    assert not node_file(data_dir).exists()
    remove_addresses(data_dir)  # idempotent
