"""``reel journal verify|head|tail|export``: read a journal, even one a running node writes to."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated

import msgspec
import typer
from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeRemainingColumn

from events import (
    CheckpointKeyError,
    JournalReader,
    NodeKey,
    VerifyReport,
    verify,
)
from events.export import event_record, export_records
from transports.cli.data_dir import journal_path, node_key_path, resolve
from transports.cli.errors import EXIT_NEGATIVE, CliError
from transports.cli.options import DataOption, JsonOption

app = typer.Typer(help="Inspect and verify the hash-chained journal.", no_args_is_help=True)
_json = msgspec.json.Encoder()

PROGRESS_THRESHOLD = 100_000
"""Verify shows a progress bar on stderr for journals at least this long."""


@contextmanager
def open_reader(data: Path | None) -> Iterator[JournalReader]:
    """The data dir's journal, read-only (never takes the writer lock)."""
    reader = JournalReader.open(journal_path(resolve(data)))
    try:
        yield reader
    finally:
        reader.close()


def trusted_key(data: Path | None) -> bytes | None:
    """The public half of the data dir's node key, when the key is there."""
    path = node_key_path(resolve(data))
    if not path.exists():
        return None
    try:
        return NodeKey.load(path).public_key
    except CheckpointKeyError as exc:
        raise CliError(str(exc)) from exc


def render_report(report: VerifyReport, path: Path) -> str:
    """The human-readable verify report."""
    if report.fault is None:
        key = "node.key" if report.key_trusted else "the keys they embed (no node.key found)"
        return (
            f"journal {path}: intact\n"
            f"  events       {report.events}\n"
            f"  head         {report.head_position} {report.head_hash}\n"
            f"  checkpoints  {report.checkpoints} (last at {report.last_checkpoint_position}), "
            f"signatures checked against {key}\n"
            f"  time         {report.elapsed_s:.2f} s"
        )
    fault = report.fault
    return (
        f"journal {path}: TAMPERED\n"
        f"  fault        {fault.kind} at position {fault.position}\n"
        f"  detail       {fault.message}\n"
        f"  verified     {report.events} events before the fault"
    )


@app.command("verify")
def verify_cmd(data: DataOption = None, json: JsonOption = False) -> None:
    """Verify the hash chain and signed checkpoints. Exit 0 intact, 1 tampered, 2 unreadable."""
    key = trusted_key(data)
    with open_reader(data) as reader:
        total = reader.count()
        if total >= PROGRESS_THRESHOLD and not json:
            console = Console(stderr=True)
            with Progress(
                TextColumn("verifying"),
                BarColumn(),
                TextColumn("{task.completed:,}/{task.total:,} events"),
                TimeRemainingColumn(),
                console=console,
                transient=True,
            ) as bar:
                task = bar.add_task("verify", total=total)
                report = verify(
                    reader,
                    trusted_public_key=key,
                    progress=lambda done, _total: bar.update(task, completed=done),
                )
        else:
            report = verify(reader, trusted_public_key=key)
    if json:
        sys.stdout.write(_json.encode(report).decode() + "\n")
    else:
        print(render_report(report, journal_path(resolve(data))))
    if not report.ok:
        raise typer.Exit(EXIT_NEGATIVE)


@app.command("head")
def head_cmd(data: DataOption = None, json: JsonOption = False) -> None:
    """Print the last position and its hash."""
    with open_reader(data) as reader:
        head = reader.head()
    if json:
        print(_json.encode({"position": head.position, "hash": head.hash.hex()}).decode())
    else:
        print(f"position {head.position}\nhash     {head.hash.hex()}")


@app.command("tail")
def tail_cmd(
    data: DataOption = None,
    n: Annotated[int, typer.Option("-n", "--lines", min=1, help="How many events.")] = 10,
    json: JsonOption = False,
) -> None:
    """Print the last N events, decoded (payloads were redacted before they were stored)."""
    with open_reader(data) as reader:
        head = reader.head()
        rows = reader.read(after_position=max(0, head.position - n), limit=n)
        for stored in rows:
            record = event_record(tuple(msgspec.structs.astuple(stored)))
            if json:
                del record["payload_b64"]
                print(_json.encode(record).decode())
                continue
            when = datetime.fromtimestamp(stored.recorded_at_ms / 1000, UTC).isoformat(
                timespec="milliseconds"
            )
            body = _json.encode(record["event"]).decode()
            print(f"{stored.position:>8} {when} {stored.stream}#{stored.stream_seq} {body}")


@app.command("export")
def export_cmd(
    data: DataOption = None,
    out: Annotated[
        Path | None, typer.Option("--out", "-o", help="Write to this file instead of stdout.")
    ] = None,
) -> None:
    """Write every event (with its hashes) and every checkpoint as NDJSON."""
    with open_reader(data) as reader:
        stream = open(out, "w", encoding="utf-8") if out else sys.stdout  # noqa: SIM115
        try:
            for record in export_records(reader):
                stream.write(_json.encode(record).decode())
                stream.write("\n")
        finally:
            if out:
                stream.close()
