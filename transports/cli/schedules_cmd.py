"""``reel schedules create | list | pause | resume | delete | run-now``: runs on a timetable
(docs/schedules.md).

While a node runs these commands ask its API (``schedule.list`` / ``schedule.create`` /
``schedule.manage``); on a data dir no node holds, ``create``, ``list``, ``pause``,
``resume`` and ``delete`` go through the journal themselves (as principal ``cli``), and
``run-now`` needs a node. A bad cron line, time zone, interval or name is a usage error
naming the option (exit 2) before anything is opened or asked.
"""

from __future__ import annotations

import time
import urllib.parse
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import msgspec
import typer

from actors.schedules.info import FiredRun, ScheduleInfo
from transports.cli.errors import CliError
from transports.cli.node_api import api as _api
from transports.cli.node_api import online as _online
from transports.cli.offline import CLI_PRINCIPAL
from transports.cli.options import DataOption, JsonOption, TokenFileOption

if TYPE_CHECKING:
    from actors.schedules.desk import ScheduleBook

app = typer.Typer(
    help="Create, list, pause, resume, delete and run-now schedules (runs on a timetable).",
    no_args_is_help=True,
)
_json = msgspec.json.Encoder()
_OPTIONS = {
    "name": "NAME",
    "cron": "--cron",
    "every": "--every",
    "tz": "--tz",
    "session_key": "--session-key",
    "text": "--text",
    "runs_as": "--as",
    "catch_up": "--catch-up",
    "overlap": "--overlap",
}
"""The fields a refusal names, as this command line names them."""

NameArgument = Annotated[str, typer.Argument(help="The schedule's name.")]


def _checked_name(name: str) -> str:
    from actors.schedules.decide import InvalidSchedule, check_name

    try:
        return check_name(name)
    except InvalidSchedule as exc:
        raise typer.BadParameter(str(exc).partition(": ")[2], param_hint="NAME") from None


def _iso(ms: int | None) -> str:
    if ms is None:
        return "-"
    return datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec="seconds")


def _when(info: ScheduleInfo) -> str:
    if info.cron:
        return f"cron '{info.cron}' {info.tz}"
    return f"every {info.every_ms / 1000:g}s"


def _print(info: ScheduleInfo, json: bool, done: str) -> None:
    if json:
        print(_json.encode(info).decode())
    else:
        print(
            f"{done} schedule {info.name} ({_when(info)}, runs as {info.runs_as}; "
            f"next {_iso(info.next_due_ms)})"
        )


@app.command("create")
def create_cmd(
    name: NameArgument,
    session_key: Annotated[
        str, typer.Option("--session-key", help="The session its runs go to (made if new).")
    ],
    text: Annotated[str, typer.Option("--text", help="What each run is asked.")],
    cron: Annotated[
        str | None,
        typer.Option("--cron", help='A five-field cron line, e.g. "0 9 * * 1-5".'),
    ] = None,
    every: Annotated[
        str | None, typer.Option("--every", help="An interval instead: 15m, 2s, 1h, 1d.")
    ] = None,
    tz: Annotated[
        str, typer.Option("--tz", help="The IANA time zone the cron line is read in.")
    ] = "UTC",
    runs_as: Annotated[
        str | None,
        typer.Option(
            "--as",
            help="The principal its runs start as, with its roles (default: the caller; "
            "offline: admin). It must hold a live token.",
        ),
    ] = None,
    catch_up: Annotated[
        str, typer.Option("--catch-up", help="Due times missed while down: skip, one or all.")
    ] = "one",
    overlap: Annotated[
        str, typer.Option("--overlap", help="While the last run is live: skip or queue.")
    ] = "skip",
    data: DataOption = None,
    json: JsonOption = False,
    token_file: TokenFileOption = None,
) -> None:
    """Create a schedule: a run with --text in --session-key at each due time."""
    from actors.schedules.decide import InvalidSchedule, check_timing
    from events.catalog import CATCH_UPS, OVERLAPS

    _checked_name(name)
    try:
        check_timing(cron, every, tz)
    except InvalidSchedule as exc:
        hint = (
            "--cron / --every"
            if exc.field == "cron" and (cron is None) == (every is None)
            else _OPTIONS[exc.field]
        )
        raise typer.BadParameter(str(exc).partition(": ")[2], param_hint=hint) from None
    if catch_up not in CATCH_UPS:
        raise typer.BadParameter(f"must be one of {', '.join(CATCH_UPS)}", param_hint="--catch-up")
    if overlap not in OVERLAPS:
        raise typer.BadParameter(f"must be one of {', '.join(OVERLAPS)}", param_hint="--overlap")
    fields: dict[str, Any] = {
        "name": name,
        "cron": cron,
        "every": every,
        "tz": tz,
        "session_key": session_key,
        "text": text,
        "runs_as": runs_as,
        "catch_up": catch_up,
        "overlap": overlap,
    }
    online = _online(data)
    if online is not None:
        made = _api(online, token_file, "POST", "/v1/schedules", fields, 201, _OPTIONS)
        _print(msgspec.convert(made, ScheduleInfo), json, "created")
        return
    from transports.access.tokens import ADMIN_PRINCIPAL

    with _offline(data) as (book, live):
        who = runs_as if runs_as is not None else ADMIN_PRINCIPAL
        if not live(who):
            raise CliError(f"--as: {who!r} holds no live token (its runs need roles)")
        info = book.create(by=CLI_PRINCIPAL, **{**fields, "runs_as": who})
    _print(info, json, "created")


