"""The packages that export lazily (:mod:`events.lazy`): ``events``, ``projections``,
``actors`` and ``transports.grpc`` offer every name of ``__all__``, each the object its module
defines, whatever was imported first; mypy's list (the ``TYPE_CHECKING`` imports) names the same
ones."""

from __future__ import annotations

import ast
import importlib
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGES = ("events", "projections", "actors", "transports.grpc")


def type_checking_names(package: str) -> dict[str, str]:
    """Names the package's ``__init__`` imports under ``if TYPE_CHECKING:``, each with the
    module it names."""
    init = Path(importlib.import_module(package).__file__ or "")
    tree = ast.parse(init.read_text())
    names: dict[str, str] = {}
    for node in tree.body:
        if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING":
            for stmt in node.body:
                if isinstance(stmt, ast.ImportFrom):
                    names.update((alias.name, stmt.module or "") for alias in stmt.names)
    return names


@pytest.mark.parametrize("package", PACKAGES)
def test_all_type_checking_and_the_lazy_table_name_the_same_exports(package: str) -> None:
    module = importlib.import_module(package)
    homes = type_checking_names(package)
    assert set(module.__all__) == set(homes)
    for name in module.__all__:
        assert getattr(module, name) is getattr(importlib.import_module(homes[name]), name)
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        module.nope  # noqa: B018


@pytest.mark.parametrize(
    "first",
    [
        "import events.sqlite.verify",
        "from events.sqlite.verify import verify_recent",
        "import events",
    ],
)
def test_a_name_that_is_also_a_module_is_the_exported_function(first: str) -> None:
    """``projections.replay`` is a function and a module, and ``events.verify`` the function of
    the module ``events.sqlite.verify``: whichever is imported first, the package's attribute is
    the function, as with eager imports."""
    probe = (
        f"{first}\n"
        "import projections.replay\n"
        "import events, projections\n"
        "from events import verify\n"
        "print(callable(verify), callable(events.verify), callable(projections.replay))"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True
    ).stdout
    assert out.split() == ["True", "True", "True"]


def test_importing_the_catalog_loads_neither_the_journal_nor_the_views() -> None:
    """What the lazy exports are for: ``events.catalog`` alone stays small."""
    probe = (
        "import sys, events.catalog, actors.errors, projections.records\n"
        "print(sorted(m for m in ('events.sqlite.journal', 'events.redaction.detectors',"
        " 'actors.system.node', 'projections.projector', 'apsw') if m in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True
    ).stdout
    assert out.strip() == "[]"
