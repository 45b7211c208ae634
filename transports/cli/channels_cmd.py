"""``reel channels list | pair-code``: the node's chat channels (docs/channels.md).

Both ask the running node's HTTP API (a token from ``--token-file``, else ``REEL_TOKEN``, else
the data dir's admin.token): a pairing code lives in the channel's actor, which only a running
node has. ``list`` on a data dir no node holds shows the configured channels from config.toml.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any

import msgspec
import typer

from transports.cli.errors import CliError
from transports.cli.node_api import api, online
from transports.cli.options import DataOption, JsonOption, TokenFileOption

app = typer.Typer(help="Chat channels: list them, mint pairing codes.", no_args_is_help=True)
_json = msgspec.json.Encoder()


@app.command("list")
def list_cmd(
    data: DataOption = None, json: JsonOption = False, token_file: TokenFileOption = None
) -> None:
    """Each channel: kind, whether it is enabled, its direct-message and broadcast policies,
    session isolation, coalescing, and (from a running node) paired senders and pending
    pairing requests."""
    node = online(data)
    items = (
        api(node, token_file, "GET", "/v1/channels", None, 200)["items"]
        if node
        else _configured(data)
    )
    if json:
        print(_json.encode(items).decode())
        return
    if not items:
        print("no channels configured ([channels.<name>] in config.toml)")
        return
    for item in items:
        print(_line(item, live=node is not None))


def _line(item: dict[str, Any], live: bool) -> str:
    state = "enabled" if item["enabled"] else "disabled"
    mention = "required" if item["require_mention"] else "optional"
    isolate = "on" if item["isolate_session_by_sender"] else "off"
    line = (
        f"{item['name']}  {item['kind']}  {state}  dm={item['dm_policy']}  "
        f"group={item['group_policy']}  "
        f"broadcast={item['broadcast']}  mention={mention}  isolate={isolate}  "
        f"coalesce={item['coalesce_ms']}ms"
    )
    if live:
        line += f"  paired={item['paired']}  pending={item['pending_pairings']}"
    return line


def _configured(data: Path | None) -> list[dict[str, Any]]:
    """The channels config.toml declares (no node runs: nothing is paired or pending here)."""
    from transports.cli.data_dir import existing
    from transports.config import load_config

    data_dir = existing(data)
    config = load_config(data_dir / "config.toml")
    return [
        {
            "name": name,
            "kind": c.kind,
            "enabled": c.enabled,
            "dm_policy": c.dm_policy,
            "group_policy": c.groups,
            "broadcast": c.broadcast,
            "require_mention": c.require_mention,
            "isolate_session_by_sender": c.isolate_session_by_sender,
            "coalesce_ms": c.coalesce_ms,
        }
        for name, c in sorted(config.channels.items())
    ]


@app.command("pair-code")
def pair_code_cmd(
    channel: Annotated[str, typer.Option("--channel", help="The channel to pair with.")],
    ttl: Annotated[
        str | None,
        typer.Option(
            "--ttl",
            help="How long the code works: 30s to 24h (default: the channel's pairing_ttl).",
        ),
    ] = None,
    data: DataOption = None,
    json: JsonOption = False,
    token_file: TokenFileOption = None,
) -> None:
    """Mint a single-use pairing code. Give it to the person who will send "pair CODE" to
    the agent in a direct message; the request then waits for an approval
    (reel approvals list). The code is printed as the last word and never stored."""
    if ttl is not None:
        from actors.channels.config import PAIRING_TTL_RANGE_MS, duration_ms

        try:
            ttl_ms = duration_ms(ttl)
        except ValueError as exc:
            raise typer.BadParameter(str(exc), param_hint="--ttl") from None
        low, high = PAIRING_TTL_RANGE_MS
        if not low <= ttl_ms <= high:
            raise typer.BadParameter("must be between 30s and 24h", param_hint="--ttl")
    node = online(data)
    if node is None:
        raise CliError("no node holds the data dir: pairing codes are minted by a running node")
    body = {} if ttl is None else {"ttl": ttl}
    reply = api(node, token_file, "POST", f"/v1/channels/{channel}/pair-codes", body, 201)
    if json:
        print(_json.encode(reply).decode())
        return
    expires = datetime.fromtimestamp(reply["expires_at_ms"] / 1000, UTC)
    left = max(0, int(reply["expires_at_ms"] / 1000 - time.time()))
    print(
        f"pairing code for channel {reply['channel']} (single use, expires "
        f"{expires:%Y-%m-%d %H:%M:%S} UTC, in {left}s): {reply['code']}"
    )
