"""``[cluster]`` refused in one line naming the key: a cluster without the PostgreSQL journal,
a name the database could not tell apart, an internal port already taken, a node whose config
or policies differ from a live node's."""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Any

from tests.postgres_server import PostgresServer
from tests.transports.cluster.nodes import cluster_env, running, stop_all
from tests.transports.node.test_daemon import assert_one_error_line, reel
from tests.transports.test_node_process import PORTS, ServingNode


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


NO_SELF_SHELL = """\
@id("no_self_shell")
forbid (principal, action == Action::"approval.resolve", resource)
when { context.run_principal == principal && context.tool == "shell.run" };
"""


def test_a_node_with_other_policies_or_config_is_refused_unless_rolling_a_change(
    postgres: PostgresServer, tmp_path: Path
) -> None:
    """Every node publishes its ``config_hash``; one whose shared config or policies differ
    from a live node's is refused in one line (a client could pick the laxer node), unless
    ``cluster.allow_config_change`` while a change is rolled through. A node's own settings
    (its ports, name, internal address) are not part of it: the nodes of every other test
    differ in those and join."""
    dsn = postgres.database()
    with running(dsn, tmp_path, ("a",)):

        def start(name: str, *, extra: dict[str, str], policy: str = "", config: str = "") -> Any:
            data = tmp_path / name
            data.mkdir(mode=0o700)
            if policy:
                (data / "policies").mkdir(mode=0o700)
                (data / "policies" / "mine.cedar").write_text(policy)
            if config:
                (data / "config.toml").write_text(config)
            return data, {**PORTS, **cluster_env(dsn, name), **extra}

        data, env = start("b", extra={}, policy=NO_SELF_SHELL)
        done = reel("node", "--data", str(data), env=env)
        assert_one_error_line(done, "cluster.allow_config_change", "node a runs another")
        data, env = start("c", extra={}, config="[runs]\nmax_turns = 3\n")
        done = reel("node", "--data", str(data), env=env)
        assert_one_error_line(done, "cluster.allow_config_change", "node a runs another")
        # rolling a change through: this node joins, and says so
        data, env = start(
            "d", extra={"REEL_CLUSTER_ALLOW_CONFIG_CHANGE": "true"}, policy=NO_SELF_SHELL
        )
        node = ServingNode(data, env)
        try:
            assert any("runs another config or policies" in line for line in node.lines), node.lines
        finally:
            stop_all([node])
