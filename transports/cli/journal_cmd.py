"""``reel journal verify|pubkey|head|tail|export|init``: read a journal, even one a running node
writes to; ``init`` creates a PostgreSQL journal (``--dsn``, docs/scale-out.md).

``verify`` trusts nothing in the data dir: signatures are checked against the key given with
``--public-key`` (pinned by the auditor), and ``--witness`` names the file of checkpoints the
node published outside the data dir. Without either the journal is still checked throughout,
but the report says UNANCHORED: nothing ties it to anything its holder cannot rewrite. With
``--dsn`` (a PostgreSQL journal) ``--roster`` pins the public keys of every node that may sign
its super-checkpoints (``--public-key`` adds one), and ``--witness`` is one node's."""

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
    load_public_key,
    verify,
)
from events.checkpoint import load_roster
from events.note import CheckpointNote, verifier_key
from events.sqlite.export import event_record, export_records
from events.witness import read_notes
from transports.cli.data_dir import journal_path, node_key_path, resolve
from transports.cli.errors import EXIT_NEGATIVE, CliError
from transports.cli.options import DataOption, JsonOption

app = typer.Typer(help="Inspect and verify the hash-chained journal.", no_args_is_help=True)
_json = msgspec.json.Encoder()

DsnOption = Annotated[
    str | None,
    typer.Option(
        "--dsn",
        envvar="REEL_JOURNAL_DSN",
        help="A PostgreSQL journal's connection string instead of the data dir's journal "
        "(default: $REEL_JOURNAL_DSN; keep the password there or in ~/.pgpass).",
        show_default=False,
    ),
]

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


PublicKeyOption = Annotated[
    Path | None,
    typer.Option(
        "--public-key",
        help="The node's public key you pinned (PEM from 'reel journal pubkey', or its --vkey "
        "line): every checkpoint signature is checked against it only.",
        show_default=False,
    ),
]
WitnessOption = Annotated[
    list[Path] | None,
    typer.Option(
        "--witness",
        metavar="FILE",
        help="The node's checkpoint witness (a file outside the data dir): every checkpoint it "
        "recorded must be in the journal, at its position, with its hash and signature. "
        "Repeat it for each node's witness of a PostgreSQL journal.",
        show_default=False,
    ),
]


RosterOption = Annotated[
    Path | None,
    typer.Option(
        "--roster",
        help="With --dsn: the public keys of every node you pinned ('reel journal pubkey' of "
        "each, concatenated): every super-checkpoint must be signed by one of them.",
        show_default=False,
    ),
]


def pinned_key(path: Path | None) -> bytes | None:
    """The raw public key in ``path`` (``--public-key``), or ``None``; exit 2 when unusable."""
    if path is None:
        return None
    try:
        return load_public_key(path)
    except CheckpointKeyError as exc:
        raise CliError(str(exc)) from exc


def witness_notes(paths: list[Path] | None) -> list[CheckpointNote] | None:
    """The notes of every witness ``--witness`` names, together (``None``: none named); exit 2
    when one is unreadable. Each node of a cluster keeps its own: held against one chain of
    super-checkpoints, their notes check alike together or one file at a time."""
    if not paths:
        return None
    return [note for path in paths for note in read_notes(path)[0]]


def witnesses(paths: list[Path] | None) -> str:
    """How a report names the witness files it was given."""
    return ", ".join(map(str, paths or ()))


def run_verify(
    reader: JournalReader,
    key: bytes | None,
    notes: list[CheckpointNote] | None,
    *,
    quiet: bool,
) -> VerifyReport:
    """:func:`events.sqlite.verify` with a progress bar on stderr for long journals (unless
    quiet)."""
    total = reader.count()
    if total < PROGRESS_THRESHOLD or quiet:
        return verify(reader, trusted_public_key=key, witness=notes)
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
        return verify(
            reader,
            trusted_public_key=key,
            witness=notes,
            progress=lambda done, _total: bar.update(task, completed=done),
        )


