"""What a node loads to serve in the default configuration (SQLite, the deterministic provider,
no MCP servers, no WASM plugins, no telemetry, no channels, no schedules): none of the heavy
packages only other configurations, other commands or rare calls need (issue 23: a node ready
at a million events in under a second, most of it import time). Each is imported where it is
first used; this names them so a module-level import that brings one back fails here, without
timing anything."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

DEFERRED = (
    "mcp",  # MCP servers (tools.mcp)
    "wasmtime",  # WASM plugins (tools.wasm)
    "opentelemetry",  # [telemetry]
    "rich",  # the CLI's tables
    "typer",  # the CLI's command tree (reel node starts without it)
    "click",
    "cronsim",  # cron schedules (actors.schedules.times)
    "difflib",  # fs.diff (actors.checkpoints)
    "psycopg",  # the postgres journal
    "sqlite_vec",  # vector memory embedders
    "numpy",
)
"""Top-level packages a node in the default configuration must not load."""

OWN_DEFERRED = (
    "transports.models.openai",  # an OpenAI-compatible [provider] (make_provider)
    "transports.models.anthropic",
    "events.postgres",
    "transports.grpc.client",  # reel chat's side of gRPC
    "transports.cli.group",
    "transports.channels.hub",  # [channels]: Runtime.channels is None without any
    "transports.channels.webhook",
    "transports.channels.commands",
    "actors.channels.actor",
)
"""reel's own modules that stay unloaded in the same node."""

START = """
import json, os, signal, sys
from pathlib import Path

import transports.cli.main, transports.cli.node_start  # reel node's way in
from transports.node import daemon

def ready() -> None:
    print(json.dumps(sorted(sys.modules)), flush=True)
    os.kill(os.getpid(), signal.SIGTERM)

sys.exit(daemon.serve(Path(sys.argv[1]), ready=ready))
"""


def loaded(modules: list[str]) -> list[str]:
    """The deferred packages and modules among ``modules``."""
    return sorted(
        m
        for m in modules
        if m.split(".")[0] in DEFERRED or any(m == o or m.startswith(o + ".") for o in OWN_DEFERRED)
    )


def test_the_deferred_packages_are_installed_so_the_check_means_something() -> None:
    """A package missing from the environment would pass below for the wrong reason."""
    missing = [name for name in DEFERRED if importlib.util.find_spec(name) is None]
    assert missing == []


def test_a_node_in_the_default_configuration_is_ready_without_the_deferred_packages(
    tmp_path: Path,
) -> None:
    """A real node on a fresh data dir, through ``serve`` up to its ready line: the modules
    loaded by then (its import, the CLI's, the start) hold none of them; it then drains and
    exits 0 as usual."""
    env = {**os.environ, "REEL_HTTP_PORT": "0", "REEL_GRPC_PORT": "0"}
    done = subprocess.run(
        [sys.executable, "-c", START, str(tmp_path / "data")],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    lines = done.stdout.splitlines()
    assert lines[0].startswith("reel node ready"), done.stdout
    modules = json.loads(lines[-1])
    assert "transports.grpc.server" in modules and "aiohttp.web" in modules  # it did serve
    assert loaded(modules) == []


def test_each_deferred_package_is_found_when_a_module_names_it() -> None:
    """The check itself: a module list holding one of them is caught."""
    assert loaded(["mcp.client", "transports.models.openai", "transports.models"]) == [
        "mcp.client",
        "transports.models.openai",
    ]
