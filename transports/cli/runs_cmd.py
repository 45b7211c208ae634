"""``reel runs list | show RUN | tape RUN | cancel RUN``: what ran, for whom, how it ended.

While a node holds the data dir these ask its HTTP API with a token (``--token-file``, else
``REEL_TOKEN``, else the data dir's admin.token): Cedar decides ``run.list`` / ``run.read`` /
``run.cancel`` for the token's principal, and a list shows only the runs it may read. With no
node, ``list``, ``show`` and ``tape`` fold the journal itself (transports/cli/listing.py);
``cancel`` needs the node (a run is live only in a running node; the next start ends an
unfinished one as interrupted).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Any
from urllib.parse import quote

import msgspec
import typer

from events.lifecycle import RunStatus
from projections.records import RunRecord, TapeRecord, run_text
from transports.cli.errors import CliError
from transports.cli.listing import folded_rows, listed, searched, table, when
from transports.cli.node_api import api, online
from transports.cli.options import DataOption, JsonOption, TokenFileOption

app = typer.Typer(help="List runs, show one, print its tape, cancel it.", no_args_is_help=True)

RunArg = Annotated[str, typer.Argument(help="The run id.", show_default=False)]
LimitOption = Annotated[
    int, typer.Option("--limit", min=1, max=10_000, help="At most this many (newest last).")
]
_OPTIONS = {
    "state": "--state",
    "session_id": "--session",
    "principal": "--principal",
    "q": "--search",
    "limit": "--limit",
}
"""The API's query fields as this command's options (a refused one is named as typed)."""


def _path(run_id: str, what: str = "") -> str:
    return f"/v1/runs/{quote(run_id, safe='')}{'/' + what if what else ''}"


@app.command("list")
def list_cmd(
    state: Annotated[
        RunStatus | None, typer.Option("--state", help="Only runs in this state.")
    ] = None,
    session: Annotated[str | None, typer.Option("--session", help="Only this session's.")] = None,
    principal: Annotated[
        str | None, typer.Option("--principal", help="Only runs acting for (user:alice).")
    ] = None,
    search: Annotated[
        str | None,
        typer.Option("--search", help="Only runs whose ids, principal, message or answer hold it."),
    ] = None,
    newest: Annotated[bool, typer.Option("--newest", help="Newest first.")] = False,
    limit: LimitOption = 50,
    data: DataOption = None,
    json: JsonOption = False,
    token_file: TokenFileOption = None,
) -> None:
    """Runs in acceptance order (--newest: newest first): state, who, turns, tokens, and how
    each ended."""
    node = online(data)
    if node is not None:
        query = {
            "state": state.value if state else "",
            "session_id": session or "",
            "principal": principal or "",
            "q": search or "",
            "order": "newest" if newest else "",
        }
        runs = listed(node, token_file, "/v1/runs", query, limit, RunRecord, _OPTIONS)
    else:
        runs = _folded(data, state, session, principal, newest)
        runs = searched(runs, search, run_text)[:limit]
    if json:
        print(msgspec.json.encode(runs).decode())
    elif not runs:
        print("no runs")
    else:
        table(
            f"{len(runs)} run{'' if len(runs) == 1 else 's'}",
            ("run", "session", "principal", "state", "accepted", "turns", "tokens", "ended"),
            [_row(run) for run in runs],
        )


def _row(run: RunRecord) -> tuple[str, ...]:
    ended = run.termination_reason or ("" if run.ended_at_ms is None else run.state)
    return (
        run.run_id,
        run.session_id,
        run.principal,
        run.state,
        when(run.accepted_at_ms),
        str(run.turns),
        f"{run.prompt_tokens}+{run.completion_tokens}",
        ended,
    )


def _folded(
    data: Path | None,
    state: RunStatus | None,
    session: str | None,
    principal: str | None,
    newest: bool,
) -> list[RunRecord]:
    from projections.queries import RunFilter, page_sql
    from projections.runs import RunsProjection

    where = RunFilter(state=state.value if state else None, session_id=session, principal=principal)
    sql, args = page_sql("runs", "run_id", where, None, -1, newest)
    return folded_rows(data, RunsProjection(), RunRecord, sql, args)


@app.command("show")
def show_cmd(
    run_id: RunArg,
    data: DataOption = None,
    json: JsonOption = False,
    token_file: TokenFileOption = None,
) -> None:
    """One run: its session, who it acts for, its state and times, turns, tool calls, tokens,
    the message and the answer (or how it ended)."""
    node = online(data)
    if node is not None:
        run = msgspec.convert(api(node, token_file, "GET", _path(run_id), None, 200), RunRecord)
    else:
        from projections.runs import RunsProjection

        sql = "SELECT * FROM runs WHERE run_id = ?"
        found = folded_rows(data, RunsProjection(), RunRecord, sql, (run_id,))
        if not found:
            raise CliError(f"no run with id {run_id!r}")
        run = found[0]
    if json:
        print(msgspec.json.encode(run).decode())
        return
    for name, value in _fields(run):
        print(f"{name:<12} {value}")


def _fields(run: RunRecord) -> list[tuple[str, str]]:
    return [
        ("run", run.run_id),
        ("session", run.session_id),
        ("principal", run.principal),
        ("state", run.state + (f" ({run.termination_reason})" if run.termination_reason else "")),
        ("accepted", when(run.accepted_at_ms)),
        ("started", when(run.started_at_ms)),
        ("ended", when(run.ended_at_ms)),
        ("turns", str(run.turns)),
        ("tool calls", str(run.tool_calls)),
        ("tokens", f"{run.prompt_tokens} in, {run.completion_tokens} out"),
        ("message", run.message or "-"),
        ("answer", run.answer or "-"),
    ]


@app.command("tape")
def tape_cmd(
    run_id: RunArg,
    data: DataOption = None,
    json: JsonOption = False,
    token_file: TokenFileOption = None,
) -> None:
    """Everything the run recorded, in order: the model's output, each tool call with its
    decision, approval and result, and how the run ended (--json: the entries as stored,
    redacted)."""
    node = online(data)
    entries = _listed_tape(node, token_file, run_id) if node else _folded_tape(data, run_id)
    if json:
        print(msgspec.json.encode(entries).decode())
        return
    from events.codec import AnyEvent
    from transports.cli.render import TapePrinter

    printer = TapePrinter(sys.stdout)
    for entry in entries:
        printer.show(msgspec.convert(entry["event"], AnyEvent))
    if printer.mid_line:
        printer.line("")


def _listed_tape(node: Path, token_file: Path | None, run_id: str) -> list[dict[str, Any]]:
    """The tape's entries as the API sends them (``TapeEntry``), page by page."""
    entries: list[dict[str, Any]] = []
    after = -1
    while True:
        page: dict[str, Any] = api(
            node, token_file, "GET", f"{_path(run_id, 'tape')}?after={after}&limit=1000", None, 200
        )
        entries += page["items"]
        if page.get("next_after") is None:
            return entries
        after = page["next_after"]


