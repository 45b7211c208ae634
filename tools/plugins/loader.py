"""Discovery: every subdirectory of the plugin directory with a manifest becomes a tool.

Loading is all-or-nothing: the first bad plugin raises a `PluginError`
naming it (and the file), so a daemon never starts with half a catalog.
Subdirectories without ``manifest.toml`` and dot-directories are skipped.
"""

from __future__ import annotations

from pathlib import Path

from tools.config import ToolsConfig
from tools.errors import ManifestError, PluginLoadError
from tools.plugins.manifest import MANIFEST_FILE, PluginManifest, read_manifest
from tools.plugins.schema import SchemaError, struct_from_schema
from tools.spec import ToolSpec
from tools.wasm import WasmProgram, WasmRuntime, compile_module

__all__ = ["load_plugin", "load_plugins"]


def load_plugins(plugin_dir: Path, config: ToolsConfig) -> WasmRuntime:
    """A runtime holding every plugin under ``plugin_dir`` (sorted by directory name)."""
    if not plugin_dir.is_dir():
        raise PluginLoadError(f"plugin directory {str(plugin_dir)!r} does not exist")
    tools: list[tuple[ToolSpec, WasmProgram]] = []
    seen: dict[str, Path] = {}
    for child in sorted(plugin_dir.iterdir()):
        if child.name.startswith(".") or not (child / MANIFEST_FILE).is_file():
            continue
        spec, program = load_plugin(child, config)
        if spec.name in seen:
            raise ManifestError(
                f"{child / MANIFEST_FILE}: name {spec.name!r} is already used by {seen[spec.name]}"
            )
        seen[spec.name] = child
        tools.append((spec, program))
    return WasmRuntime(tools, preopen_max_entries=config.wasm_preopen_max_entries)


def load_plugin(directory: Path, config: ToolsConfig) -> tuple[ToolSpec, WasmProgram]:
    """Read, check and compile the plugin in ``directory``."""
    manifest_path = directory / MANIFEST_FILE
    manifest = read_manifest(manifest_path)
    _check_ceilings(manifest, manifest_path, config)
    try:
        args_type = struct_from_schema(
            "Args_" + manifest.name.replace(".", "_"), manifest.arguments
        )
    except SchemaError as exc:
        raise ManifestError(f"{manifest_path}: {exc}") from None
    compiled = _compile(manifest, directory, config)
    cap = manifest.output_cap_bytes or config.wasm_output_cap_bytes
    spec = ToolSpec(
        name=manifest.name,
        description=manifest.description,
        args_type=args_type,
        capabilities=frozenset(manifest.capabilities),
        risk=manifest.risk,
        default_posture=manifest.posture,
        timeout_s=manifest.time_limit_ms / 1000 + 1.0,
        output_cap_bytes=cap,
        runtime="wasm",
    )
    program = WasmProgram(
        name=manifest.name,
        compiled=compiled,
        fuel=manifest.fuel,
        memory_limit_bytes=manifest.memory_limit_bytes,
        time_limit_ms=manifest.time_limit_ms,
        output_cap_bytes=cap,
        workspace_subdir=manifest.workspace_subdir,
        writable="fs.write" in manifest.capabilities,
    )
    return spec, program


def _check_ceilings(manifest: PluginManifest, path: Path, config: ToolsConfig) -> None:
    if manifest.fuel > config.wasm_max_fuel:
        raise ManifestError(
            f"{path}: fuel: {manifest.fuel} exceeds the ceiling {config.wasm_max_fuel}"
        )
    if manifest.memory_limit_bytes > config.wasm_max_memory_bytes:
        raise ManifestError(
            f"{path}: memory_limit_bytes: {manifest.memory_limit_bytes} exceeds "
            f"the ceiling {config.wasm_max_memory_bytes}"
        )


def _compile(manifest: PluginManifest, directory: Path, config: ToolsConfig) -> bytes:
    module_path = directory / manifest.module
    where = f"plugin {manifest.name!r} ({module_path})"
    try:
        source = module_path.read_bytes()
    except OSError as exc:
        raise PluginLoadError(f"{where}: cannot read module: {exc.strerror}") from None
    if len(source) > config.wasm_max_module_bytes:
        raise PluginLoadError(
            f"{where}: module is {len(source)} bytes, over the cap of "
            f"{config.wasm_max_module_bytes}"
        )
    import wasmtime  # here, not with the module: a node without plugins never loads it

    try:
        return compile_module(source, is_text=module_path.suffix == ".wat")
    except (wasmtime.WasmtimeError, UnicodeDecodeError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise PluginLoadError(f"{where}: invalid module: {first}") from None
    except ValueError as exc:
        raise PluginLoadError(f"{where}: {exc}") from None
