"""A package's public names, imported when first asked for rather than with the package.

Importing any module of a package runs the package's ``__init__``. When that re-exports the
whole package (the journal, redaction, every view), a process that needs one small module, such
as a CLI command that reads ``events.catalog`` for its ``--help``, pays for all of them. So the
``__init__`` of ``events`` and ``projections`` lists its exports as ``{module: names}`` and
takes its module ``__getattr__`` (PEP 562) from :func:`exports`: ``events.Journal`` imports
``events.sqlite.journal`` the first time it is asked for. The same names are imported under
``TYPE_CHECKING`` for mypy and for readers; ``tests/events/test_lazy_exports.py`` holds the
two lists and ``__all__`` equal.
"""

from __future__ import annotations

import importlib
import sys
import types
from collections.abc import Callable, Mapping
from typing import Any


def exports(package: str, modules: Mapping[str, tuple[str, ...]]) -> Callable[[str], Any]:
    """The ``__getattr__`` of ``package``: each name of ``modules`` (module -> names) comes from
    its module on first use, and is then a plain attribute of the package."""
    where = {name: module for module, names in modules.items() for name in names}

    class Package(types.ModuleType):
        """Keeps an exported name that is also a submodule's (``events.sqlite.verify``, the function
        and the module) the exported value: importing the submodule sets the package's
        attribute to the module, after the package's eager ``from ... import`` had set it to
        the function; here the import's assignment is dropped (the module stays in
        ``sys.modules``) and ``__getattr__`` answers the name."""

        def __setattr__(self, name: str, value: Any) -> None:
            if name in where and isinstance(value, types.ModuleType):
                return
            super().__setattr__(name, value)

    sys.modules[package].__class__ = Package

    def __getattr__(name: str) -> Any:
        module = where.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        setattr(sys.modules[package], name, value)
        return value

    return __getattr__
