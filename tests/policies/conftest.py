"""Shared fixtures: real engines over the packaged baseline plus operator files written
to a temporary data dir's ``policies/``."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from policies import PolicyEngine

PERMIT_SHELL_FOR_OPS = """\
// Ops may run the shell without asking.
@id("ops_shell")
permit (
  principal == Principal::"ops",
  action == Action::"tool.execute",
  resource == Tool::"shell.run"
);
"""

FORBID_HTTP = """\
@id("no_http")
forbid (principal, action == Action::"tool.execute", resource == Tool::"http.fetch");
"""

OPERATOR_FILES: dict[str, dict[str, str]] = {
    "none": {},
    "permit_shell": {"permit_shell.cedar": PERMIT_SHELL_FOR_OPS},
    "forbid_http": {"forbid_http.cedar": FORBID_HTTP},
}
"""Named operator policy sets used by the decision table."""


def write_policies(directory: Path, files: dict[str, str]) -> Path:
    """Write ``files`` into ``directory`` (created) and return it."""
    directory.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (directory / name).write_text(text, encoding="utf-8")
    return directory


@pytest.fixture(scope="session")
def engine_for(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], PolicyEngine]:
    """Load (once per session) the engine for one of :data:`OPERATOR_FILES`."""
    engines: dict[str, PolicyEngine] = {}

    def get(name: str) -> PolicyEngine:
        if name not in engines:
            directory = tmp_path_factory.mktemp(f"data-{name}") / "policies"
            engines[name] = PolicyEngine.load(write_policies(directory, OPERATOR_FILES[name]))
        return engines[name]

    return get


@pytest.fixture
def operator_dir(tmp_path: Path) -> Path:
    """An empty operator policy directory for one test."""
    directory = tmp_path / "policies"
    directory.mkdir()
    return directory
