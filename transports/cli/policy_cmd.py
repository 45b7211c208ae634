"""``reel policy check``: what the policy set decides for one request, exactly as the node
would decide it: a tool call (``--tool``) or an API action (``--action``)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import msgspec
import typer

from transports.cli.data_dir import resolve
from transports.cli.errors import CliError
from transports.cli.options import DataOption, JsonOption

if TYPE_CHECKING:
    from actors.approvals.gate import GateDecision
    from policies import Decision, PolicyEngine

app = typer.Typer(help="Inspect the policy set.", no_args_is_help=True)
_json = msgspec.json.Encoder()


@app.command("check")
def check_cmd(
    principal: Annotated[
        str, typer.Option("--principal", help="Who asks (e.g. user:alice, admin).")
    ],
    tool: Annotated[
        str | None, typer.Option("--tool", help="A tool call: the tool's catalog name.")
    ] = None,
    action: Annotated[
        str | None, typer.Option("--action", help="An API action (e.g. approval.resolve).")
    ] = None,
    role: Annotated[
        list[str] | None,
        typer.Option("--role", metavar="<role>", help="A role of the principal (repeatable)."),
    ] = None,
    resource: Annotated[
        str, typer.Option("--resource", help="The resource id of an API action.")
    ] = "local",
    context: Annotated[
        list[str] | None,
        typer.Option(
            "--context",
            metavar="<key=value>",
            help="KEY=VALUE of the action's context (repeatable).",
        ),
    ] = None,
    channel: Annotated[
        str | None, typer.Option("--channel", help="A tool call's channel, if any.")
    ] = None,
    data: DataOption = None,
    json: JsonOption = False,
) -> None:
    """Print the decision and the policy ids that decided it.

    Uses the data dir's operator policies and configured postures, as the node would. A tool
    call is asked with --tool (the run's principal calls it); an API action with --action,
    --role, --resource and one --context KEY=VALUE per key of the action's context
    (docs/policy.md lists them)."""
    from policies import ACTIONS, PolicyEngine
    from transports.access.tokens import is_request_principal

    if (tool is None) == (action is None):
        raise CliError("give exactly one of --tool (a tool call) or --action (an API action)")
    if not is_request_principal(principal):
        raise CliError(
            "--principal: not a principal a request can carry (it must be admin, "
            "user:NAME, service:NAME, agent:NAME or channel:<channel>:<sender>)"
        )
    data_dir = resolve(data)
    engine = PolicyEngine.load(data_dir / "policies")
    if action is not None:
        if action not in ACTIONS:
            raise CliError(f"--action: unknown action {action!r}; known: {', '.join(ACTIONS)}")
        decision: Decision | GateDecision = _api_decision(
            engine, principal, role or [], action, resource, context or []
        )
        posture: str | None = None
    else:
        assert tool is not None
        decision, posture = _tool_decision(engine, data_dir, principal, tool, channel)
    if json:
        out = msgspec.structs.asdict(decision)
        print(_json.encode(out).decode())
        return
    ids = ", ".join(decision.policy_ids) if decision.policy_ids else "(none: default deny)"
    print(f"decision: {decision.outcome}")
    if posture is not None:
        print(f"posture:  {posture}")
    print(f"policies: {ids}")
    print(f"reason:   {decision.reason}")


def _api_decision(
    engine: PolicyEngine,
    principal: str,
    roles: list[str],
    action: str,
    resource: str,
    pairs: list[str],
) -> Decision:
    from policies import ACTIONS, AccessRequest, PolicyRequestError
    from policies.access import SCOPES

    context: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise CliError(f"--context: {pair!r} is not KEY=VALUE")
        context[key] = value
    shape = SCOPES[ACTIONS[action].scope]
    missing = [name for name in shape if name not in context]
    extra = sorted(set(context) - set(shape))
    if missing or extra:  # all at once: one try tells what to add and what to drop
        problems = [f"missing {', '.join(missing)}"] if missing else []
        problems += [f"not part of {action}'s context: {', '.join(extra)}"] if extra else []
        takes = (
            f"{action}'s context is {', '.join(shape)}: one --context KEY=VALUE each"
            if shape
            else f"{action} takes no context"
        )
        raise CliError(f"--context: {'; '.join(problems)} ({takes})")
    try:
        return engine.authorize(
            AccessRequest(
                principal=principal,
                roles=tuple(sorted(set(roles))),
                action=action,
                resource_id=resource,
                context=context,
            )
        )
    except PolicyRequestError as exc:
        option = "context" if exc.field.startswith("context.") else exc.field
        option = {"roles": "role", "resource_id": "resource"}.get(option, option)
        raise CliError(f"--{option}: {exc}") from exc


def _tool_decision(
    engine: PolicyEngine, data_dir: Path, principal: str, tool: str, channel: str | None
) -> tuple[GateDecision, str]:
    from actors import ToolGate
    from tools import build_catalog
    from transports.config import load_config

    config = load_config(data_dir / "config.toml")
    catalog = build_catalog(config.tools_config(data_dir))
    if tool not in catalog:
        raise CliError(f"--tool: unknown tool {tool!r}; known: {', '.join(catalog.names())}")
    gate = ToolGate(engine, config.tools.postures)
    decision = gate.decide(
        catalog.spec(tool), principal=principal, session_id="", run_id="", channel=channel
    )
    return decision, decision.posture
