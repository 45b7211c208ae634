"""``reel usage``: tokens, runs and cost by principal, session or model (docs/usage.md).

While a node holds the data dir this asks its HTTP API (``GET /v1/usage``) with a token
(``--token-file``, else ``REEL_TOKEN``, else the data dir's admin.token), so Cedar decides whose
usage the token's principal may read (``usage.read``). With no node running it runs the usage
view's own fold over the journal and prices it with the data dir's ``[usage.prices]``.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated
from urllib.parse import urlencode

import msgspec
import typer

from projections.usage import GROUPINGS, Grouping, TokenCounts, UsageReport, UsageRow, query_days
from transports.cli.errors import CliError
from transports.cli.node_api import api, online
from transports.cli.options import DataOption, JsonOption, TokenFileOption


def usage(
    data: DataOption = None,
    by: Annotated[
        str, typer.Option("--by", help=f"Group by {', '.join(GROUPINGS)}.")
    ] = "principal",
    from_: Annotated[
        str | None,
        typer.Option(
            "--from", help="First UTC day, YYYY-MM-DD (default: today).", show_default=False
        ),
    ] = None,
    to: Annotated[
        str | None,
        typer.Option("--to", help="Last UTC day, inclusive (default: today).", show_default=False),
    ] = None,
    json: JsonOption = False,
    token_file: TokenFileOption = None,
) -> None:
    """Tokens, turns and cost by principal, session or model over UTC days.

    Each row has the input, cached and output tokens, the provider turns and the cost by
    [usage.prices], then the total; a cost is "-" when a model of the row has no price."""
    if by not in GROUPINGS:
        raise CliError(f"--by must be one of {', '.join(GROUPINGS)}, not {by!r}")
    try:
        first, last = query_days(from_, to, time.time_ns() // 1_000_000)
    except ValueError as exc:
        field, problem = exc.args
        raise CliError(f"--{field}: {problem}") from None
    node = online(data)
    grouping: Grouping = by  # type: ignore[assignment]  # checked above
    if node is not None:
        query = urlencode({"by": by, "from": first, "to": last})
        body = api(node, token_file, "GET", f"/v1/usage?{query}", None, 200)
        result = msgspec.convert(body, UsageReport)
    else:
        result = _folded(data, grouping, first, last)
    if json:
        print(msgspec.json.encode(result).decode())
        return
    print(f"usage by {result.by}, {result.from_day} to {result.to_day} (UTC)")
    for row in (*result.rows, result.total):
        print(_line(row))
    if not result.rows:
        print("no usage recorded in these days")


def _folded(data: Path | None, by: Grouping, first: str, last: str) -> UsageReport:
    """The report from the journal itself (no node runs): the view's fold, in memory."""
    from events import JournalReader
    from projections.usage import load_usage, report
    from transports.cli.data_dir import journal_path, node_config, resolve
    from transports.config import load_config

    data_dir = resolve(data)
    prices = load_config(node_config(data_dir)).usage.prices
    path = journal_path(data_dir)
    rows: list[tuple[str, str, str, str, TokenCounts]] = []
    if path.exists():  # a fresh data dir has no journal yet: no usage
        reader = JournalReader.open(path)
        try:
            rows = list(load_usage(reader))
        finally:
            reader.close()
    cells = [
        (principal, {"principal": principal, "session": session, "model": model}[by], model, t)
        for day, principal, session, model, t in rows
        if first <= day <= last
    ]
    return report(by, first, last, cells, prices)


def _line(row: UsageRow) -> str:
    """``KEY  tokens 1200 (in 1000, cached 200, out 200)  3 turns  cost 0.0042``"""
    cost = "-" if row.cost is None else f"{row.cost:.6g}"
    line = (
        f"{row.key}  tokens {row.tokens} (in {row.input_tokens}, cached {row.cached_tokens}, "
        f"out {row.output_tokens})  {row.turns} turns  cost {cost}"
    )
    if row.unpriced:
        line += f"  (no price: {', '.join(row.unpriced)})"
    return line
