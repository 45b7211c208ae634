"""Workspace file tools: fs.read, fs.list, fs.write, fs.search (`tools.search`) and fs.apply_patch
(`tools.patch`), all confined by `tools.workspace`."""

from __future__ import annotations

import os
import stat
from collections.abc import Sequence
from typing import Annotated, Any

import msgspec

from tools import patch
from tools.checkpoints import Checkpointer
from tools.config import ToolsConfig
from tools.context import ExecutionContext
from tools.result import Output, ToolFault, decode_text, fit_json
from tools.runtime import ToolRuntime, checkpoint
from tools.search import find_rg, search
from tools.spec import Capability, Posture, Risk, ToolSpec
from tools.subjects import parse_path_prefix, path_subject
from tools.workspace import confine, open_dir, open_for_read, open_for_write

__all__ = [
    "FileRuntime",
    "FsApplyPatchArgs",
    "FsDiffArgs",
    "FsListArgs",
    "FsReadArgs",
    "FsSearchArgs",
    "FsWriteArgs",
]

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


class FsSearchArgs(_PathSubject, msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    pattern: Annotated[
        str,
        msgspec.Meta(
            min_length=1,
            description="A regular expression (Rust regex syntax), or text with literal.",
        ),
    ]
    path: Annotated[
        str, msgspec.Meta(description="Directory to search, relative to the workspace.")
    ] = "."
    literal: Annotated[bool, msgspec.Meta(description="Match pattern as plain text.")] = False
    ignore_case: bool = False
    globs: Annotated[
        tuple[str, ...],
        msgspec.Meta(
            max_length=16,
            description="Only files matching these globs (a leading ! excludes), e.g. *.py.",
        ),
    ] = ()
    max_results: Annotated[
        int, msgspec.Meta(gt=0, description="Return at most this many matches.")
    ] = 50


class FsApplyPatchArgs(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    patch: Annotated[
        str,
        msgspec.Meta(
            min_length=1,
            description="A unified diff (paths relative to the workspace, a/ and b/ prefixes "
            "allowed); every hunk applies or nothing changes.",
        ),
    ]


class FsDiffArgs(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    since: Annotated[str, msgspec.Meta(min_length=1, description="A workspace checkpoint id.")]


class FileRuntime(ToolRuntime):
    """Reads, lists and writes files inside ``ctx.workspace`` only."""

    def __init__(self, config: ToolsConfig, checkpoints: Checkpointer | None = None) -> None:
        self._config = config
        self._checkpoints = checkpoints
        self._rg = find_rg()
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
                read_only=cap == "fs.read",
            )

        searcher = spec(
            "fs.search",
            f"Search workspace files for a pattern (at most {cfg.fs_search_max_results} "
            "matches; symlinks are not followed).",
            FsSearchArgs,
            "fs.read",
            "medium",
            "always_allow",
            cfg.default_output_cap_bytes,
        )
        if self._rg is None:
            searcher = msgspec.structs.replace(
                searcher, unavailable="ripgrep (rg) is not installed", default_posture="disabled"
            )
        return (
            searcher,
            spec(
                "fs.apply_patch",
                "Apply a unified diff to workspace files: all hunks or none.",
                FsApplyPatchArgs,
                "fs.write",
                "high",
                "ask_each_time",
                cfg.default_output_cap_bytes,
            ),
            spec(
                "fs.diff",
                "What changed in workspace files since a checkpoint, as unified diffs.",
                FsDiffArgs,
                "fs.read",
                "medium",
                "always_allow",
                cfg.default_output_cap_bytes,
            ),
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
        if isinstance(args, FsSearchArgs):
            return self._search(args, ctx)
        if isinstance(args, FsApplyPatchArgs):
            return self._patch(args, ctx)
        if isinstance(args, FsDiffArgs):
            return self._diff(args, ctx)
        raise ValueError(f"file runtime has no tool {name!r}")

    def touches(self, name: str, args: msgspec.Struct) -> tuple[str, ...] | None:
        if isinstance(args, FsWriteArgs):
            return (args.path,)
        if isinstance(args, FsApplyPatchArgs):
            return patch.touched_paths(args.patch)
        return ()

    def _search(self, args: FsSearchArgs, ctx: ExecutionContext) -> Output:
        if self._rg is None:
            raise ToolFault("failed", "fs.search needs ripgrep (rg), and none is installed")
        body = search(
            self._rg,
            ctx,
            path=args.path,
            pattern=args.pattern,
            literal=args.literal,
            ignore_case=args.ignore_case,
            globs=args.globs,
            max_results=min(args.max_results, self._config.fs_search_max_results),
            file_max_bytes=self._config.fs_search_file_max_bytes,
        )
        matches: list[Any] = body["matches"]
        budget = ctx.output_cap(self._config.default_output_cap_bytes)
        text = _json(body)
        while len(text.encode()) > budget and matches:
            matches = matches[: len(matches) // 2]
            body = {**body, "matches": matches, "truncated": True}
            text = _json(body)
        return Output(text=text, truncated=bool(body["truncated"]))

    def _diff(self, args: FsDiffArgs, ctx: ExecutionContext) -> Output:
        history = None if self._checkpoints is None else self._checkpoints.history
        if history is None:
            raise ToolFault("failed", "this node keeps no workspace checkpoints")
        body = dict(history(args.since))
        cap = ctx.output_cap(self._config.default_output_cap_bytes)
        text = _json(body)
        files: list[dict[str, Any]] = list(body["files"])
        truncated = False
        while len(text.encode()) > cap and files:
            files = files[: len(files) // 2]
            body["files"] = files
            body["truncated"] = truncated = True
            text = _json(body)
        return Output(text=text, truncated=truncated)

    def _patch(self, args: FsApplyPatchArgs, ctx: ExecutionContext) -> Output:
        cap = self._config.fs_write_cap_bytes
        size = len(args.patch.encode("utf-8"))
        if size > cap:
            raise ToolFault("limit", f"patch: {size} bytes exceeds the write cap of {cap}")
        edits = patch.plan(ctx.workspace, args.patch, cap)
        checkpoint(ctx)
        patch.apply_edits(ctx.workspace, edits)
        files = [
            {
                "path": e.path,
                "change": "created"
                if e.before is None
                else "deleted"
                if e.after is None
                else "modified",
            }
            for e in edits
        ]
        return Output(text=_json({"files": files}))

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
