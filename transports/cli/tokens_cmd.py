"""``reel tokens create | list | revoke``: API tokens for named principals.

Tokens are events on ``token/<id>`` (see :mod:`transports.tokens`). On a data dir no node
holds, these commands append to the journal themselves (recorded as principal ``cli``, the
person at the machine's console). While a node runs they ask its API.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import msgspec
import typer

from transports.cli.errors import EXIT_NEGATIVE, CliError
from transports.cli.node_api import api as _api
from transports.cli.node_api import online as _online
from transports.cli.options import DataOption, JsonOption, TokenFileOption
from transports.tokens import TokenBook, TokenRecord

if TYPE_CHECKING:
    from events import Journal

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


class TokenView(msgspec.Struct, frozen=True, kw_only=True):
    """What ``list --json`` prints per token (never the token)."""

    id: str
    principal: str
    roles: tuple[str, ...]
    created: str
    expires: str | None
    revoked: str | None
    last_used: str | None
    """When it last authenticated a request, to the hour (None: never)."""
    note: str
    state: str


def _iso(ms: int | None) -> str | None:
    if ms is None:
        return None
    return datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec="seconds")


def view_of(record: TokenRecord, now_ms: int) -> TokenView:
    if record.revoked_at_ms is not None:
        state = "revoked"
    elif not record.active(now_ms):
        state = "expired"
    else:
        state = "active"
    return TokenView(
        id=record.token_id,
        principal=record.principal,
        roles=record.roles,
        created=_iso(record.created_at_ms) or "",
        expires=_iso(record.expires_at_ms),
        revoked=_iso(record.revoked_at_ms),
        last_used=_iso(record.last_used_ms),
        note=record.note,
        state=state,
    )


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
    from transports.tokens import TokenError, create_token, validate_roles

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
        _print_created(_view_from_api(made), made["token"], json)
        return
    with _offline(data) as (journal, book):
        try:
            token, record = create_token(
                journal,
                book,
                principal=principal,
                roles=role,
                created_by="cli",
                expires_at_ms=expires_at_ms,
                note=note,
            )
        except TokenError as exc:
            raise CliError(str(exc)) from exc
    _print_created(view_of(record, int(time.time() * 1000)), token, json)


def _print_created(view: TokenView, token: str, json: bool) -> None:
    if json:
        out = msgspec.structs.asdict(view) | {"token": token}
        print(_json.encode(out).decode())
        return
    print(f"token {view.id} for {view.principal} ({', '.join(view.roles)})")
    if view.expires:
        print(f"expires {view.expires}")
    print("store it now, it is not shown again:")
    print(token)


@app.command("list")
def list_cmd(
    data: DataOption = None, json: JsonOption = False, token_file: TokenFileOption = None
) -> None:
    """Every token: id, principal, roles, created, expires, last used (to the hour), state
    (never the token)."""
    from events import JournalReader
    from transports.cli.data_dir import journal_path, resolve
    from transports.tokens import load_tokens

    online = _online(data)
    if online is not None:
        listed = _api(online, token_file, "GET", "/v1/tokens", None, 200)["items"]
        views = [_view_from_api(t) for t in listed]
    else:
        reader = JournalReader.open(journal_path(resolve(data)))
        try:
            book = load_tokens(reader, admin_token="")
        finally:
            reader.close()
        now_ms = int(time.time() * 1000)
        views = [view_of(r, now_ms) for r in book.records()]
    if json:
        print(_json.encode(views).decode())
        return
    if not views:
        print("no tokens (the data dir's admin.token is the principal admin)")
        return
    for v in views:
        print(
            f"{v.id}  {v.state:<8} {v.principal:<24} {','.join(v.roles):<18} "
            f"created={v.created}  expires={v.expires or 'never'}  "
            f"last_used={v.last_used or 'never'}" + (f"  note={v.note}" if v.note else "")
        )


@app.command("revoke")
def revoke_cmd(
    token_id: Annotated[str, typer.Argument(help="The token's id (from reel tokens list).")],
    reason: Annotated[str, typer.Option("--reason", help="Recorded with the revocation.")] = "",
    data: DataOption = None,
    token_file: TokenFileOption = None,
) -> None:
    """Revoke a token: it stops working at once."""
    from transports.tokens import TokenAlreadyRevoked, UnknownToken, revoke_token

    online = _online(data)
    if online is not None:
        from transports.cli.node_api import call, error_message

        status, body = call(online, token_file, "DELETE", f"/v1/tokens/{token_id}")
        if status == 409:
            raise CliError(f"{error_message(body, status)}; nothing changed", EXIT_NEGATIVE)
        if status != 200:
            raise CliError(error_message(body, status))
        print(f"revoked token {token_id}")
        return
    with _offline(data) as (journal, book):
        try:
            revoke_token(journal, book, token_id, revoked_by="cli", reason=reason)
        except UnknownToken as exc:
            raise CliError(str(exc)) from exc
        except TokenAlreadyRevoked as exc:
            raise CliError(f"{exc}; nothing changed", EXIT_NEGATIVE) from exc
    print(f"revoked token {token_id}")


def _view_from_api(token: dict[str, Any]) -> TokenView:
    """A token as ``/v1/tokens`` describes it, for printing like an offline one."""
    return TokenView(
        id=token["id"],
        principal=token["principal"],
        roles=tuple(token["roles"]),
        created=_iso(token["created_at_ms"]) or "",
        expires=_iso(token["expires_at_ms"]),
        revoked=_iso(token.get("revoked_at_ms")),
        last_used=_iso(token.get("last_used_at_ms")),
        note=token["note"],
        state=token["state"],
    )


@contextmanager
def _offline(data: Path | None) -> Iterator[tuple[Journal, TokenBook]]:
    """The data dir's journal (its writer lock held) and its auth view."""
    from transports.cli.data_dir import existing
    from transports.cli.offline import journal_writer
    from transports.tokens import load_tokens

    with journal_writer(existing(data), "manage tokens through its API") as journal:
        yield journal, load_tokens(journal, admin_token="")
