"""``reel tasks list | show ID | cancel ID``: the background task queue (docs/tasks.md).

While a node holds the data dir these ask its HTTP API with a token (``--token-file``, else
``REEL_TOKEN``, else the data dir's admin.token): Cedar decides ``task.list`` / ``task.read`` /
``task.cancel`` for that principal, and a cancel reaches a running handler at once.

When no node holds the data dir, ``list`` and ``show`` fold the tasks from the journal itself
(the views may lag a stopped node), and ``cancel`` appends ``task.cancelled`` itself, as
principal ``cli`` (the person at the machine's console), at the seq the task's fold expects.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated
from urllib.parse import quote, urlencode

import msgspec
import typer

from events.task_lifecycle import TaskStatus
from projections.tasks import TASK_STATES, TaskRecord
from transports.cli.errors import CliError
from transports.cli.node_api import api, online
from transports.cli.offline import CLI_PRINCIPAL
from transports.cli.options import DataOption, JsonOption, TokenFileOption
from transports.cli.render import print_list

app = typer.Typer(help="List, show and cancel background tasks.", no_args_is_help=True)
_json = msgspec.json.Encoder()
_PAGE = 200
_ERROR_SHOWN = 120
"""How much of a failure one list line shows (``show`` and ``--json`` have it whole)."""


def _check_state(value: str | None) -> str | None:
    if value is not None and value not in TASK_STATES:
        raise typer.BadParameter(f"must be one of {', '.join(TASK_STATES)}", param_hint="--state")
    return value


def _check_kind(value: str | None) -> str | None:
    from events.catalog import TASK_KIND
    from events.redaction.redact import looks_secret

    if value is not None and (problem := TASK_KIND.problem(value, looks_secret)) is not None:
        raise typer.BadParameter(problem, param_hint="--kind")
    return value


def _check_id(value: str) -> str:
    from events import is_ulid

    if not is_ulid(value):
        raise typer.BadParameter("is not a task id (a ULID from reel tasks list)", param_hint="ID")
    return value


StateOption = Annotated[
    str | None,
    typer.Option("--state", help=f"Only tasks in this state: {', '.join(TASK_STATES)}."),
]
KindOption = Annotated[str | None, typer.Option("--kind", help="Only tasks of this kind.")]
IdArgument = Annotated[str, typer.Argument(help="The task's id (from reel tasks list).")]


@app.command("list")
def list_cmd(
    state: StateOption = None,
    kind: KindOption = None,
    limit: Annotated[int, typer.Option("--limit", min=1, help="At most this many.")] = 100,
    data: DataOption = None,
    json: JsonOption = False,
    token_file: TokenFileOption = None,
) -> None:
    """Tasks in enqueue order: id, state, kind, attempts, when, the last error."""
    _check_state(state)
    _check_kind(kind)
    node = online(data)
    if node is not None:
        records = _listed(node, token_file, state, kind, limit)
    else:
        records = [
            r
            for r in _folded(data)
            if (state is None or r.state == state) and (kind is None or r.kind == kind)
        ][:limit]
    print_list(records, _line, json=json, empty="no tasks")


@app.command("show")
def show_cmd(
    task_id: IdArgument,
    data: DataOption = None,
    json: JsonOption = False,
    token_file: TokenFileOption = None,
) -> None:
    """One task in full: its payload, attempts, claim, error or result."""
    _check_id(task_id)
    node = online(data)
    if node is not None:
        body = api(node, token_file, "GET", f"/v1/tasks/{quote(task_id)}", None, 200)
        record = msgspec.convert(body, TaskRecord)
    else:
        found = _folded_one(data, task_id)
        if found is None:
            raise CliError(f"no task with id {task_id!r}")
        record = found
    if json:
        print(_json.encode(record).decode())
        return
    for name, value in msgspec.structs.asdict(record).items():
        shown = _json.encode(value).decode() if name in ("payload", "result") else value
        if name.endswith("_ms") and isinstance(value, int):
            shown = f"{value} ({_iso(value)})"
        print(f"{name}: {'-' if shown is None else shown}")


@app.command("cancel")
def cancel_cmd(
    task_id: IdArgument,
    reason: Annotated[str, typer.Option("--reason", help="Recorded with the cancel.")] = "",
    data: DataOption = None,
    token_file: TokenFileOption = None,
) -> None:
    """Cancel a task that has not ended; a running handler is told to stop. A task that ended
    already exits 1 and changes nothing."""
    _check_id(task_id)
    node = online(data)
    if node is not None:
        path = f"/v1/tasks/{quote(task_id)}/cancel"
        body = api(node, token_file, "POST", path, {"reason": reason}, 200)
        record = msgspec.convert(body, TaskRecord)
    else:
        record = _cancel_offline(data, task_id, reason)
    print(f"cancelled task {record.task_id} ({record.kind})")


# --- through the node ------------------------------------------------------------------------


def _listed(
    data_dir: Path, token_file: Path | None, state: str | None, kind: str | None, limit: int
) -> list[TaskRecord]:
    """The tasks the node's API lets this token read, page by page, up to ``limit``."""
    query: dict[str, str] = {"limit": str(min(limit, _PAGE))}
    if state is not None:
        query["state"] = state
    if kind is not None:
        query["kind"] = kind
    records: list[TaskRecord] = []
    while len(records) < limit:
        page = api(data_dir, token_file, "GET", f"/v1/tasks?{urlencode(query)}", None, 200)
        records += msgspec.convert(page["items"], list[TaskRecord])
        if page.get("next_after") is None:
            break
        query["after"] = page["next_after"]
    return records[:limit]


