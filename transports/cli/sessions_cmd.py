"""``reel sessions list | show ID | reset ID | branch ID | compact ID | checkpoints ID |
restore ID CHECKPOINT``.

While a node holds the data dir these ask its HTTP API with a token (``--token-file``, else
``REEL_TOKEN``, else the data dir's admin.token): the act is the token principal's and Cedar
decides whether it may (``session.list``, ``session.read``, ``session.reset``,
``session.create`` for a branch, ``session.compact``, ``session.restore``).

With no node: ``list`` and ``show`` fold the sessions view from the journal itself,
``checkpoints`` folds the session's stream, and ``restore`` appends ``session.restored`` to it
as principal ``cli`` (the next ``reel node`` folds it like any other event). ``reset``,
``branch`` and ``compact`` need the running node: the directory that names sessions, and the
summary's provider and budget, are the node's.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated
from urllib.parse import quote

import msgspec
import typer

from actors.messages import CompactionOutcome
from actors.sessions.compaction import CheckpointInfo, Checkpoints
from projections.records import SessionRecord, session_text
from projections.sessions import SessionsProjection
from transports.cli.errors import CliError
from transports.cli.listing import folded_rows, listed, searched, table, when
from transports.cli.node_api import api, call, online, refused
from transports.cli.options import DataOption, JsonOption, TokenFileOption
from transports.cli.render import plural

app = typer.Typer(
    help="List and show sessions, reset or branch one, compact its context, restore a checkpoint.",
    no_args_is_help=True,
)
_json = msgspec.json.Encoder()


def _path(session_id: str, what: str) -> str:
    return f"/v1/sessions/{quote(session_id, safe='')}/{what}"


SessionArg = Annotated[str, typer.Argument(help="The session id.", show_default=False)]
_LIST_OPTIONS = {"principal": "--principal", "q": "--search", "limit": "--limit"}


def _needs_node(data: Path | None, what: str, why: str = "") -> Path:
    node = online(data)
    if node is None:
        raise CliError(
            f"{what} needs the running node{why}: start it with reel node, then run this again"
        )
    return node


@app.command("list")
def list_cmd(
    principal: Annotated[
        str | None, typer.Option("--principal", help="Only sessions this principal created.")
    ] = None,
    search: Annotated[
        str | None,
        typer.Option("--search", help="Only sessions whose id, key, label or owner hold it."),
    ] = None,
    newest: Annotated[bool, typer.Option("--newest", help="Newest first.")] = False,
    limit: Annotated[
        int, typer.Option("--limit", min=1, max=10_000, help="At most this many.")
    ] = 50,
    data: DataOption = None,
    json: JsonOption = False,
    token_file: TokenFileOption = None,
) -> None:
    """Sessions in creation order (--newest: newest first): key, label, owner, runs, resets,
    and the last run."""
    node = online(data)
    if node is not None:
        query = {
            "principal": principal or "",
            "q": search or "",
            "order": "newest" if newest else "",
        }
        sessions = listed(
            node, token_file, "/v1/sessions", query, limit, SessionRecord, _LIST_OPTIONS
        )
    else:
        from projections.queries import SessionFilter, page_sql

        sql, args = page_sql(
            "sessions", "session_id", SessionFilter(principal=principal), None, -1, newest
        )
        folded = folded_rows(data, SessionsProjection(), SessionRecord, sql, args)
        sessions = searched(folded, search, session_text)[:limit]
    if json:
        print(_json.encode(sessions).decode())
    elif not sessions:
        print("no sessions")
    else:
        table(
            f"{len(sessions)} session{'' if len(sessions) == 1 else 's'}",
            ("session", "key", "label", "owner", "created", "runs", "resets", "last run"),
            [_row(s) for s in sessions],
        )


def _row(s: SessionRecord) -> tuple[str, ...]:
    return (
        s.session_id,
        s.session_key or "-",
        s.label or "-",
        s.principal,
        when(s.created_at_ms),
        str(s.runs),
        str(s.resets),
        s.last_run_id or "-",
    )


@app.command("show")
def show_cmd(
    session_id: SessionArg,
    data: DataOption = None,
    json: JsonOption = False,
    token_file: TokenFileOption = None,
) -> None:
    """One session: key, label, owner, where it was branched from, runs, resets, times."""
    node = online(data)
    if node is not None:
        reply = api(
            node, token_file, "GET", f"/v1/sessions/{quote(session_id, safe='')}", None, 200
        )
        session = msgspec.convert(reply, SessionRecord)
    else:
        sql = "SELECT * FROM sessions WHERE session_id = ?"
        found = folded_rows(data, SessionsProjection(), SessionRecord, sql, (session_id,))
        if not found:
            raise CliError(f"no session with id {session_id!r}")
        session = found[0]
    _show(session, json)


def _show(session: SessionRecord, json: bool) -> None:
    if json:
        print(_json.encode(session).decode())
        return
    branched = (
        f"{session.parent_session_id} at run {session.branched_from_run_id or '-'}"
        if session.parent_session_id
        else "-"
    )
    for name, value in (
        ("session", session.session_id),
        ("key", session.session_key or "-"),
        ("label", session.label or "-"),
        ("owner", session.principal),
        ("branched", branched),
        ("created", when(session.created_at_ms)),
        ("updated", when(session.updated_at_ms)),
        ("runs", str(session.runs)),
        ("resets", str(session.resets)),
        ("last run", session.last_run_id or "-"),
    ):
        print(f"{name:<9} {value}")


@app.command("reset")
def reset_cmd(
    session_id: SessionArg,
    data: DataOption = None,
    json: JsonOption = False,
    token_file: TokenFileOption = None,
) -> None:
    """Start the session's context afresh: later runs do not see earlier history (which stays
    in the journal)."""
    node = _needs_node(data, "a reset")
    reply = api(node, token_file, "POST", _path(session_id, "reset"), {}, 200)
    session = msgspec.convert(reply, SessionRecord)
    if json:
        _show(session, json)
    else:
        print(f"session {session.session_id}: reset ({plural(session.resets, 'reset')} so far)")


@app.command("branch")
def branch_cmd(
    session_id: SessionArg,
    run: Annotated[
        str | None,
        typer.Option("--run", help="Up to this run (default: the session's last finished run)."),
    ] = None,
    key: Annotated[str | None, typer.Option("--key", help="The new session's key.")] = None,
    label: Annotated[str | None, typer.Option("--label", help="The new session's label.")] = None,
    data: DataOption = None,
    json: JsonOption = False,
    token_file: TokenFileOption = None,
) -> None:
    """A new session with this one's history up to a run; the original goes on unchanged."""
    node = _needs_node(data, "a branch")
    body = {k: v for k, v in (("run_id", run), ("session_key", key), ("label", label)) if v}
    options = {"run_id": "--run", "session_key": "--key", "label": "--label"}
    reply = api(node, token_file, "POST", _path(session_id, "branch"), body, 201, options)
    session = msgspec.convert(reply, SessionRecord)
    if json:
        _show(session, json)
    else:
        print(
            f"session {session.session_id}: branched from {session_id} at run "
            f"{session.branched_from_run_id or '-'}"
        )


