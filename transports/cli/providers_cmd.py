"""``reel providers list | test``: the model endpoints, their circuits, and a test of each
(docs/providers.md, "Failover").

With a node on the data dir both ask its API (``GET /v1/providers``, ``POST
/v1/providers/test``): the circuits live in the node, and its test uses the node's keys. With
none, ``list`` shows what the configuration declares and ``test`` builds the endpoints from it
itself (keys from the environment and the data dir's vault), recording nothing.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import msgspec
import typer

from transports.cli.errors import EXIT_NEGATIVE
from transports.cli.node_api import api, online
from transports.cli.options import DataOption, JsonOption, TokenFileOption
from transports.models.endpoints import Secrets
from transports.models.failover import FailoverProvider, ProbeResult

app = typer.Typer(
    help="Model endpoints: their circuit states, and a test of each.", no_args_is_help=True
)
_json = msgspec.json.Encoder()


@app.command("list")
def list_cmd(
    data: DataOption = None, json: JsonOption = False, token_file: TokenFileOption = None
) -> None:
    """Each endpoint: kind, model, circuit state (closed, open, half_open) and failures."""
    node = online(data)
    if node is not None:
        items: list[dict[str, Any]] = api(node, token_file, "GET", "/v1/providers", None, 200)[
            "items"
        ]
    else:
        provider = _offline(data)
        items = [
            {"name": e.name, "kind": e.config.kind, "model": e.config.model, "state": "no node"}
            for e in (provider.endpoints if provider is not None else [])
        ]
    if json:
        print(_json.encode(items).decode())
        return
    if not items:
        print("the deterministic provider alone: no endpoint to fail over ([[providers]])")
    for item in items:
        line = f"{item['name']}  {item['kind']}  {item['model'] or '-'}  {item['state']}"
        if item.get("consecutive_failures"):
            line += f"  failures={item['consecutive_failures']}"
        if item.get("retry_in_s"):
            line += f"  probe in {item['retry_in_s']:.0f} s"
        print(line)


@app.command("test")
def test_cmd(
    data: DataOption = None, json: JsonOption = False, token_file: TokenFileOption = None
) -> None:
    """Send one tiny request to each endpoint (no retry, no failover) and print its latency
    and the model that answered; exit 1 when one failed."""
    node = online(data)
    if node is not None:
        items: list[dict[str, Any]] = api(node, token_file, "POST", "/v1/providers/test", {}, 200)[
            "items"
        ]
    else:
        items = msgspec.to_builtins(_probe_all(data))
    if json:
        print(_json.encode(items).decode())
    else:
        if not items:
            print("the deterministic provider alone: no endpoint to test ([[providers]])")
        for item in items:
            outcome = "ok" if item["ok"] else f"FAILED: {item['error']}"
            print(
                f"{item['name']}  {item['kind']}  {item['latency_ms']:.0f} ms  "
                f"model {item['model']}  {outcome}"
            )
    if not all(item["ok"] for item in items):
        raise typer.Exit(EXIT_NEGATIVE)


def _offline(data: Path | None) -> FailoverProvider | None:
    """The failover provider the data dir's configuration describes, when no node runs (None:
    the deterministic provider alone)."""
    from transports.cli.data_dir import existing
    from transports.config import load_config
    from transports.models.endpoints import vault_names
    from transports.runtime import make_provider

    data_dir = existing(data)
    config = load_config(data_dir / "config.toml")
    secrets = _vault(data_dir, config.vault.key_file) if vault_names(config.providers) else None
    provider = make_provider(config, secrets)
    return provider if isinstance(provider, FailoverProvider) else None


def _vault(data_dir: Path, key_file: str) -> Secrets:
    """The data dir's vault lookup, read from the journal as it is (nothing is written)."""
    from actors.vault.store import open_vault
    from events import JournalReader
    from tools.handles import MissingSecret
    from transports.cli.data_dir import journal_path

    path = journal_path(data_dir)
    if not path.exists():

        def none(name: str) -> str:
            raise MissingSecret(name)

        return none
    reader = JournalReader.open(path)
    try:
        return open_vault(reader, data_dir, key_file).resolve
    finally:
        reader.close()


def _probe_all(data: Path | None) -> list[ProbeResult]:
    provider = _offline(data)
    if provider is None:
        return []

    async def main() -> list[ProbeResult]:
        try:
            return [await provider.probe(endpoint) for endpoint in provider.endpoints]
        finally:
            await provider.aclose()

    return asyncio.run(main())