def render_report(
    report: VerifyReport,
    path: Path,
    public_key: Path | None = None,
    witness: list[Path] | None = None,
) -> str:
    """The human-readable verify report: the verdict, what anchors it, and what it cannot
    show."""
    if report.fault is not None:
        fault = report.fault
        return (
            f"journal {path}: TAMPERED\n"
            f"  fault        {fault.kind} at position {fault.position}\n"
            f"  detail       {fault.message}\n"
            f"  verified     {report.events} events before the fault"
        )
    verdict = (
        f"intact, anchored by {report.anchor}"
        if report.anchored
        else "intact but UNANCHORED (nothing outside the data dir vouches for it)"
    )
    if public_key is not None:
        key = f"pinned ({public_key}): every signature checked against it"
    else:
        key = (
            "NOT PINNED: signatures checked against the key the journal itself embeds "
            "(pass --public-key)"
        )
    if not witness:
        seen = (
            "none given: a truncated tail, or a rewrite signed again with node.key, "
            "cannot be told (pass --witness)"
        )
    else:
        seen = (
            f"{report.witness_checkpoints} witnessed checkpoints all present ({witnesses(witness)})"
        )
    last = (
        f"{report.checkpoints}, the last at row {report.last_checkpoint_row} covering "
        f"1..{report.last_checkpoint_position}"
        if report.checkpoints
        else "none"
    )
    return (
        f"journal {path}: {verdict}\n"
        f"  events       {report.events}\n"
        f"  head         {report.head_position} {report.head_hash}\n"
        f"  checkpoints  {last}\n"
        f"  unsigned     {report.unsigned_rows} rows after the last checkpoint (chain only)\n"
        f"  key          {key}\n"
        f"  witness      {seen}\n"
        f"  time         {report.elapsed_s:.2f} s"
    )


@app.command("verify")
def verify_cmd(
    data: DataOption = None,
    json: JsonOption = False,
    public_key: PublicKeyOption = None,
    witness: WitnessOption = None,
    dsn: DsnOption = None,
    roster: RosterOption = None,
) -> None:
    """Verify every row, the chain and its signed checkpoints. Exit 0 intact, 1 tampered,
    2 unreadable. Without --public-key or --witness an intact journal is UNANCHORED. With
    --dsn: every shard chain of a PostgreSQL journal and its super-checkpoints; without
    --roster, --public-key or --witness it is UNANCHORED."""
    if dsn:
        verify_postgres(dsn, json, roster, public_key, witness)
        return
    if roster is not None:
        raise CliError("--roster: only with --dsn (a SQLite journal pins one --public-key)")
    key = pinned_key(public_key)
    notes = witness_notes(witness)
    with open_reader(data) as reader:
        report = run_verify(reader, key, notes, quiet=json)
    if json:
        sys.stdout.write(_json.encode(report).decode() + "\n")
    else:
        print(render_report(report, journal_path(resolve(data)), public_key, witness))
    if not report.ok:
        raise typer.Exit(EXIT_NEGATIVE)


def verify_postgres(
    dsn: str, json: bool, roster: Path | None, public_key: Path | None, witness: list[Path] | None
) -> None:
    """``verify --dsn``: every shard chain, the super-checkpoints against the pinned roster
    (``--roster`` and ``--public-key`` together), the witness; exit 1 at a fault."""
    from events.postgres.database import safe_dsn

    keys = pinned_roster(roster, public_key)
    report = postgres_report(dsn, keys, witness)
    if json:
        sys.stdout.write(_json.encode(report).decode() + "\n")
    elif report.fault is not None:
        print(postgres_fault(dsn, report))
    else:
        verdict = (
            f"anchored by {report.anchor}"
            if report.anchored
            else "UNANCHORED (pass --roster or --witness)"
        )
        signer = "the pinned roster" if keys is not None else "the roster the journal records"
        last = (
            f"{report.checkpoints}, the last at position {report.last_checkpoint_row} covering "
            f"{report.last_checkpoint_position} rows, signed by a key of {signer}"
            if report.checkpoints
            else "none"
        )
        seen = (
            f"{report.witness_checkpoints} witnessed super-checkpoints all present "
            f"({witnesses(witness)})"
            if witness
            else "none given: deleted super-checkpoints cannot be told (pass --witness)"
        )
        print(
            f"journal {safe_dsn(dsn)}: every shard chain intact, {verdict}\n"
            f"  events       {report.events}\n"
            f"  head         {report.head_position} {report.head_hash}\n"
            f"  checkpoints  {last}\n"
            f"  unsigned     {report.unsigned_rows} rows after the last super-checkpoint\n"
            f"  witness      {seen}\n"
            f"  time         {report.elapsed_s:.2f} s"
        )
    if not report.ok:
        raise typer.Exit(EXIT_NEGATIVE)