@app.command("compact")
def compact_cmd(
    session_id: SessionArg,
    data: DataOption = None,
    json: JsonOption = False,
    token_file: TokenFileOption = None,
) -> None:
    """Condense the session's older runs into a summary now (a new checkpoint). Exit 1 when
    there is nothing to condense or a run is in progress."""
    node = _needs_node(data, "compaction", " (its provider and budget write the summary)")
    status, reply = call(node, token_file, "POST", _path(session_id, "compact"), {})
    if status not in (200, 202):
        raise refused(reply, status)
    outcome = msgspec.convert(reply, CompactionOutcome)
    if json:
        print(_json.encode(outcome).decode())
        return
    runs = f"{outcome.condensed} run{'' if outcome.condensed == 1 else 's'}"
    if outcome.status == "writing":
        print(
            f"session {session_id}: condensing {runs} into checkpoint {outcome.compaction_id}; "
            "the model is writing the summary (reel sessions checkpoints lists it when done)"
        )
        return
    print(
        f"session {session_id}: condensed {runs} into checkpoint {outcome.compaction_id} "
        f"({outcome.method}; history ~{outcome.tokens_before} -> ~{outcome.tokens_after} tokens)"
    )


@app.command("checkpoints")
def checkpoints_cmd(
    session_id: SessionArg,
    data: DataOption = None,
    json: JsonOption = False,
    token_file: TokenFileOption = None,
) -> None:
    """The session's checkpoints, oldest first; * marks the one in force."""
    node = online(data)
    if node is not None:
        reply = api(node, token_file, "GET", _path(session_id, "checkpoints"), None, 200)
        listing = msgspec.convert(reply, Checkpoints)
    else:
        listing = _folded(data, session_id)
    if json:
        print(_json.encode(listing).decode())
        return
    if not listing.items:
        print(f"session {session_id} has no checkpoints (it was never compacted)")
        return
    for item in listing.items:
        print(_line(item))


