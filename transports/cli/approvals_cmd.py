"""``reel approvals list | approve ID | deny ID`` on a data dir.

``list`` reads the journal (also while a node runs). ``approve``/``deny`` write the decision to
``approval/<approval_id>``, a stream only this command writes (the invocation's own stream
belongs to its tool actor), so they need the data dir's writer lock: they work when no node holds
it (a stopped or crashed node), and the next ``reel node`` folds the decision into the
invocation and resumes the run with it.
"""

from __future__ import annotations

import time
from typing import Annotated, Literal

import msgspec
import typer

from events import Journal, JournalReader, NodeKey
from events.catalog import ApprovalResolved, GrantRevoked
from projections.approvals import load_approvals
from projections.records import ApprovalRecord
from transports.cli.data_dir import existing, journal_path, node_key_path, resolve
from transports.cli.errors import EXIT_NEGATIVE, CliError
from transports.cli.options import DataOption, JsonOption

app = typer.Typer(help="List and decide tool-call approvals.", no_args_is_help=True)
_json = msgspec.json.Encoder()


@app.command("list")
def list_cmd(
    data: DataOption = None,
    all_: Annotated[bool, typer.Option("--all", help="Include resolved approvals.")] = False,
    json: JsonOption = False,
) -> None:
    """Pending approvals (with --all, resolved ones too)."""
    reader = JournalReader.open(journal_path(resolve(data)))
    try:
        views = [v for v in load_approvals(reader).values() if all_ or v.state == "pending"]
    finally:
        reader.close()
    if json:
        print(_json.encode(views).decode())
        return
    if not views:
        print("no pending approvals" if not all_ else "no approvals")
        return
    for view in views:
        print(_line(view))


def _line(view: ApprovalRecord) -> str:
    age = int(time.time() - view.requested_at_ms / 1000)
    state = view.state if view.state == "pending" else f"{view.decision} ({view.scope})"
    return (
        f"{view.approval_id}  {state:<16} {view.tool:<12} risk={view.risk:<8} run={view.run_id} "
        f"age={age}s  {view.reason}"
    )


def _decide(
    data: DataOption, approval_id: str, decision: Literal["allow", "deny"], scope: str, reason: str
) -> None:
    data_dir = existing(data)
    journal = Journal(
        journal_path(data_dir), node_key=NodeKey.load_or_create(node_key_path(data_dir))
    )
    try:
        view = load_approvals(journal).get(approval_id)
        if view is None:
            raise CliError(f"no approval with id {approval_id!r}")
        if view.state != "pending":
            raise CliError(
                f"approval {approval_id} is already resolved ({view.decision} by "
                f"{view.decided_by}); nothing changed",
                EXIT_NEGATIVE,
            )
        from actors.tool_fold import approval_stream

        stream = approval_stream(approval_id)
        journal.append(
            stream,
            [
                ApprovalResolved(
                    approval_id=approval_id,
                    invocation_id=view.invocation_id,
                    run_id=view.run_id,
                    decision=decision,
                    scope=scope if decision == "allow" else "once",  # type: ignore[arg-type]
                    decided_by="cli",
                    reason=reason,
                    tool=view.tool,
                    grant_principal=view.principal,
                    waited_ms=int(time.time() * 1000) - view.requested_at_ms,
                )
            ],
            expected_seq=0,  # a new stream: a second decision is refused, never appended
            principal="cli",
            correlation_id=view.run_id,
            causation_id=view.run_id,
        )
    finally:
        journal.close()
    print(f"approval {approval_id}: {decision}" + (f" ({scope})" if decision == "allow" else ""))
    print("the run continues when the node starts (reel node)")


Scope = Annotated[
    str,
    typer.Option("--scope", help="once, session (until the session resets) or always."),
]


@app.command("revoke")
def revoke_cmd(
    principal: Annotated[str, typer.Option("--principal", help="Whose grant.")],
    tool: Annotated[str, typer.Option("--tool", help="Which tool.")],
    data: DataOption = None,
) -> None:
    """Revoke an ``always`` grant (on a data dir no running node holds)."""
    from actors.directory import GRANTS_STREAM
    from actors.recovery import active_always_grants

    data_dir = existing(data)
    key = NodeKey.load_or_create(node_key_path(data_dir))
    journal = Journal(journal_path(data_dir), node_key=key)
    try:
        # Read before deciding: the append states what this command saw.
        next_seq = journal.stream_next_seq(GRANTS_STREAM)
        granted = active_always_grants(journal)
        if (principal, tool) not in granted:
            raise CliError(
                f"{principal} has no always grant for {tool}; nothing changed", EXIT_NEGATIVE
            )
        journal.append(
            GRANTS_STREAM,
            [GrantRevoked(principal=principal, tool=tool)],
            expected_seq=next_seq,
            principal="cli",
        )
    finally:
        journal.close()
    print(f"revoked: {principal} must be asked again for {tool}")


@app.command("approve")
def approve_cmd(
    approval_id: Annotated[str, typer.Argument(help="The approval id.")],
    scope: Scope = "once",
    data: DataOption = None,
) -> None:
    """Allow a pending approval (on a data dir no running node holds)."""
    if scope not in ("once", "session", "always"):
        raise typer.BadParameter("must be once, session or always", param_hint="--scope")
    _decide(data, approval_id, "allow", scope, "")


@app.command("deny")
def deny_cmd(
    approval_id: Annotated[str, typer.Argument(help="The approval id.")],
    reason: Annotated[str, typer.Option("--reason", help="Told to the model.")] = "",
    data: DataOption = None,
) -> None:
    """Deny a pending approval (on a data dir no running node holds)."""
    _decide(data, approval_id, "deny", "once", reason)
