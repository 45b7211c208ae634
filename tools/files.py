"""Workspace file tools: fs.read, fs.list, fs.write (confined by `tools.workspace`)."""

from __future__ import annotations

import os
import stat
from collections.abc import Sequence
from typing import Annotated, Any

import msgspec

from tools.config import ToolsConfig
from tools.context import ExecutionContext
from tools.result import Output, ToolFault, decode_text, fit_json
from tools.runtime import ToolRuntime, checkpoint
from tools.spec import Capability, Posture, Risk, ToolSpec
from tools.subjects import parse_path_prefix, path_subject
from tools.workspace import confine, open_dir, open_for_read, open_for_write

__all__ = ["FileRuntime", "FsListArgs", "FsReadArgs", "FsWriteArgs"]

_CHUNK = 64 * 1024

_Path = Annotated[str, msgspec.Meta(description="Path relative to the workspace.")]


class _PathSubject:
    """A file tool's grant subject: its path's components (tools/subjects.py)."""

    path: str

    def subject(self) -> tuple[str, ...]:
        return path_subject(self.path)

    @classmethod
    def parse_subject(cls, text: str) -> tuple[str, ...]:
        return parse_path_prefix(text)

    @classmethod
    def subject_kind(cls) -> str:
        return "path"


class FsReadArgs(_PathSubject, msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    path: _Path
    max_bytes: (
        Annotated[int, msgspec.Meta(gt=0, description="Read at most this many bytes.")] | None
    ) = None


class FsListArgs(_PathSubject, msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    path: _Path = "."


class FsWriteArgs(_PathSubject, msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    path: _Path
    content: Annotated[str, msgspec.Meta(description="UTF-8 text; replaces the file.")]
    create_dirs: Annotated[bool, msgspec.Meta(description="Create missing parents.")] = False


class FileRuntime(ToolRuntime):
    """Reads, lists and writes files inside ``ctx.workspace`` only."""

    def __init__(self, config: ToolsConfig) -> None:
        self._config = config
        # JSON escaping can grow file text; leave room so a capped read stays valid JSON.
        # The caller's budget (the journal's payload limit) may lower it per call.
        self._read_out_cap = max(
            config.default_output_cap_bytes, config.fs_read_cap_bytes * 2 + 4096
        )

    def specs(self) -> Sequence[ToolSpec]:
        cfg = self._config

        read_out = self._read_out_cap

        def spec(
            name: str,
            description: str,
            args: type[msgspec.Struct],
            cap: Capability,
            risk: Risk,
            posture: Posture,
            out_cap: int,
        ) -> ToolSpec:
            return ToolSpec(
                name=name,
                description=description,
                args_type=args,
                capabilities=frozenset({cap}),
                risk=risk,
                default_posture=posture,
                timeout_s=cfg.fs_timeout_s,
                output_cap_bytes=out_cap,
                runtime="files",
            )

        return (
            spec(
                "fs.read",
                f"Read a workspace file as text (at most {cfg.fs_read_cap_bytes} bytes).",
                FsReadArgs,
                "fs.read",
                "medium",
                "always_allow",
                read_out,
            ),
            spec(
                "fs.list",
                "List a workspace directory.",
                FsListArgs,
                "fs.read",
                "medium",
                "always_allow",
                cfg.default_output_cap_bytes,
            ),
            spec(
                "fs.write",
                f"Create or replace a workspace file (at most {cfg.fs_write_cap_bytes} bytes).",
                FsWriteArgs,
                "fs.write",
                "high",
                "ask_each_time",
                cfg.default_output_cap_bytes,
            ),
        )

    def run(self, name: str, args: msgspec.Struct, ctx: ExecutionContext) -> Output:
        if isinstance(args, FsReadArgs):
            return self._read(args, ctx)
        if isinstance(args, FsListArgs):
            return self._list(args, ctx)
        if isinstance(args, FsWriteArgs):
            return self._write(args, ctx)
        raise ValueError(f"file runtime has no tool {name!r}")

    def _read(self, args: FsReadArgs, ctx: ExecutionContext) -> Output:
        limit = self._config.fs_read_cap_bytes
        if args.max_bytes is not None:
            limit = min(limit, args.max_bytes)
        parts = confine(ctx.workspace, args.path)
        chunks: list[bytes] = []
        got = 0
        with open_for_read(ctx.workspace, parts, args.path) as fd:
            size = os.fstat(fd).st_size
            while got <= limit:
                checkpoint(ctx)
                chunk = os.read(fd, min(_CHUNK, limit + 1 - got))
                if not chunk:
                    break
                chunks.append(chunk)
                got += len(chunk)
        data = b"".join(chunks)
        truncated = len(data) > limit
        text, lossy = decode_text(data[:limit], truncated=truncated)
        body: dict[str, Any] = {
            "path": args.path,
            "size": size,
            "content": text,
            "truncated": truncated,
            "lossy": lossy,
        }
        cap = ctx.output_cap(self._read_out_cap)

        def mark(cut: dict[str, Any], _field: str) -> None:
            cut["truncated"] = True
            cut["note"] = f"content cut to fit the result size limit of {cap} bytes"

        full = _json(body)
        if len(full.encode()) <= cap:
            return Output(text=full, truncated=truncated, lossy=lossy)
        out = fit_json(body, ("content",), cap, mark)
        if out is None:
            raise ToolFault("limit", f"the result does not fit the size limit of {cap} bytes")
        return Output(text=out, truncated=True, lossy=lossy)

    def _list(self, args: FsListArgs, ctx: ExecutionContext) -> Output:
        parts = confine(ctx.workspace, args.path)
        entries: list[dict[str, Any]] = []
        with open_dir(ctx.workspace, parts) as fd, os.scandir(fd) as it:
            for entry in it:
                st = entry.stat(follow_symlinks=False)
                kind = (
                    "dir"
                    if stat.S_ISDIR(st.st_mode)
                    else "file"
                    if stat.S_ISREG(st.st_mode)
                    else "symlink"
                    if stat.S_ISLNK(st.st_mode)
                    else "other"
                )
                item: dict[str, Any] = {"name": entry.name, "type": kind}
                if kind == "file":
                    item["size"] = st.st_size
                entries.append(item)
        entries.sort(key=lambda e: str(e["name"]))
        cap = self._config.fs_list_max_entries
        truncated = len(entries) > cap
        entries = entries[:cap]
        budget = ctx.output_cap(self._config.default_output_cap_bytes)
        text = _json({"path": args.path, "entries": entries, "truncated": truncated})
        while len(text.encode()) > budget and entries:
            entries = entries[: len(entries) // 2]
            truncated = True
            text = _json({"path": args.path, "entries": entries, "truncated": truncated})
        return Output(text=text, truncated=truncated)

    def _write(self, args: FsWriteArgs, ctx: ExecutionContext) -> Output:
        data = args.content.encode("utf-8")
        cap = self._config.fs_write_cap_bytes
        if len(data) > cap:
            raise ToolFault("limit", f"content: {len(data)} bytes exceeds the write cap of {cap}")
        parts = confine(ctx.workspace, args.path)
        checkpoint(ctx)
        with open_for_write(ctx.workspace, parts, args.path, create_dirs=args.create_dirs) as (
            fd,
            created,
        ):
            view = memoryview(data)
            while view:
                checkpoint(ctx)
                written = os.write(fd, view[:_CHUNK])
                view = view[written:]
        body = {"path": args.path, "bytes_written": len(data), "created": created}
        return Output(text=_json(body))


def _json(body: dict[str, Any]) -> str:
    return msgspec.json.encode(body).decode()