def _line(item: CheckpointInfo) -> str:
    mark = "*" if item.in_force else " "
    when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(item.created_at_ms / 1000))
    covers = len(item.covers)
    span = f" ({item.covers[0]}..{item.covers[-1]})" if covers > 1 else ""
    return (
        f"{mark} {item.checkpoint_id}  {when}  {item.trigger}, {item.method}, by {item.principal}\n"
        f"    covers {covers} run{'' if covers == 1 else 's'}{span}; history {item.history_runs} "
        f"runs; ~{item.tokens_before} -> ~{item.tokens_after} tokens"
    )


def _folded(data: Path | None, session_id: str) -> Checkpoints:
    """The checkpoints folded from the journal itself (no node runs)."""
    from actors.sessions.compaction import checkpoints_of
    from events import JournalReader
    from transports.cli.data_dir import existing, journal_path

    reader = JournalReader.open(journal_path(existing(data)))
    try:
        stored = reader.read_stream(f"session/{session_id}")
    finally:
        reader.close()
    if not stored:
        raise CliError(f"no session with id {session_id!r}")
    return checkpoints_of(session_id, stored)


_RESTORE_OPTIONS = {"checkpoint": "checkpoint"}
"""The argument a refused checkpoint is (the node's message may not name it)."""


@app.command("restore")
def restore_cmd(
    session_id: SessionArg,
    checkpoint: Annotated[
        str, typer.Argument(help="The checkpoint id (reel sessions checkpoints lists them).")
    ],
    data: DataOption = None,
    token_file: TokenFileOption = None,
) -> None:
    """Return the session's context to a checkpoint: its summary and history. Later runs stay
    in the journal; the next run no longer sees them."""
    node = online(data)
    if node is not None:
        body = {"checkpoint": checkpoint}
        api(node, token_file, "POST", _path(session_id, "restore"), body, 200, _RESTORE_OPTIONS)
        print(f"session {session_id}: restored to checkpoint {checkpoint}")
        return
    _restore_offline(data, session_id, checkpoint)
    print(
        f"session {session_id}: restored to checkpoint {checkpoint} (recorded by cli; the "
        "node folds it when it starts)"
    )


def _restore_offline(data: Path | None, session_id: str, checkpoint: str) -> None:
    """Append ``session.restored`` to the session's stream (no node holds the data dir, so
    nothing else writes it), folded and decided as the session actor does."""
    from actors import InvalidCommand
    from actors.aggregate import fold
    from actors.messages import RestoreSession
    from actors.sessions import state as session_state
    from actors.sessions.decide import decide
    from actors.stream import recorded
    from transports.cli.data_dir import existing
    from transports.cli.offline import CLI_PRINCIPAL, commit, journal_writer

    with journal_writer(existing(data), "restore through its API") as journal:
        stream = session_state.stream_of(session_id)
        state = fold(session_state, recorded(journal.read_stream(stream)))
        if state is None:
            raise CliError(f"no session with id {session_id!r}")
        command = RestoreSession(
            session_id=session_id, checkpoint_id=checkpoint, principal=CLI_PRINCIPAL
        )
        try:
            events = decide(state, command)
        except InvalidCommand as exc:
            raise CliError(str(exc)) from None
        commit(journal, stream, state.next_seq, list(events))
