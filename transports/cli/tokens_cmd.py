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
from typing import TYPE_CHECKING, Annotated

import msgspec
import typer

from transports.cli.errors import EXIT_NEGATIVE, CliError
from transports.cli.options import DataOption, JsonOption
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
        typer.Option("--role", help="admin, operator, approver, viewer or agent (repeatable)."),
    ],
    expires: Annotated[
        str | None, typer.Option("--expires", help="Lifetime: 90m, 12h, 30d, 2w.")
    ] = None,
    note: Annotated[str, typer.Option("--note", help="Why the token exists.")] = "",
    data: DataOption = None,
    json: JsonOption = False,
) -> None:
    """Create a token and print it once (only its SHA-256 is kept)."""
    from transports.tokens import TokenError, create_token

    expires_at_ms = None
    if expires is not None:
        expires_at_ms = int(time.time() * 1000) + parse_duration(expires) * 1000
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
    view = view_of(record, int(time.time() * 1000))
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
def list_cmd(data: DataOption = None, json: JsonOption = False) -> None:
    """Every token: id, principal, roles, created, expires, state (never the token)."""
    from events import JournalReader
    from transports.cli.data_dir import journal_path, resolve
    from transports.tokens import load_tokens

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
            f"created={v.created}  expires={v.expires or 'never'}"
            + (f"  note={v.note}" if v.note else "")
        )


@app.command("revoke")
def revoke_cmd(
    token_id: Annotated[str, typer.Argument(help="The token's id (from reel tokens list).")],
    reason: Annotated[str, typer.Option("--reason", help="Recorded with the revocation.")] = "",
    data: DataOption = None,
) -> None:
    """Revoke a token: it stops working at once."""
    from transports.tokens import TokenAlreadyRevoked, UnknownToken, revoke_token

    with _offline(data) as (journal, book):
        try:
            revoke_token(journal, book, token_id, revoked_by="cli", reason=reason)
        except UnknownToken as exc:
            raise CliError(str(exc)) from exc
        except TokenAlreadyRevoked as exc:
            raise CliError(f"{exc}; nothing changed", EXIT_NEGATIVE) from exc
    print(f"revoked token {token_id}")


@contextmanager
def _offline(data: Path | None) -> Iterator[tuple[Journal, TokenBook]]:
    """The data dir's journal (its writer lock held) and its auth view."""
    from events import Journal, NodeKey
    from events.errors import JournalLocked
    from transports.cli.data_dir import existing, journal_path, node_key_path
    from transports.tokens import load_tokens

    data_dir = existing(data)
    try:
        journal = Journal(
            journal_path(data_dir), node_key=NodeKey.load_or_create(node_key_path(data_dir))
        )
    except JournalLocked as exc:
        raise CliError(f"{exc}: stop the node, or manage tokens through its API") from exc
    try:
        yield journal, load_tokens(journal, admin_token="")
    finally:
        journal.close()
