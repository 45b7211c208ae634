"""The plugin manifest: ``<plugin_dir>/<plugin>/manifest.toml``.

TOML, decoded by msgspec into `PluginManifest`; unknown keys are errors that
name the key and the file. Example (the shipped ``examples/json_echo``)::

    name = "example.json_echo"          # dotted tool name
    description = "Echo the arguments back as JSON."
    module = "json_echo.wat"            # .wat (compiled at load) or .wasm, in this directory
    capabilities = []                   # only fs.read / fs.write, and only with workspace_subdir
    risk = "low"                        # low | medium | high | critical   (default high)
    posture = "always_allow"            # always_allow | ask_each_time | disabled (default ask)
    fuel = 1_000_000                    # default 10_000_000
    memory_limit_bytes = 1_048_576      # default 64 MiB
    time_limit_ms = 1000                # default 1000
    # output_cap_bytes = 65536          # default: the config's wasm_output_cap_bytes
    # workspace_subdir = "data"         # preopened at /workspace

    [arguments]                         # JSON schema of an object, see tools.plugins.schema
    type = "object"
    required = ["message"]
    [arguments.properties.message]
    type = "string"
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated, Any

import msgspec

from tools.errors import ManifestError
from tools.spec import Capability, Posture, Risk

__all__ = ["MANIFEST_FILE", "PluginManifest", "read_manifest"]

MANIFEST_FILE = "manifest.toml"

ToolName = Annotated[str, msgspec.Meta(pattern=r"^[a-z][a-z0-9_]*(\.[a-z][a-z0-9_]*)+$")]
ModuleFile = Annotated[str, msgspec.Meta(pattern=r"^[A-Za-z0-9_][A-Za-z0-9_.-]*\.(wat|wasm)$")]
Positive = Annotated[int, msgspec.Meta(gt=0)]

_MiB = 1024 * 1024


class PluginManifest(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    name: ToolName
    description: Annotated[str, msgspec.Meta(min_length=1)]
    module: ModuleFile
    arguments: dict[str, Any] = msgspec.field(
        default_factory=lambda: {"type": "object", "properties": {}}
    )
    capabilities: tuple[Capability, ...] = ()
    risk: Risk = "high"
    posture: Posture = "ask_each_time"
    fuel: Positive = 10_000_000
    memory_limit_bytes: Positive = 64 * _MiB
    time_limit_ms: Positive = 1000
    output_cap_bytes: Positive | None = None
    workspace_subdir: str | None = None


def read_manifest(path: Path) -> PluginManifest:
    """Decode and check one manifest; every problem is a `ManifestError` naming ``path``."""
    try:
        manifest = msgspec.toml.decode(path.read_bytes(), type=PluginManifest)
    except OSError as exc:
        raise ManifestError(f"{path}: cannot read: {exc.strerror}") from None
    except msgspec.ValidationError as exc:
        raise ManifestError(f"{path}: {_keyed(str(exc))}") from None
    except msgspec.DecodeError as exc:
        raise ManifestError(f"{path}: malformed TOML: {exc}") from None
    caps = set(manifest.capabilities)
    unsupported = caps - {"fs.read", "fs.write"}
    if unsupported:
        raise ManifestError(
            f"{path}: capabilities: {sorted(unsupported)} cannot be granted to WASM plugins "
            "(only fs.read and fs.write, via workspace_subdir)"
        )
    if caps and manifest.workspace_subdir is None:
        raise ManifestError(f"{path}: capabilities: {sorted(caps)} needs workspace_subdir")
    if manifest.workspace_subdir is not None and not caps:
        raise ManifestError(f"{path}: workspace_subdir: needs capability fs.read or fs.write")
    return manifest


def _keyed(message: str) -> str:
    # msgspec says "Object contains unknown field `x`"; say which key of the manifest.
    match = re.match(r"Object contains unknown field `([^`]+)`(?: - at `\$\.?(.*)`)?", message)
    if match:
        where = f"{match.group(2)}." if match.group(2) else ""
        return f"unknown key `{where}{match.group(1)}`"
    return message
