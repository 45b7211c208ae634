"""``reel tokens create | list | revoke``: API tokens for named principals.

Tokens are events on ``token/<id>`` (see :mod:`transports.access.tokens`). On a data dir no node
holds, these commands append to the journal themselves (recorded as principal ``cli``, the
person at the machine's console). While a node runs they ask its API.
"""

from __future__ import annotations

import re
import time
import urllib.parse
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import msgspec
import typer

from transports.access.token_info import CreatedToken, TokenInfo
from transports.cli.node_api import api as _api
from transports.cli.node_api import online as _online
from transports.cli.offline import CLI_PRINCIPAL
from transports.cli.options import DataOption, JsonOption, TokenFileOption

if TYPE_CHECKING:
    from events import Journal
    from transports.access.tokens import TokenBook

app = typer.Typer(help="Create, list and revoke API tokens.", no_args_is_help=True)
_json = msgspec.json.Encoder()

_DURATION = re.compile(r"(\d{1,6})([mhdw])")
_UNIT_S = {"m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def parse_duration(text: str) -> int:
    """``30d``, ``12h``, ``90m``, ``2w`` -> seconds; :class:`typer.BadParameter` otherwise."""
    match = _DURATION.fullmatch(text.strip())
    if match is None or int(match.group(1)) == 0:
        raise typer.BadParameter(
            f"{text!r} is not a duration like 90m, 12h, 30d or 2w", param_hint="--expires"
        )
    return int(match.group(1)) * _UNIT_S[match.group(2)]


def _iso(ms: int | None) -> str | None:
    if ms is None:
        return None
    return datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec="seconds")


@app.command("create")
def create_cmd(
    principal: Annotated[
        str, typer.Option("--principal", help="Who the token speaks for: user:NAME, ...")
    ],
    role: Annotated[
        list[str],
        typer.Option(
            "--role",
            metavar="<role>",
            help="admin, operator, approver, viewer or agent (repeatable).",
        ),
    ],
    expires: Annotated[
        str | None, typer.Option("--expires", help="Lifetime: 90m, 12h, 30d, 2w.")
    ] = None,
    note: Annotated[str, typer.Option("--note", help="Why the token exists.")] = "",
    data: DataOption = None,
    json: JsonOption = False,
    token_file: TokenFileOption = None,
) -> None:
    """Create a token and print it once (only its SHA-256 is kept)."""
    from transports.access.tokens import TokenError, create_token, created_token, validate_roles

    try:
        validate_roles(role)
    except TokenError as exc:
        raise typer.BadParameter(str(exc).partition(": ")[2], param_hint="--role") from None
    expires_in_s = None if expires is None else parse_duration(expires)
    expires_at_ms = None
    if expires_in_s is not None:
        expires_at_ms = int(time.time() * 1000) + expires_in_s * 1000
    online = _online(data)
    if online is not None:
        body: dict[str, object] = {"principal": principal, "roles": role, "note": note}
        if expires_in_s is not None:
            body["expires_in_s"] = expires_in_s
        made = _api(online, token_file, "POST", "/v1/tokens", body, 201)
        _print_created(msgspec.convert(made, CreatedToken), json)
        return
    with _offline(data) as (journal, book):
        token, record = create_token(
            journal,
            book,
            principal=principal,
            roles=role,
            created_by=CLI_PRINCIPAL,
            expires_at_ms=expires_at_ms,
            note=note,
        )
    _print_created(created_token(token, record, int(time.time() * 1000)), json)


def _print_created(made: CreatedToken, json: bool) -> None:
    """``--json``: the shape ``POST /v1/tokens`` answers (:class:`CreatedToken`)."""
    if json:
        print(_json.encode(made).decode())
        return
    print(f"token {made.id} for {made.principal} ({', '.join(made.roles)})")
    if made.expires_at_ms is not None:
        print(f"expires {_iso(made.expires_at_ms)}")
    print("store it now, it is not shown again:")
    print(made.token)


@app.command("list")
def list_cmd(
    data: DataOption = None, json: JsonOption = False, token_file: TokenFileOption = None
) -> None:
    """Every token: id, principal, roles, created, expires, last used (to the hour), state
    (never the token). With --json: the items of GET /v1/tokens, in its shape."""
    online = _online(data)
    if online is not None:
        listed = _api(online, token_file, "GET", "/v1/tokens", None, 200)["items"]
        infos = msgspec.convert(listed, list[TokenInfo])
    else:
        from events import JournalReader
        from transports.access.tokens import load_tokens, token_info
        from transports.cli.data_dir import journal_path, resolve

        reader = JournalReader.open(journal_path(resolve(data)))
        try:
            book = load_tokens(reader, admin_token="")
        finally:
            reader.close()
        now_ms = int(time.time() * 1000)
        infos = [token_info(r, now_ms) for r in book.records()]
    if json:
        print(_json.encode(infos).decode())
        return
    if not infos:
        print("no tokens (the data dir's admin.token is the principal admin)")
        return
    for t in infos:
        print(
            f"{t.id}  {t.state:<8} {t.principal:<24} {','.join(t.roles):<18} "
            f"created={_iso(t.created_at_ms)}  expires={_iso(t.expires_at_ms) or 'never'}  "
            f"last_used={_iso(t.last_used_at_ms) or 'never'}"
            + (f"  note={t.note}" if t.note else "")
        )


@app.command("revoke")
def revoke_cmd(
    token_id: Annotated[str, typer.Argument(help="The token's id (from reel tokens list).")],
    reason: Annotated[str, typer.Option("--reason", help="Recorded with the revocation.")] = "",
    data: DataOption = None,
    json: JsonOption = False,
    token_file: TokenFileOption = None,
) -> None:
    """Revoke a token: it stops working at once. With --json: the token as
    DELETE /v1/tokens/{id} answers it."""
    online = _online(data)
    if online is not None:
        query = f"?{urllib.parse.urlencode({'reason': reason})}" if reason else ""
        path = f"/v1/tokens/{token_id}{query}"
        revoked = msgspec.convert(_api(online, token_file, "DELETE", path, None, 200), TokenInfo)
    else:
        from transports.access.tokens import revoke_token, token_info

        with _offline(data) as (journal, book):
            record = revoke_token(journal, book, token_id, revoked_by=CLI_PRINCIPAL, reason=reason)
        revoked = token_info(record, int(time.time() * 1000))
    print(_json.encode(revoked).decode() if json else f"revoked token {revoked.id}")


@contextmanager
def _offline(data: Path | None) -> Iterator[tuple[Journal, TokenBook]]:
    """The data dir's journal (its writer lock held) and its auth view."""
    from transports.access.tokens import load_tokens
    from transports.cli.data_dir import existing
    from transports.cli.offline import journal_writer

    with journal_writer(existing(data), "manage tokens through its API") as journal:
        yield journal, load_tokens(journal, admin_token="")
