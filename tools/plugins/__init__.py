"""WASM plugins: manifest format, argument schemas, and discovery.

Each plugin is a directory holding ``manifest.toml`` (see
`tools.plugins.manifest`) and a ``.wat`` or ``.wasm`` module. The shipped
example lives in ``examples/json_echo``. Errors are `tools.errors.PluginError`
subclasses naming the plugin and the file.
"""

from pathlib import Path

from tools.plugins.loader import load_plugin, load_plugins
from tools.plugins.manifest import MANIFEST_FILE, PluginManifest, read_manifest
from tools.plugins.schema import SchemaError, struct_from_schema

EXAMPLES_DIR = Path(__file__).parent / "examples"
"""Directory of the example plugins shipped with reel (package data)."""

__all__ = [
    "EXAMPLES_DIR",
    "MANIFEST_FILE",
    "PluginManifest",
    "SchemaError",
    "load_plugin",
    "load_plugins",
    "read_manifest",
    "struct_from_schema",
]
