"""``reel workspace checkpoints | diff CHECKPOINT | restore CHECKPOINT [--before]``.

While a node holds the data dir these ask its HTTP API with a token (``--token-file``, else
``REEL_TOKEN``, else the data dir's admin.token): Cedar decides (``workspace.read``,
``workspace.restore``) and the restore is the token principal's. With no node, ``checkpoints``
and ``diff`` read the journal and the checkpoint store themselves; ``restore`` needs the node
(it writes the workspace and the journal under the node's checks and policy).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated
from urllib.parse import quote

import msgspec
import typer

from actors.checkpoints import (
    KindReader,
    WorkspaceCheckpoint,
    WorkspaceDiff,
    diff_since,
    list_checkpoints,
)
from actors.errors import UnknownCheckpoint
from events.envelope import StoredEvent
from tools.checkpoints import Checkpointer
from transports.cli.errors import CliError
from transports.cli.node_api import api, online
from transports.cli.options import DataOption, JsonOption, TokenFileOption

app = typer.Typer(
    help="Workspace checkpoints: list them, show what changed since one, restore one.",
    no_args_is_help=True,
)
_json = msgspec.json.Encoder()
_OPTIONS = {"checkpoint": "CHECKPOINT", "since": "CHECKPOINT"}

CheckpointArg = Annotated[
    str, typer.Argument(help="A checkpoint id (reel workspace checkpoints lists them).")
]


@app.command("checkpoints")
def checkpoints_cmd(
    data: DataOption = None, json: JsonOption = False, token_file: TokenFileOption = None
) -> None:
    """The workspace's checkpoints, newest first: what each call or restore changed."""
    node = online(data)
    if node is not None:
        reply = api(node, token_file, "GET", "/v1/workspace/checkpoints?limit=1000", None, 200)
        items = msgspec.convert(reply["items"], list[WorkspaceCheckpoint])
    else:
        with _stopped(data) as (journal, _):
            items = list(reversed(list_checkpoints(journal)))
    if json:
        print(_json.encode(items).decode())
        return
    if not items:
        print("no workspace checkpoints yet (no call has changed a workspace file)")
        return
    for cp in items:
        print(_line(cp))


@app.command("diff")
def diff_cmd(
    checkpoint: CheckpointArg,
    data: DataOption = None,
    json: JsonOption = False,
    token_file: TokenFileOption = None,
) -> None:
    """What changed in the workspace since a checkpoint, as unified diffs."""
    node = online(data)
    if node is not None:
        path = f"/v1/workspace/diff?since={quote(checkpoint, safe='')}"
        diff = msgspec.convert(
            api(node, token_file, "GET", path, None, 200, _OPTIONS), WorkspaceDiff
        )
    else:
        with _stopped(data) as (journal, checkpointer):
            try:
                diff = diff_since(journal, checkpointer, checkpoint)
            except UnknownCheckpoint as exc:
                raise CliError(str(exc)) from None
    if json:
        print(_json.encode(diff).decode())
        return
    if not diff.files:
        print(f"nothing changed since checkpoint {checkpoint}")
    for entry in diff.files:
        if entry.diff is not None:
            print(entry.diff, end="" if entry.diff.endswith("\n") else "\n")
            if entry.cut:
                print(f"... (diff of {entry.path} cut)")
        else:
            print(f"{entry.path}: {entry.at or 'absent'} -> {entry.now or 'absent'} (no text diff)")


@app.command("restore")
def restore_cmd(
    checkpoint: CheckpointArg,
    before: Annotated[
        bool, typer.Option("--before", help="As right before the checkpoint (undoes it too).")
    ] = False,
    data: DataOption = None,
    token_file: TokenFileOption = None,
) -> None:
    """Put the workspace back as it was right after a checkpoint (or right before it). The
    restore is a checkpoint of its own, so it can be restored in turn."""
    node = online(data)
    if node is None:
        raise CliError("restoring the workspace needs the running node: start it with reel node")
    body = {"checkpoint": checkpoint, "before": before}
    made = msgspec.convert(
        api(node, token_file, "POST", "/v1/workspace/restore", body, 200, _OPTIONS),
        WorkspaceCheckpoint,
    )
    print(
        f"workspace restored to {'before' if before else 'after'} checkpoint {checkpoint}: "
        f"{len(made.files)} file{'' if len(made.files) == 1 else 's'} changed "
        f"(checkpoint {made.checkpoint_id})"
    )


def _line(cp: WorkspaceCheckpoint) -> str:
    when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(cp.recorded_at_ms / 1000))
    what = (
        f"restore of {cp.restored}{' (before)' if cp.restored_before else ''}"
        if cp.restored
        else f"{cp.tool} in run {cp.run_id}"
    )
    files = ", ".join(f.path for f in cp.files[:5]) + (" ..." if len(cp.files) > 5 else "")
    partial = " (incomplete: the tree walk hit its bound)" if not cp.complete else ""
    return f"{cp.checkpoint_id}  {when}  {what}, by {cp.principal}: {files or '-'}{partial}"


@contextmanager
def _stopped(data: Path | None) -> Iterator[tuple[KindReader, Checkpointer]]:
    """The stopped node's journal (read only) and checkpoint store."""
    from events import JournalReader
    from tools.checkpoints import BlobStore
    from transports.cli.data_dir import existing, journal_path

    data_dir = existing(data)
    path = journal_path(data_dir)
    store = Checkpointer(BlobStore(data_dir / "checkpoints", 1), scan_max_files=1, file_max_bytes=1)
    if not path.exists():
        yield _Empty(), store
        return
    reader = JournalReader.open(path)
    try:
        yield reader, store
    finally:
        reader.close()


class _Empty:
    """A data dir whose journal was never written: no checkpoints."""

    def events_of_kinds(self, kinds: tuple[str, ...], after_position: int = 0) -> list[StoredEvent]:
        return []
