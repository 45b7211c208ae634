"""``reel approvals list | approve ID | deny ID | revoke``.

While a node holds the data dir these ask its HTTP API with a token (``--token-file``, else
``REEL_TOKEN``, else the data dir's admin.token): the decision (or revocation) is the token
principal's, Cedar decides whether it may make it, and it takes effect at once.

When no node holds the data dir (stopped or crashed), they decide as the node would, as
principal ``cli`` (the person at the machine's console), through
:mod:`transports.cli.offline`: ``approve``/``deny`` fold the invocation and ask its own decider
(:func:`actors.invocations.decide.resolve`), then write the decision to ``approval/<approval_id>``,
a stream only this command writes (the invocation's own stream belongs to its tool actor); the
next ``reel node`` folds it into the invocation and resumes the run. ``revoke`` folds the
``always`` grants and asks their own decider (:func:`actors.approvals.always_grants.revoke`).
"""

from __future__ import annotations

import json as jsonlib
import time
from pathlib import Path
from typing import Annotated, Any
from urllib.parse import urlencode

import msgspec
import typer

from actors.approvals.grants import describe
from events.catalog import GRANT_MATCHES, GRANT_SCOPES, GrantMatch, GrantScope, Verdict
from projections.records import ApprovalRecord
from transports.cli.errors import CliError
from transports.cli.node_api import api, online
from transports.cli.offline import journal_writer
from transports.cli.options import DataOption, JsonOption, TokenFileOption
from transports.cli.render import print_list

app = typer.Typer(
    help="List and decide approvals: tool calls, and chat senders asking to be paired.",
    no_args_is_help=True,
)
_json = msgspec.json.Encoder()
_ARGUMENTS_SHOWN = 160
"""How much of a call's arguments one list line shows (--json has them whole)."""


@app.command("list")
def list_cmd(
    data: DataOption = None,
    all_: Annotated[bool, typer.Option("--all", help="Include resolved approvals.")] = False,
    run: Annotated[str | None, typer.Option("--run", help="Only this run's approvals.")] = None,
    json: JsonOption = False,
    token_file: TokenFileOption = None,
) -> None:
    """Pending approvals (with --all, resolved ones too): tool, arguments, risk, run, who
    asked, and for a decided one what the decision covers."""
    node = online(data)
    records = _listed(node, token_file, all_, run) if node else _folded(data, all_, run)
    print_list(records, _line, json=json, empty="no approvals" if all_ else "no pending approvals")


def _listed(
    data_dir: Path, token_file: Path | None, all_: bool, run: str | None
) -> list[ApprovalRecord]:
    """Every matching approval the node's API lets this token read, page by page."""
    query: dict[str, str] = {"limit": "200"}
    if not all_:
        query["state"] = "pending"
    if run is not None:
        query["run_id"] = run
    records: list[ApprovalRecord] = []
    while True:
        page = api(data_dir, token_file, "GET", f"/v1/approvals?{urlencode(query)}", None, 200)
        records += msgspec.convert(page["items"], list[ApprovalRecord])
        if page.get("next_after") is None:
            return records
        query["after"] = page["next_after"]


def _folded(data: Path | None, all_: bool, run: str | None) -> list[ApprovalRecord]:
    """Approvals folded from the journal itself (no node runs: its views may lag)."""
    from events import JournalReader
    from projections.approvals import load_approvals
    from transports.cli.data_dir import journal_path, resolve

    reader = JournalReader.open(journal_path(resolve(data)))
    try:
        records = load_approvals(reader).values()
    finally:
        reader.close()
    return [
        r for r in records if (all_ or r.state == "pending") and (run is None or r.run_id == run)
    ]