def _folded_tape(data: Path | None, run_id: str) -> list[dict[str, Any]]:
    """The tape folded by the tape view's own ``apply`` from the run's events, in the API's
    shape."""
    from events import JournalReader
    from projections.base import folded
    from projections.queries import typed_rows
    from projections.tape import TapeProjection
    from transports.cli.data_dir import journal_path, resolve

    path = journal_path(resolve(data))
    if not path.exists():
        raise CliError(f"no run with id {run_id!r}")
    reader = JournalReader.open(path)
    try:
        with folded(TapeProjection(), reader.read_correlated(run_id)) as conn:
            sql = "SELECT * FROM tape WHERE run_id = ? ORDER BY tape_seq"
            entries = typed_rows(conn, TapeRecord, sql, (run_id,))
    finally:
        reader.close()
    if not entries:
        raise CliError(f"no run with id {run_id!r}")
    return [msgspec.to_builtins(entry) for entry in entries]


@app.command("cancel")
def cancel_cmd(
    run_id: RunArg,
    data: DataOption = None,
    json: JsonOption = False,
    token_file: TokenFileOption = None,
) -> None:
    """Cancel a live run (its tool call in flight is stopped; the run ends cancelled). Exit 1
    when the run had already ended."""
    node = online(data)
    if node is None:
        raise CliError(
            "no node runs on this data dir, so no run is live (the next reel node ends an "
            "unfinished run as interrupted)"
        )
    run = msgspec.convert(
        api(node, token_file, "POST", _path(run_id, "cancel"), {}, 202), RunRecord
    )
    if json:
        print(msgspec.json.encode(run).decode())
    else:
        print(f"run {run.run_id}: {run.state}")