def postgres_fault(dsn: str, report: VerifyReport) -> str:
    """What ``verify --dsn`` (and ``reel replay``) print for a tampered PostgreSQL journal."""
    from events.postgres.database import safe_dsn

    assert report.fault is not None
    return (
        f"journal {safe_dsn(dsn)}: TAMPERED\n"
        f"  fault        {report.fault.kind} at position {report.fault.position}\n"
        f"  detail       {report.fault.message}"
    )


def pinned_roster(roster: Path | None, public_key: Path | None) -> set[bytes] | None:
    """The node keys ``--roster`` and ``--public-key`` pin together (``None``: neither)."""
    keys: set[bytes] | None = None
    try:
        if roster is not None:
            keys = set(load_roster(roster))
        if public_key is not None:
            keys = (keys or set()) | {load_public_key(public_key)}
    except CheckpointKeyError as exc:
        raise CliError(str(exc)) from exc
    return keys


def postgres_report(dsn: str, keys: set[bytes] | None, witness: list[Path] | None) -> VerifyReport:
    """Every shard chain of the journal ``dsn`` names and its super-checkpoints, verified
    against the pinned ``keys`` (``None``: the roster it records) and the ``witness``."""
    from events.postgres.verify import verify_database

    return verify_database(dsn, roster=keys, witness=witness_notes(witness))


@app.command("init")
def init_cmd(
    dsn: DsnOption = None,
    shards: Annotated[
        int,
        typer.Option(
            "--shards",
            min=1,
            max=4096,
            help="How many shard chains (fixed at creation: never changed later).",
        ),
    ] = 64,
) -> None:
    """Create a PostgreSQL journal in the database --dsn names, with --shards shard chains.
    Again with the same count: nothing to do; with another: exit 2 (the count is fixed)."""
    if not dsn:
        raise CliError("--dsn: name the database (or set REEL_JOURNAL_DSN)")
    from events.postgres.database import initialise, safe_dsn

    created = initialise(dsn, shards)
    state = "created" if created else "already there"
    print(f"journal {safe_dsn(dsn)}: {state}, {shards} shards")


@app.command("pubkey")
def pubkey_cmd(
    data: DataOption = None,
    vkey: Annotated[
        bool,
        typer.Option("--vkey", help="Print the C2SP signed-note verifier key instead of PEM."),
    ] = False,
) -> None:
    """Print the node's public key (PEM) to pin for 'reel journal verify --public-key'."""
    path = node_key_path(resolve(data))
    if not path.exists():
        raise CliError(f"no node key at {path}: the node creates it when it first starts")
    try:
        key = NodeKey.load(path)
    except CheckpointKeyError as exc:
        raise CliError(str(exc)) from exc
    if vkey:
        print(verifier_key(key.origin, key.public_key))
    else:
        sys.stdout.write(key.public_pem())


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
    """Print the last N events, decoded (payloads were redacted before they were stored): its
    position, time, who caused it, its stream and seq, and the event."""
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
            print(
                f"{stored.position:>8} {when} {stored.principal} "
                f"{stored.stream}#{stored.stream_seq} {body}"
            )


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
