"""``reel incidents list``: what the watchdog found (docs/operations.md, "Watchdog").

While a node holds the data dir this asks its HTTP API with a token (``--token-file``, else
``REEL_TOKEN``, else the data dir's admin.token), so Cedar decides whether the token's principal
may read incidents (``incident.read``). With no node running it folds the journal itself (a
stopped node's views may lag; the journal is the record).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated, Any
from urllib.parse import urlencode

import msgspec
import typer

from events.catalog import INCIDENT_DOMAINS
from projections.incidents import IncidentRecord
from transports.cli.errors import CliError
from transports.cli.node_api import api, online
from transports.cli.options import DataOption, JsonOption, TokenFileOption
from transports.cli.render import print_list

app = typer.Typer(help="What the node's watchdog found.", no_args_is_help=True)
_json = msgspec.json.Encoder()


@app.command("list")
def list_cmd(
    data: DataOption = None,
    all_: Annotated[bool, typer.Option("--all", help="Include resolved incidents.")] = False,
    domain: Annotated[
        str | None,
        typer.Option(
            "--domain", help=f"Only this domain: {', '.join(INCIDENT_DOMAINS)}.", show_default=False
        ),
    ] = None,
    json: JsonOption = False,
    token_file: TokenFileOption = None,
) -> None:
    """Open incidents (with --all, resolved ones too): domain, subject, since when, what was
    measured against which limit, and what auto mode did."""
    if domain is not None and domain not in INCIDENT_DOMAINS:
        raise CliError(f"--domain must be one of {', '.join(INCIDENT_DOMAINS)}, not {domain!r}")
    node = online(data)
    records = _listed(node, token_file, all_, domain) if node else _folded(data, all_, domain)
    print_list(records, _line, json=json, empty="no incidents" if all_ else "no open incidents")


def _listed(
    data_dir: Path, token_file: Path | None, all_: bool, domain: str | None
) -> list[IncidentRecord]:
    """Every matching incident, page by page, from the node's API."""
    query: dict[str, str] = {"limit": "200"}
    if not all_:
        query["state"] = "open"
    if domain is not None:
        query["domain"] = domain
    records: list[IncidentRecord] = []
    while True:
        page = api(data_dir, token_file, "GET", f"/v1/incidents?{urlencode(query)}", None, 200)
        records += msgspec.convert(page["items"], list[IncidentRecord])
        if page.get("next_after") is None:
            return records
        query["after"] = page["next_after"]


def _folded(data: Path | None, all_: bool, domain: str | None) -> list[IncidentRecord]:
    """Incidents folded from the journal itself (no node runs)."""
    from events import JournalReader
    from projections.incidents import load_incidents
    from transports.cli.data_dir import journal_path, resolve

    reader = JournalReader.open(journal_path(resolve(data)))
    try:
        records = load_incidents(reader).values()
    finally:
        reader.close()
    return [
        r for r in records if (all_ or r.state == "open") and (domain is None or r.domain == domain)
    ]


def _line(record: IncidentRecord) -> str:
    """``ID  DOMAIN SUBJECT  open for 12s  measure 12.3 s (limit 5 s)  ...``"""
    evidence = record.evidence
    measured = (
        f"{evidence.get('measure', '?')} {_number(evidence.get('value'))} "
        f"{evidence.get('unit', '')} (limit {_number(evidence.get('limit'))})"
    ).replace("  ", " ")
    if record.state == "open":
        age = int(time.time() - record.opened_at_ms / 1000)
        state = f"open for {age}s"
    else:
        took = int(((record.resolved_at_ms or record.opened_at_ms) - record.opened_at_ms) / 1000)
        state = f"resolved {record.how} after {took}s"
    line = f"{record.incident_id}  {record.domain} {record.subject}  {state}  {measured}"
    if record.action:
        line += f"  auto: {record.action}"
    detail = evidence.get("detail")
    if detail:
        line += f"\n    {detail}"
    return line


def _number(value: Any) -> str:
    return f"{value:g}" if isinstance(value, int | float) else str(value)
