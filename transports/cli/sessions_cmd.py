"""``reel sessions compact ID | checkpoints ID | restore ID CHECKPOINT``.

While a node holds the data dir these ask its HTTP API with a token (``--token-file``, else
``REEL_TOKEN``, else the data dir's admin.token): the act is the token principal's and Cedar
decides whether it may (``session.compact``, ``session.read``, ``session.restore``).

With no node: ``checkpoints`` folds the session's stream from the journal itself, and
``restore`` appends ``session.restored`` to it as principal ``cli`` (the next ``reel node``
folds it like any other event). ``compact`` needs the running node: the summary is decided by
the session with the node's provider and budget.
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
from transports.cli.errors import CliError
from transports.cli.node_api import api, call, online, refused
from transports.cli.options import DataOption, JsonOption, TokenFileOption

app = typer.Typer(
    help="Compact a session's context, list its checkpoints, restore one.", no_args_is_help=True
)
_json = msgspec.json.Encoder()


def _path(session_id: str, what: str) -> str:
    return f"/v1/sessions/{quote(session_id, safe='')}/{what}"


SessionArg = Annotated[str, typer.Argument(help="The session id.", show_default=False)]


@app.command("compact")
def compact_cmd(
    session_id: SessionArg,
    data: DataOption = None,
    json: JsonOption = False,
    token_file: TokenFileOption = None,
) -> None:
    """Condense the session's older runs into a summary now (a new checkpoint). Exit 1 when
    there is nothing to condense or a run is in progress."""
    node = online(data)
    if node is None:
        raise CliError(
            "compaction needs the running node (its provider and budget decide the summary): "
            "start it with reel node, then run this again"
        )
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
