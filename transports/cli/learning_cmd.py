"""``reel learning list | show ID | accept ID | reject ID | rollback ID``: what post-run
reflection learned, and its review (docs/learning.md).

While a node holds the data dir these ask its HTTP API with a token (``--token-file``, else
``REEL_TOKEN``, else the data dir's admin.token): Cedar decides ``learning.list`` /
``learning.read`` / ``learning.review`` for that principal.

When no node holds the data dir, ``list`` and ``show`` fold the candidates from the journal
itself, and a review is appended by the command itself, as principal ``cli`` (the person at the
machine's console), at the seq the candidate's stream expects (an accepted fact's memory item
is written the same way).

A review the candidate's status refuses (accepting an applied candidate, rejecting an applied
one: roll it back instead) exits 1 and changes nothing; bad input exits 2 with one line.
"""

from __future__ import annotations

import json as jsonlib
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Literal
from urllib.parse import quote, urlencode

import msgspec
import typer

from events.catalog import CANDIDATE_STATUSES, LEARNING_KINDS
from projections.learning import CandidateRecord
from transports.cli.errors import CliError
from transports.cli.node_api import api, online
from transports.cli.offline import CLI_PRINCIPAL
from transports.cli.options import DataOption, JsonOption, TokenFileOption
from transports.cli.render import print_list

app = typer.Typer(
    help="List, show and review what reflection learned (facts, preferences, procedures).",
    no_args_is_help=True,
)
_json = msgspec.json.Encoder()
_PAGE = 200
_TEXT_SHOWN = 100
"""How much of a candidate's text one list line shows (``show`` and ``--json``: all of it)."""

Decision = Literal["accept", "reject", "rollback"]


def _check_status(value: str | None) -> str | None:
    if value is not None and value not in CANDIDATE_STATUSES:
        raise typer.BadParameter(
            f"must be one of {', '.join(CANDIDATE_STATUSES)}", param_hint="--status"
        )
    return value


def _check_kind(value: str | None) -> str | None:
    if value is not None and value not in LEARNING_KINDS:
        raise typer.BadParameter(f"must be one of {', '.join(LEARNING_KINDS)}", param_hint="--kind")
    return value


def _check_id(value: str) -> str:
    from events import is_ulid

    if not is_ulid(value):
        raise typer.BadParameter(
            "is not a learning candidate id (from reel learning list)", param_hint="ID"
        )
    return value


def _check_reason(value: str) -> str:
    from events.fields import REASON_MAX_CHARS

    if len(value) > REASON_MAX_CHARS:
        raise typer.BadParameter(
            f"is {len(value):,} characters; the cap is {REASON_MAX_CHARS:,}",
            param_hint="--reason",
        )
    return value


StatusOption = Annotated[
    str | None,
    typer.Option(
        "--status", help=f"Only candidates in this status: {', '.join(CANDIDATE_STATUSES)}."
    ),
]
KindOption = Annotated[
    str | None, typer.Option("--kind", help=f"Only this kind: {', '.join(LEARNING_KINDS)}.")
]
IdArgument = Annotated[str, typer.Argument(help="The candidate's id (from reel learning list).")]
ReasonOption = Annotated[str, typer.Option("--reason", help="Why; recorded with the review.")]


@app.command("list")
def list_cmd(
    status: StatusOption = None,
    kind: KindOption = None,
    limit: Annotated[int, typer.Option("--limit", min=1, help="At most this many.")] = 100,
    data: DataOption = None,
    json: JsonOption = False,
    token_file: TokenFileOption = None,
) -> None:
    """Candidates in the order they were proposed: id, status, kind, confidence, runs, whom
    it concerns, the text."""
    _check_status(status)
    _check_kind(kind)
    node = online(data)
    if node is not None:
        records = _listed(node, token_file, status, kind, limit)
    else:
        records = [
            r
            for r in _folded(data)
            if (status is None or r.status == status) and (kind is None or r.kind == kind)
        ][:limit]
    print_list(records, _line, json=json, empty="no learning candidates")


@app.command("show")
def show_cmd(
    candidate_id: IdArgument,
    data: DataOption = None,
    json: JsonOption = False,
    token_file: TokenFileOption = None,
) -> None:
    """One candidate in full: its text, evidence (runs and tape positions), who decided."""
    _check_id(candidate_id)
    record = _one(data, token_file, candidate_id)
    if json:
        print(_json.encode(record).decode())
        return
    for name, value in msgspec.structs.asdict(record).items():
        if name == "evidence":
            print("evidence:")
            for e in record.evidence:
                print(f"  run {e.run_id}  positions {', '.join(map(str, e.positions)) or '-'}")
            continue
        shown = jsonlib.dumps(list(value)) if name == "tools" else value
        if name.endswith("_ms") and isinstance(value, int):
            shown = f"{value} ({_iso(value)})"
        print(f"{name}: {'-' if shown is None or shown == '' else shown}")