def _change(verb: str, name: str, data: Path | None, json: bool, token_file: Path | None) -> None:
    """pause, resume or delete ``name``."""
    _checked_name(name)
    online = _online(data)
    if online is not None:
        path = f"/v1/schedules/{urllib.parse.quote(name)}"
        method, path = ("DELETE", path) if verb == "delete" else ("POST", f"{path}/{verb}")
        made = _api(online, token_file, method, path, None, 200, _OPTIONS)
        info = msgspec.convert(made, ScheduleInfo)
    else:
        with _offline(data) as (book, _live):
            info = getattr(book, verb)(name, by=CLI_PRINCIPAL)
    _print(info, json, {"pause": "paused", "resume": "resumed", "delete": "deleted"}[verb])


@app.command("pause")
def pause_cmd(
    name: NameArgument,
    data: DataOption = None,
    json: JsonOption = False,
    token_file: TokenFileOption = None,
) -> None:
    """Pause a schedule: its due times pass without a run until it is resumed."""
    _change("pause", name, data, json, token_file)


@app.command("resume")
def resume_cmd(
    name: NameArgument,
    data: DataOption = None,
    json: JsonOption = False,
    token_file: TokenFileOption = None,
) -> None:
    """Resume a paused schedule from its next due time (the pause is not caught up)."""
    _change("resume", name, data, json, token_file)


@app.command("delete")
def delete_cmd(
    name: NameArgument,
    data: DataOption = None,
    json: JsonOption = False,
    token_file: TokenFileOption = None,
) -> None:
    """Delete a schedule: it fires nothing more."""
    _change("delete", name, data, json, token_file)


@app.command("run-now")
def run_now_cmd(
    name: NameArgument,
    data: DataOption = None,
    json: JsonOption = False,
    token_file: TokenFileOption = None,
) -> None:
    """Fire a schedule now, paused or not (a running node only)."""
    _checked_name(name)
    online = _online(data)
    if online is None:
        raise CliError("run-now needs a running node (reel node): no node holds this data dir")
    path = f"/v1/schedules/{urllib.parse.quote(name)}/run"
    fired = msgspec.convert(_api(online, token_file, "POST", path, None, 202, _OPTIONS), FiredRun)
    if json:
        print(_json.encode(fired).decode())
    else:
        print(f"fired schedule {fired.name}: run {fired.run_id}")


@app.command("list")
def list_cmd(
    data: DataOption = None, json: JsonOption = False, token_file: TokenFileOption = None
) -> None:
    """Every schedule: when it fires, as whom, its status and next due time. With --json: the
    items of GET /v1/schedules, in its shape."""
    online = _online(data)
    if online is not None:
        listed = _api(online, token_file, "GET", "/v1/schedules", None, 200)["items"]
        infos = msgspec.convert(listed, list[ScheduleInfo])
    else:
        with _offline(data) as (book, _live):
            infos = book.list()
    if json:
        print(_json.encode(infos).decode())
        return
    if not infos:
        print(
            'no schedules (reel schedules create NAME --every 15m --session-key KEY --text "...")'
        )
        return
    for s in infos:
        print(
            f"{s.name:<24} {s.status:<8} {_when(s):<36} as={s.runs_as} "
            f"session={s.session_key} next={_iso(s.next_due_ms)} fired={s.fired}"
        )


@contextmanager
def _offline(data: Path | None) -> Iterator[tuple[ScheduleBook, Any]]:
    """The schedules of the data dir's journal (its writer lock held), and whether a principal
    holds a live token in it (the data dir's admin always does)."""
    from actors.schedules.desk import ScheduleBook, load_schedules
    from transports.access.tokens import ADMIN_PRINCIPAL, load_tokens
    from transports.cli.data_dir import existing, node_config
    from transports.cli.offline import journal_writer
    from transports.config import load_config

    data_dir = existing(data)
    max_text_bytes = load_config(node_config(data_dir)).actors().max_message_bytes
    with journal_writer(data_dir, "use its API", _OPTIONS) as journal:
        tokens = load_tokens(journal, admin_token="")

        def live(who: str) -> bool:
            return who == ADMIN_PRINCIPAL or bool(tokens.roles_of(who, int(time.time() * 1000)))

        book = ScheduleBook(journal, load_schedules(journal), max_text_bytes=max_text_bytes)
        yield book, live