def _line(record: ApprovalRecord) -> str:
    arguments = jsonlib.dumps(record.arguments, ensure_ascii=False)
    if len(arguments) > _ARGUMENTS_SHOWN:
        arguments = arguments[:_ARGUMENTS_SHOWN] + "..."
    if record.subject == "pairing":  # a chat sender asks to be paired (docs/channels.md)
        channel = record.arguments.get("channel", "") if isinstance(record.arguments, dict) else ""
        head = (
            f"{record.approval_id}  device pairing: {record.principal} on channel {channel}\n"
            f"    risk={record.risk}  asked by {record.principal}"
        )
    else:
        head = (
            f"{record.approval_id}  {record.tool} {arguments}\n"
            f"    risk={record.risk}  run={record.run_id}  asked by {record.principal}"
        )
    if record.state == "pending":
        age = int(time.time() - record.requested_at_ms / 1000)
        return f"{head}  pending for {age}s\n    why: {record.reason}"
    covers = record.covers or _covers(record)
    reason = f"  reason: {record.decided_reason}" if record.decided_reason else ""
    return (
        f"{head}\n    {record.decision} by {record.decided_by} (scope {record.scope}): "
        f"grants {covers}{reason}"
    )


def _covers(record: ApprovalRecord) -> str:
    if record.subject == "pairing":
        paired = f"{record.principal} is paired with the channel"
        return paired if record.decision == "allow" else "nothing: the pairing was denied"
    if record.decision != "allow":
        return "nothing: the call was denied"
    return describe(
        record.tool,
        record.scope or "once",
        record.match or "any",
        record.prefix or "",
        record.principal,
    )


Scope = Annotated[
    str,
    typer.Option(
        "--scope",
        help="once (this call), session (later calls in the session until it resets; see "
        "--match) or always (the tool with any arguments for the run's principal).",
    ),
]
Match = Annotated[
    str,
    typer.Option(
        "--match",
        help="With --scope session: any (any arguments), exact (these exact arguments) or "
        "prefix (calls whose argv, path, or METHOD URL starts with --prefix).",
    ),
]
Prefix = Annotated[
    str,
    typer.Option("--prefix", help='With --match prefix: e.g. "git status", "docs/", a URL.'),
]


@app.command("approve")
def approve_cmd(
    approval_id: Annotated[str, typer.Argument(help="The approval id.")],
    scope: Scope = "once",
    match: Match = "any",
    prefix: Prefix = "",
    data: DataOption = None,
    token_file: TokenFileOption = None,
) -> None:
    """Allow a pending approval."""
    if scope not in GRANT_SCOPES:
        raise typer.BadParameter("must be once, session or always", param_hint="--scope")
    if match not in GRANT_MATCHES:
        raise typer.BadParameter("must be any, exact or prefix", param_hint="--match")
    _decide(data, token_file, approval_id, "allow", scope, match, prefix, "")


@app.command("deny")
def deny_cmd(
    approval_id: Annotated[str, typer.Argument(help="The approval id.")],
    reason: Annotated[str, typer.Option("--reason", help="Told to the model.")] = "",
    data: DataOption = None,
    token_file: TokenFileOption = None,
) -> None:
    """Deny a pending approval."""
    _decide(data, token_file, approval_id, "deny", "once", "any", "", reason)


def _decide(
    data: Path | None,
    token_file: Path | None,
    approval_id: str,
    decision: Verdict,
    scope: GrantScope,
    match: GrantMatch,
    prefix: str,
    reason: str,
) -> None:
    node = online(data)
    if node is not None:
        record = _decide_online(
            node, token_file, approval_id, decision, scope, match, prefix, reason
        )
        print(f"approval {approval_id}: {decision} by {record.decided_by}")
        print(f"grants {record.covers}")
        return
    record = _decide_offline(data, approval_id, decision, scope, match, prefix, reason)
    print(f"approval {approval_id}: {decision} by cli")
    print(f"grants {_covers(record)}")
    print("the run continues when the node starts (reel node)")


_DECISION_OPTIONS = {"scope": "--scope", "match": "--match", "prefix": "--prefix"}


def _decide_online(
    data_dir: Path,
    token_file: Path | None,
    approval_id: str,
    decision: str,
    scope: str,
    match: str,
    prefix: str,
    reason: str,
) -> ApprovalRecord:
    body: dict[str, Any] = {"decision": decision, "scope": scope, "reason": reason}
    if match != "any" or prefix:
        body |= {"match": match, "prefix": prefix}
    path = f"/v1/approvals/{approval_id}"
    reply = api(data_dir, token_file, "POST", path, body, 200, _DECISION_OPTIONS)
    return msgspec.convert(reply, ApprovalRecord)


