"""``reel replay``: the audit path. Verify the journal, rebuild every view from position 0 into a
fresh file, and compare it with the live views row by row. Exit 0 identical, 1 otherwise.

A data dir without a journal is an error (exit 2): there is nothing to audit, and a mistyped
``--data`` must not pass as an audit. A data dir without views.db is not: views are rebuildable
and may be deleted at any time, so the journal is verified and folded into every view (proving
it can be), nothing is compared, and the command says so and exits 0.

On a PostgreSQL journal (the data dir's ``[journal] backend = "postgres"``, or
``REEL_JOURNAL_BACKEND``) it verifies every shard chain and the super-checkpoints (pinned with
``--roster``/``--public-key``, and ``--witness``) and replays all shards, in the order every node
folds them, against the data dir's views.

The memory view is rebuilt with the node's embedder (``[memory] embedder`` of the data dir's
config and ``REEL_MEMORY_EMBEDDER``, as ``reel node`` reads them): a replay with another one
would differ by design."""

from __future__ import annotations

import tempfile
from pathlib import Path

import msgspec
import typer
from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from events import JournalReader, JournalReadPort, verify
from projections import Embedder, EmbedderUnavailable, make_embedder, replay
from transports.cli.data_dir import journal_path, resolve
from transports.cli.errors import EXIT_NEGATIVE, CliError
from transports.cli.journal_cmd import (
    PublicKeyOption,
    RosterOption,
    WitnessOption,
    pinned_key,
    pinned_roster,
    postgres_fault,
    postgres_report,
    render_report,
    witness_notes,
)
from transports.cli.options import DataOption, JsonOption


def replay_cmd(
    data: DataOption = None,
    json: JsonOption = False,
    public_key: PublicKeyOption = None,
    witness: WitnessOption = None,
    roster: RosterOption = None,
) -> None:
    """Verify the chain and checkpoints, rebuild the views from the journal alone, compare.
    On a PostgreSQL journal: every shard chain and the super-checkpoints (--roster)."""
    data_dir = resolve(data)
    live = data_dir / "views.db"
    embedder = node_embedder(data_dir)
    dsn = postgres_dsn(data_dir)
    reader: JournalReadPort
    if dsn is None:
        if roster is not None:
            raise CliError("--roster: only for a PostgreSQL journal (SQLite pins --public-key)")
        path = journal_path(data_dir)
        if not path.exists():
            raise CliError(f"no journal at {path}: nothing to replay")
        reader = JournalReader.open(path)
    else:
        reader = open_postgres_reader(dsn)
    try:
        if dsn is None:
            assert isinstance(reader, JournalReader)
            report = verify(
                reader, trusted_public_key=pinned_key(public_key), witness=witness_notes(witness)
            )
        else:
            report = postgres_report(dsn, pinned_roster(roster, public_key), witness)
        if not report.ok:
            print(
                render_report(report, journal_path(data_dir), public_key, witness)
                if dsn is None
                else postgres_fault(dsn, report)
            )
            raise typer.Exit(EXIT_NEGATIVE)
        with tempfile.TemporaryDirectory(prefix="reel-replay-", dir=data_dir) as scratch:
            console = Console(stderr=True)
            with Progress(
                TextColumn("replaying"),
                BarColumn(),
                TextColumn("{task.completed:,}/{task.total:,}"),
                TimeElapsedColumn(),
                console=console,
                transient=True,
                disable=json,
            ) as bar:
                task = bar.add_task("replay", total=max(report.head_position, 1))
                result = replay(
                    reader,
                    live,
                    Path(scratch) / "views.db",
                    progress=lambda done, total: bar.update(task, completed=done, total=total),
                    embedder=embedder,
                )
    finally:
        reader.close()
    if json:
        print(msgspec.json.encode({"verify": report, "replay": result}).decode())
    else:
        anchor = report.anchor if report.anchored else "UNANCHORED (no --public-key, --witness)"
        print(f"journal intact: {report.events} events, {report.checkpoints} checkpoints, {anchor}")
        print(
            f"replayed {result.events} events to position {result.position} "
            f"in {result.elapsed_s:.2f} s"
        )
        if not result.live:
            print(
                f"no live views at {live} to compare (the node builds them when it starts); "
                "every view was rebuilt from the journal alone"
            )
        elif result.identical:
            print("views identical to a replay from position 0")
        else:
            n = len(result.differences)
            print(f"{n} difference{'' if n == 1 else 's'}:")
            for d in result.differences:
                print(f"  {d.table} [{d.key}]\n    live:     {d.live}\n    replayed: {d.replayed}")
        if result.live and result.position < result.head:
            print(
                f"the live views stop at position {result.position} of {result.head}: "
                "the node applies the rest when it runs"
            )
    if not result.identical:
        raise typer.Exit(EXIT_NEGATIVE)


def postgres_dsn(data_dir: Path) -> str | None:
    """The DSN of the data dir's PostgreSQL journal (``None``: its journal is SQLite's)."""
    from transports.config import load_config

    section = load_config(data_dir / "config.toml").journal
    if section.backend != "postgres":
        return None
    if not section.dsn:
        raise CliError("config key journal.dsn: backend postgres needs a dsn (REEL_JOURNAL_DSN)")
    return section.dsn


def open_postgres_reader(dsn: str) -> JournalReadPort:
    """A reader of every shard of the journal ``dsn`` names (psycopg imported only here)."""
    try:
        from events.postgres.reader import PostgresReader
    except ImportError:
        raise CliError(
            "config key journal.backend: postgres needs the postgres extra "
            "(pip install 'reel[postgres]')"
        ) from None
    return PostgresReader(dsn)


def node_embedder(data_dir: Path) -> Embedder:
    """The embedder the node indexes memory with (its config, its ``REEL_*`` overrides)."""
    from transports.config import load_config

    name = load_config(data_dir / "config.toml").memory.embedder
    try:
        return make_embedder(name)
    except EmbedderUnavailable as exc:
        raise CliError(f"config key memory.embedder: {exc}") from None