@app.command("accept")
def accept_cmd(
    candidate_id: IdArgument,
    reason: ReasonOption = "",
    data: DataOption = None,
    token_file: TokenFileOption = None,
) -> None:
    """Apply a candidate: a fact becomes a memory item, a preference or procedure is offered
    to later runs. An applied candidate exits 1 and changes nothing."""
    _review(data, token_file, candidate_id, "accept", reason)


@app.command("reject")
def reject_cmd(
    candidate_id: IdArgument,
    reason: ReasonOption = "",
    data: DataOption = None,
    token_file: TokenFileOption = None,
) -> None:
    """Refuse a pending candidate (an applied one is rolled back instead: exits 1)."""
    _review(data, token_file, candidate_id, "reject", reason)


@app.command("rollback")
def rollback_cmd(
    candidate_id: IdArgument,
    reason: ReasonOption = "",
    data: DataOption = None,
    token_file: TokenFileOption = None,
) -> None:
    """Withdraw an applied candidate: its memory item is deleted, a preference or procedure
    is no longer offered. One that is not applied exits 1."""
    _review(data, token_file, candidate_id, "rollback", reason)


_DONE = {"accept": "applied", "reject": "rejected", "rollback": "rolled back"}


def _review(
    data: Path | None, token_file: Path | None, candidate_id: str, decision: Decision, reason: str
) -> None:
    _check_id(candidate_id)
    _check_reason(reason)
    node = online(data)
    if node is not None:
        path = f"/v1/learning/candidates/{quote(candidate_id)}/{decision}"
        body = api(node, token_file, "POST", path, {"reason": reason}, 200)
        record = msgspec.convert(body, CandidateRecord)
        by = record.decided_by
    else:
        _review_offline(data, candidate_id, decision, reason)
        by = CLI_PRINCIPAL
    print(f"learning candidate {candidate_id}: {_DONE[decision]} by {by}")


# --- through the node ------------------------------------------------------------------------


def _listed(
    data_dir: Path, token_file: Path | None, status: str | None, kind: str | None, limit: int
) -> list[CandidateRecord]:
    """The candidates the node's API lets this token read, page by page, up to ``limit``."""
    query: dict[str, str] = {"limit": str(min(limit, _PAGE))}
    if status is not None:
        query["status"] = status
    if kind is not None:
        query["kind"] = kind
    records: list[CandidateRecord] = []
    while len(records) < limit:
        page = api(
            data_dir, token_file, "GET", f"/v1/learning/candidates?{urlencode(query)}", None, 200
        )
        records += msgspec.convert(page["items"], list[CandidateRecord])
        if page.get("next_after") is None:
            break
        query["after"] = page["next_after"]
    return records[:limit]


def _one(data: Path | None, token_file: Path | None, candidate_id: str) -> CandidateRecord:
    node = online(data)
    if node is not None:
        path = f"/v1/learning/candidates/{quote(candidate_id)}"
        body = api(node, token_file, "GET", path, None, 200)
        return msgspec.convert(body, CandidateRecord)
    for record in _folded(data):
        if record.candidate_id == candidate_id:
            return record
    raise CliError(f"no learning candidate with id {candidate_id!r}")


# --- without a node --------------------------------------------------------------------------


def _folded(data: Path | None) -> list[CandidateRecord]:
    """Every candidate folded from the journal itself."""
    from events import JournalReader
    from projections.learning import load_candidates
    from transports.cli.data_dir import journal_path, resolve

    reader = JournalReader.open(journal_path(resolve(data)))
    try:
        return load_candidates(reader)
    finally:
        reader.close()


def _review_offline(data: Path | None, candidate_id: str, decision: Decision, reason: str) -> None:
    """The review as ``cli`` on a data dir no node holds."""
    from actors.learning.desk import LearningDesk
    from transports.cli.data_dir import existing
    from transports.cli.offline import journal_writer
    from transports.config import load_config
    from transports.learning import LearnedMemory

    data_dir = existing(data)
    settings = load_config(data_dir / "config.toml").learning
    with journal_writer(data_dir, "review through its API") as journal:
        desk = LearningDesk(journal, settings, LearnedMemory(journal))
        act = {"accept": desk.accept, "reject": desk.reject, "rollback": desk.rollback}[decision]
        act(candidate_id, by=CLI_PRINCIPAL, reason=reason)


# --- printing --------------------------------------------------------------------------------


def _iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec="seconds")


def _line(record: CandidateRecord) -> str:
    text = record.text if len(record.text) <= _TEXT_SHOWN else record.text[:_TEXT_SHOWN] + "..."
    return "  ".join(
        [
            record.candidate_id,
            f"{record.status:<11}",
            f"{record.kind:<10}",
            f"{record.confidence_bps / 100:5.1f}%",
            f"runs={record.runs}",
            record.principal,
            text,
        ]
    )
