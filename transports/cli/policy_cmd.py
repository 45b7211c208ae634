"""``reel policy check``: what the policy set decides for a principal calling a tool."""

from __future__ import annotations

from typing import Annotated

import typer

from transports.cli.data_dir import resolve
from transports.cli.errors import CliError
from transports.cli.options import DataOption

app = typer.Typer(help="Inspect the policy set.", no_args_is_help=True)


@app.command("check")
def check_cmd(
    principal: Annotated[str, typer.Option("--principal", help="Who calls (e.g. operator).")],
    tool: Annotated[str, typer.Option("--tool", help="The tool's catalog name (e.g. shell.run).")],
    channel: Annotated[str | None, typer.Option("--channel", help="The channel, if any.")] = None,
    data: DataOption = None,
) -> None:
    """Print the decision for PRINCIPAL calling TOOL and the policy ids that decided it.

    Uses the data dir's operator policies and configured postures, as the node would."""
    from actors import ToolGate
    from policies import PolicyEngine
    from tools import build_catalog
    from transports.config import load_config

    data_dir = resolve(data)
    config = load_config(data_dir / "config.toml")
    catalog = build_catalog(config.tools_config(data_dir))
    if tool not in catalog:
        raise CliError(f"--tool: unknown tool {tool!r}; known: {', '.join(catalog.names())}")
    engine = PolicyEngine.load(data_dir / "policies")
    gate = ToolGate(engine, config.tools.postures)
    decision = gate.decide(
        catalog.spec(tool), principal=principal, session_id="", run_id="", channel=channel
    )
    ids = ", ".join(decision.policy_ids) if decision.policy_ids else "(none: default deny)"
    print(f"decision: {decision.outcome}")
    print(f"posture:  {decision.posture}")
    print(f"policies: {ids}")
    print(f"reason:   {decision.reason}")
