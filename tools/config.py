"""`ToolsConfig`: every knob of the tool runtimes, with safe defaults.

Defaults deny: no executable may run, no host may be fetched, no private
address is reachable, no plugin directory is scanned. Decode it from the
node's config with `msgspec` (unknown keys are errors naming the key); the
numeric constraints below are checked by msgspec and named in its errors.
"""

from __future__ import annotations

from typing import Annotated

import msgspec

__all__ = ["ToolsConfig", "decode_config"]

_KiB = 1024
_MiB = 1024 * 1024

Positive = Annotated[int, msgspec.Meta(gt=0)]
Seconds = Annotated[float, msgspec.Meta(gt=0)]


class ToolsConfig(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Limits and allowlists bound into the runtimes by `build_catalog`."""

    workspace_dir: str | None = None
    """The directory tools work in (``[tools] workspace_dir``, ``REEL_TOOLS_WORKSPACE_DIR``);
    ``None``: the daemon uses ``<data>/workspace``. Runs' tool calls and ``@file``
    references resolve inside it; the shell sandbox binds it and hides its parent."""
    plugin_dir: str | None = None
    """Directory with one subdirectory per WASM plugin; ``None`` loads no plugins."""

    default_output_cap_bytes: Positive = 256 * _KiB
    """Backstop cap on any tool's output text."""

    sleep_cap_s: Seconds = 30.0

    fs_read_cap_bytes: Positive = 1 * _MiB
    fs_write_cap_bytes: Positive = 1 * _MiB
    fs_list_max_entries: Positive = 1000
    fs_timeout_s: Seconds = 10.0
    fs_search_max_results: Positive = 200
    """The most matches one fs.search returns (a call may ask for fewer)."""
    fs_search_file_max_bytes: Positive = 4 * _MiB
    """Files larger than this are not searched."""

    checkpoint_blob_max_bytes: Positive = 256 * _MiB
    """Retention of workspace checkpoints' blobs (``<data>/checkpoints``): past it the least
    recently used are deleted, and the deletion recorded (``workspace.blobs_pruned``)."""
    checkpoint_scan_max_files: Positive = 20_000
    """The most files a checkpoint's tree walk (around a shell.run call) compares; past it the
    checkpoint is recorded as incomplete."""
    checkpoint_file_max_bytes: Positive = 8 * _MiB
    """Files larger than this are hashed but not kept (a restore of such a version refuses)."""

    shell_allowlist: tuple[str, ...] = ()
    """Bare executable names that may run; empty means nothing runs."""
    shell_allowed_wrappers: tuple[str, ...] = ()
    """Exec wrappers (`tools.wrappers`: env, xargs, find, sh, python3, ...) that may run;
    each must also be in ``shell_allowlist``. Allowing one allows everything it can run."""
    shell_path: str = "/usr/local/bin:/usr/bin:/bin"
    """The fixed PATH used to resolve argv[0] (and bubblewrap) and given to the child; its
    directories are visible read-only in the sandbox."""
    shell_bwrap: str = "bwrap"
    """bubblewrap: a name looked up on ``shell_path`` or an absolute path. Without a working
    one, shell.run is disabled (never unconfined)."""
    shell_network: bool = False
    """Share the host's network with the sandbox; shell.run then also declares net.egress."""
    shell_tmp_bytes: Positive = 64 * _MiB
    """Size of the sandbox's private /tmp (memory, gone after the call)."""
    shell_hidden_paths: tuple[str, ...] = ()
    """Host paths never visible in the sandbox, even under a system directory (the node adds
    its data dir)."""
    shell_cpu_s: Positive = 2
    shell_memory_bytes: Positive = 256 * _MiB
    shell_file_size_bytes: Positive = 16 * _MiB
    shell_output_cap_bytes: Positive = 64 * _KiB
    """Per stream (stdout, stderr); the process is killed when one is exceeded."""
    shell_stdin_cap_bytes: Positive = 64 * _KiB
    shell_timeout_s: Seconds = 30.0
    shell_max_processes: Positive = 64
    """Processes and threads one call may have at once (RLIMIT_NPROC inside the sandbox's
    user namespace); a fork past it fails in the program with EAGAIN."""
    shell_write_bytes: Positive = 64 * _MiB
    """How much one call may grow the workspace's file system; over it the sandbox is killed
    (tools/write_bound.py)."""
    shell_write_files: Positive = 10_000
    """How many files (inodes) one call may add to the workspace's file system."""
    shell_uid: Positive = 65534
    """The unprivileged host uid the sandbox runs as when the node runs as root (never 0);
    the workspace's root-owned entries are given to it before each call
    (tools/sandbox_user.py). A node that is not root runs the sandbox as itself."""
    shell_gid: Positive = 65534
    """The host gid that goes with ``shell_uid``."""

    http_allowlist: tuple[str, ...] = ()
    """Hosts that may be fetched: exact names/IP literals, or ``*.example.com`` suffixes."""
    http_allow_private: tuple[str, ...] = ()
    """CIDRs or host names that may resolve to private/loopback/link-local addresses."""
    http_max_redirects: Annotated[int, msgspec.Meta(ge=0, le=20)] = 5
    http_response_cap_bytes: Positive = 512 * _KiB
    http_request_body_cap_bytes: Positive = 64 * _KiB
    http_timeout_s: Seconds = 15.0

    wasm_max_fuel: Positive = 1_000_000_000
    """Ceiling on a manifest's ``fuel``."""
    wasm_max_memory_bytes: Positive = 256 * _MiB
    """Ceiling on a manifest's ``memory_limit_bytes``."""
    wasm_max_module_bytes: Positive = 4 * _MiB
    wasm_output_cap_bytes: Positive = 256 * _KiB
    wasm_preopen_max_entries: Positive = 10_000
    """A granted workspace subdir is scanned for hard links and outward symlinks before each
    call; a tree with more entries than this is refused rather than scanned."""


def decode_config(data: bytes | str) -> ToolsConfig:
    """Decode JSON config text; raises `msgspec.ValidationError` naming the field."""
    return msgspec.json.decode(data, type=ToolsConfig)
