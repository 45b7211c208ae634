"""The exception tree of `tools` (drawn in the package docstring).

Only programming errors, validation and catalog building raise. A tool that
runs and fails returns `ToolResult(ok=False, ...)` instead.
"""

from __future__ import annotations

__all__ = [
    "InvalidArguments",
    "ManifestError",
    "PluginError",
    "PluginLoadError",
    "ToolsError",
    "UnknownTool",
]


class ToolsError(Exception):
    """Base of every exception `tools` raises on purpose."""


class UnknownTool(ToolsError):
    """The catalog has no tool of that name."""

    def __init__(self, name: str) -> None:
        super().__init__(f"unknown tool {name!r}")
        self.name = name
        """The name that was asked for."""


class InvalidArguments(ToolsError):
    """The arguments do not match the tool's schema.

    The message names the tool, the field path and the problem, as msgspec
    reports it (e.g. "Expected `int`, got `str` - at `$.seconds`").
    """

    def __init__(self, tool: str, problem: str) -> None:
        super().__init__(f"invalid arguments for {tool!r}: {problem}")
        self.tool = tool
        """The tool whose arguments were refused."""
        self.problem = problem
        """msgspec's description of the problem, with the field path."""


class PluginError(ToolsError):
    """A WASM plugin could not be loaded; the message names the plugin."""


class ManifestError(PluginError):
    """A plugin manifest is malformed (unknown key, bad type, bad schema)."""


class PluginLoadError(PluginError):
    """A plugin's module is missing, unreadable or not valid WebAssembly."""
