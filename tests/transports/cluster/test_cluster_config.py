"""``[cluster]`` refused in one line naming the key: a cluster without the PostgreSQL journal,
a name the database could not tell apart, an internal port already taken."""

from __future__ import annotations

import socket
from pathlib import Path

from tests.postgres_server import PostgresServer
from tests.transports.node.test_daemon import assert_one_error_line, reel
from tests.transports.test_node_process import PORTS


def test_a_cluster_needs_the_postgres_journal(data_dir: Path) -> None:
    done = reel("node", "--data", str(data_dir), env={**PORTS, "REEL_CLUSTER_NODE": "a"})
    assert_one_error_line(done, "cluster.node", 'backend = "postgres"')


def test_a_node_name_must_be_a_plain_name(data_dir: Path) -> None:
    done = reel("node", "--data", str(data_dir), env={**PORTS, "REEL_CLUSTER_NODE": "Node A"})
    assert_one_error_line(done, "cluster.node")


def test_an_internal_port_taken_is_named(postgres: PostgresServer, data_dir: Path) -> None:
    dsn = postgres.database()
    assert reel("journal", "init", "--shards", "2", env={"REEL_JOURNAL_DSN": dsn}).returncode == 0
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        env = {
            **PORTS,
            "REEL_JOURNAL_BACKEND": "postgres",
            "REEL_JOURNAL_DSN": dsn,
            "REEL_CLUSTER_NODE": "a",
            "REEL_CLUSTER_PORT": str(taken.getsockname()[1]),
        }
        done = reel("node", "--data", str(data_dir), env=env)
    assert_one_error_line(done, "cluster.host", "cluster.port")
