"""The CLI never builds events: no module under transports/cli constructs an event class, and
none but transports/cli/offline.py appends to a journal.

An offline command folds the aggregate with its own ``apply``, asks the aggregate's own decider
for the events and commits them (:mod:`transports.cli.offline`); an online one asks the API.
Importing an event class to read a record (``isinstance``) is fine; calling it is what this
refuses, however it was imported (by name, aliased, or through the module).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import events.catalog as catalog
from events.catalog import Event

CLI = Path(__file__).resolve().parents[3] / "transports" / "cli"
EVENT_CLASSES = {
    name
    for name, value in vars(catalog).items()
    if isinstance(value, type) and issubclass(value, Event)
}
CATALOG_MODULES = {"events", "events.catalog"}


def constructed_events(source: str) -> list[str]:
    """The event classes ``source`` calls, as ``line: name``."""
    tree = ast.parse(source)
    names: dict[str, str] = {}  # local name -> event class
    modules: set[str] = set()  # local names bound to the catalog module
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module in CATALOG_MODULES:
            for alias in node.names:
                if alias.name in EVENT_CLASSES:
                    names[alias.asname or alias.name] = alias.name
                elif node.module == "events" and alias.name == "catalog":
                    modules.add(alias.asname or alias.name)
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name == "events.catalog":
                    modules.add(alias.asname or "events.catalog")
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        if isinstance(func, ast.Name) and func.id in names:
            found.append(f"{node.lineno}: {names[func.id]}")
        elif (
            isinstance(func, ast.Attribute)
            and func.attr in EVENT_CLASSES
            and ast.unparse(func.value) in modules
        ):
            found.append(f"{node.lineno}: {func.attr}")
    return found


@pytest.mark.parametrize("path", sorted(CLI.glob("*.py")), ids=lambda p: p.name)
def test_no_cli_module_constructs_an_event(path: Path) -> None:
    assert constructed_events(path.read_text(encoding="utf-8")) == [], (
        f"{path.name} builds events: fold, decide and commit through transports.cli.offline "
        "with the aggregate's own apply and decider, or ask the node's API"
    )


@pytest.mark.parametrize(
    "source",
    [
        "from events.catalog import GrantRevoked\nGrantRevoked(principal='p', tool='t')\n",
        "from events.catalog import ApprovalResolved as R\ndef f():\n    return R(x=1)\n",
        "import events.catalog\nevents.catalog.GrantRevoked(principal='p', tool='t')\n",
        "import events.catalog as c\nc.TaskCancelled()\n",
        "from events import catalog\ncatalog.SessionRestored()\n",
    ],
)
def test_the_guard_sees_every_way_of_building_one(source: str) -> None:
    assert constructed_events(source)


def appends(source: str) -> list[str]:
    """The journal appends ``source`` makes itself, as ``line: call``: a call of ``append``
    with ``expected_seq`` (a journal's, by keyword or as a stream owner's first argument) or an
    :class:`~actors.stream.OwnedStream` of its own."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
        keywords = {k.arg for k in node.keywords}
        if (name == "append" and ("expected_seq" in keywords or "principal" in keywords)) or (
            name == "OwnedStream"
        ):
            found.append(f"{node.lineno}: {ast.unparse(node)[:60]}")
    return found


@pytest.mark.parametrize(
    "path", sorted(p for p in CLI.glob("*.py") if p.name != "offline.py"), ids=lambda p: p.name
)
def test_only_the_offline_helper_appends(path: Path) -> None:
    assert appends(path.read_text(encoding="utf-8")) == [], (
        f"{path.name} appends to the journal: commit through transports.cli.offline"
    )


def test_the_append_guard_sees_an_append() -> None:
    assert appends("journal.append(s, [e], expected_seq=0, principal='cli')\n")
    assert appends("from actors.stream import OwnedStream\nOwnedStream(j, 's', principal='x')\n")
    assert appends((CLI / "offline.py").read_text(encoding="utf-8"))
    assert appends("parts.append(x)\nlines.append('[d] deny')\n") == []


def test_reading_an_event_class_is_not_building_one() -> None:
    source = (
        "from events.catalog import ApprovalRequested, GrantMatch\n"
        "def f(e):\n    return isinstance(e, ApprovalRequested)\n"
    )
    assert constructed_events(source) == []
    assert {"ApprovalResolved", "GrantRevoked", "SessionRestored"} <= EVENT_CLASSES