# --- without a node --------------------------------------------------------------------------


def _folded(data: Path | None) -> list[TaskRecord]:
    """Every task folded from the journal itself."""
    from actors.tasks.queue import record_of
    from actors.tasks.store import load_tasks
    from events import JournalReader
    from transports.cli.data_dir import journal_path, resolve

    reader = JournalReader.open(journal_path(resolve(data)))
    try:
        return [record_of(state) for state in load_tasks(reader).values()]
    finally:
        reader.close()


def _folded_one(data: Path | None, task_id: str) -> TaskRecord | None:
    from actors.tasks.queue import record_of
    from actors.tasks.store import load_task
    from events import JournalReader
    from transports.cli.data_dir import journal_path, resolve

    reader = JournalReader.open(journal_path(resolve(data)))
    try:
        state = load_task(reader, task_id)
    finally:
        reader.close()
    return None if state is None else record_of(state)


def _cancel_offline(data: Path | None, task_id: str, reason: str) -> TaskRecord:
    """Append ``task.cancelled`` as ``cli`` on a data dir no node holds."""
    from actors.tasks.decide import cancelled
    from actors.tasks.queue import record_of
    from actors.tasks.store import load_task, write
    from transports.cli.data_dir import existing
    from transports.cli.offline import journal_writer

    with journal_writer(existing(data), "cancel through its API") as journal:
        state = load_task(journal, task_id)
        if state is None:
            raise CliError(f"no task with id {task_id!r}")
        after = write(
            journal, state, lambda s: cancelled(s, CLI_PRINCIPAL, reason), principal=CLI_PRINCIPAL
        )
    return record_of(after)


# --- printing --------------------------------------------------------------------------------


def _iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec="seconds")


def _line(record: TaskRecord) -> str:
    parts = [
        record.task_id,
        f"{record.state:<9}",
        f"{record.kind:<20}",
        f"attempts={record.attempts}/{record.max_attempts}",
        f"enqueued={_iso(record.enqueued_at_ms)}",
    ]
    if record.state == TaskStatus.RETRYING and record.retry_at_ms is not None:
        parts.append(f"retry_at={_iso(record.retry_at_ms)}")
    if record.state == TaskStatus.CANCELLED:
        parts.append(f"by={record.cancelled_by}")
    if record.error and record.state in (TaskStatus.RETRYING, TaskStatus.FAILED):
        error = record.error if len(record.error) <= _ERROR_SHOWN else record.error[:_ERROR_SHOWN]
        parts.append(f"error={error}")
    return "  ".join(parts)