def _decide_offline(
    data: Path | None,
    approval_id: str,
    decision: Verdict,
    scope: GrantScope,
    match: GrantMatch,
    prefix: str,
    reason: str,
) -> ApprovalRecord:
    """Decide as the invocation's actor would: its stream and ``approval/<id>`` folded with its
    own ``apply``, the decision checked and made by its own rules, then recorded as ``cli``."""
    from actors import UnknownApproval
    from actors.approvals.grants import check_decision
    from actors.invocations.decide import resolve
    from actors.invocations.state import InvocationState, apply, approval_stream
    from projections.approvals import load_approvals
    from transports.cli.data_dir import existing
    from transports.cli.offline import CLI_PRINCIPAL, commit, recorded

    data_dir = existing(data)
    with journal_writer(data_dir, "decide through its API", _DECISION_OPTIONS) as journal:
        record = load_approvals(journal).get(approval_id)
        if record is None:
            raise UnknownApproval(f"no approval with id {approval_id!r}")
        if record.subject == "pairing":
            raise CliError(
                f"approval {approval_id} is a pairing request: it is decided on a running node "
                "(start reel node, then reel approvals approve|deny)"
            )
        state = InvocationState(invocation_id=record.invocation_id)
        for rec in recorded(journal, state.stream, approval_stream(approval_id)):
            state = apply(state, rec)
        args_type, digest = _bound(data_dir, record, match)
        check_decision(args_type, decision, scope, match, prefix)
        event = resolve(
            state,
            approval_id=approval_id,
            decision=decision,
            scope=scope,
            decided_by=CLI_PRINCIPAL,
            reason=reason,
            grant_principal=record.principal,
            now_ms=time.time_ns() // 1_000_000,
            match=match,
            prefix=prefix,
            digest=digest,
        )
        # approval/<id> is new: a second decision is refused, never appended
        commit(
            journal,
            approval_stream(approval_id),
            0,
            [event],
            correlation_id=record.run_id,
            causation_id=record.run_id,
        )
    return msgspec.structs.replace(
        record,
        state="resolved",
        decision=event.decision,
        scope=event.scope,
        match=event.match,
        prefix=event.prefix or None,
        decided_by=CLI_PRINCIPAL,
    )


def _bound(data_dir: Path, record: ApprovalRecord, match: str) -> tuple[Any, bytes]:
    """The tool's arguments type and the call's arguments digest, for a binding to check and
    an ``exact`` grant to record (none for ``any``; a tool this node lacks: check_decision
    names it)."""
    from tools import InvalidArguments, UnknownTool
    from tools.subjects import arguments_digest

    if match == "any":
        return None, b""
    catalog = _catalog(data_dir)
    try:
        args_type = catalog.spec(record.tool).args_type
        return args_type, arguments_digest(catalog.validate(record.tool, record.arguments))
    except (UnknownTool, InvalidArguments):
        return None, b""


def _catalog(data_dir: Path) -> Any:
    from tools import build_catalog
    from transports.config import load_config

    return build_catalog(load_config(data_dir / "config.toml").tools_config(data_dir))


_GRANT_OPTIONS = {"principal": "--principal", "tool": "--tool"}


@app.command("revoke")
def revoke_cmd(
    principal: Annotated[str, typer.Option("--principal", help="Whose grant.")],
    tool: Annotated[str, typer.Option("--tool", help="Which tool.")],
    data: DataOption = None,
    token_file: TokenFileOption = None,
) -> None:
    """Revoke an always grant: the principal's next call of the tool asks again. Exit 1 when
    the principal holds no such grant."""
    node = online(data)
    if node is not None:
        body = {"principal": principal, "tool": tool}
        api(node, token_file, "POST", "/v1/grants/revoke", body, 200, _GRANT_OPTIONS)
    else:
        _revoke_offline(data, principal, tool)
    print(f"revoked: {principal} must be asked again for {tool}")


def _revoke_offline(data: Path | None, principal: str, tool: str) -> None:
    from actors.approvals.always_grants import GRANTS_STREAM, load, revoke
    from transports.cli.data_dir import existing
    from transports.cli.offline import commit

    with journal_writer(existing(data), "revoke through its API", _GRANT_OPTIONS) as journal:
        grants = load(journal)
        commit(journal, GRANTS_STREAM, grants.next_seq, [revoke(grants.active, principal, tool)])
