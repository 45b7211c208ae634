"""reel's tool catalog and tool runtimes.

Plain values in, plain values out: nothing here knows about events, actors
or policies. The tool actor asks the catalog to `validate` a model's
arguments, lets policy decide using the `ToolSpec`, then calls `execute`
with an `ExecutionContext` on its own thread and records the `ToolResult`.

Runtimes: builtins (echo, time.now, sleep), memory (memory.search,
memory.write, over a `MemoryStore` the node injects), workspace files (fs.read,
fs.list, fs.write, fs.search on ripgrep, fs.apply_patch, fs.diff; `tools.workspace`: no
symlink followed, no multi-link file opened), http.fetch, shell.run (only inside the
bubblewrap sandbox of `tools.sandbox`; exec wrappers per `tools.wrappers`), and WASM plugins
on wasmtime. A tool that cannot run on this node says why in
`ToolSpec.unavailable` (`ToolCatalog.unavailable`). Every call of a tool that may write is
a workspace checkpoint (`tools.checkpoints`: what it changed, the contents kept by hash).

Exceptions (only for unknown tools, bad arguments, bad plugins, lost checkpoint blobs and
programming errors; runtime failures come back as ``ToolResult(ok=False)``)::

    ToolsError
    ├── UnknownTool          the catalog has no tool of that name
    ├── InvalidArguments     arguments do not match the schema (names the field path)
    ├── PluginError          a plugin cannot be loaded (names the plugin and file)
    │   ├── ManifestError    malformed manifest: unknown key, bad value, bad schema
    │   └── PluginLoadError  module missing, too large or not valid WebAssembly
    └── StoreFault           a checkpoint blob is missing or altered (tools.checkpoints)

Inside a runtime, ``ToolFault`` (``tools.result``) is a failed call the catalog turns into
``ToolResult(ok=False)``; a vault lookup that finds no secret raises ``MissingSecret``
(``tools.handles``), which the runtime turns into such a fault naming the handle; a plugin's
argument schema outside the supported subset is a ``SchemaError`` (a ``ValueError``) that
loading reports as a ``ManifestError``.
"""

import typing as _typing

from tools.catalog import ToolCatalog
from tools.config import ToolsConfig, decode_config
from tools.context import ExecutionContext
from tools.errors import (
    InvalidArguments,
    ManifestError,
    PluginError,
    PluginLoadError,
    ToolsError,
    UnknownTool,
)
from tools.memory_tools import FoundItem, MemoryStore
from tools.result import ErrorKind, ToolResult
from tools.runtime import ToolRuntime
from tools.spec import CAPABILITIES, Capability, Posture, Risk, RuntimeKind, ToolSpec

if _typing.TYPE_CHECKING:
    from tools.build import build_catalog


def __getattr__(name: str) -> _typing.Any:
    """``build_catalog`` is imported on first use: it pulls in every runtime (aiohttp,
    wasmtime), which commands that only need the catalog's types should not pay for."""
    if name == "build_catalog":
        from tools.build import build_catalog

        return build_catalog
    raise AttributeError(f"module 'tools' has no attribute {name!r}")


__all__ = [
    "CAPABILITIES",
    "Capability",
    "ErrorKind",
    "ExecutionContext",
    "FoundItem",
    "InvalidArguments",
    "ManifestError",
    "MemoryStore",
    "PluginError",
    "PluginLoadError",
    "Posture",
    "Risk",
    "RuntimeKind",
    "ToolCatalog",
    "ToolResult",
    "ToolRuntime",
    "ToolSpec",
    "ToolsConfig",
    "ToolsError",
    "UnknownTool",
    "build_catalog",
    "decode_config",
]


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
