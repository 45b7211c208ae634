"""``reel vault set | list | rotate | delete``: the secrets tool calls name by handle
(docs/vault.md).

A value is read from standard input (a prompt without echo on a terminal) or ``--file``, never
from the command line, where the shell's history and the process list would keep it. While a
node runs these commands ask its API (``vault.list`` / ``vault.manage``, admins by default); on
a data dir no node holds they open the vault and the journal themselves (as principal ``cli``).
"""

from __future__ import annotations

import sys
import urllib.parse
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import msgspec
import typer

from actors.vault.info import SecretInfo
from transports.cli.node_api import api as _api
from transports.cli.node_api import online as _online
from transports.cli.offline import CLI_PRINCIPAL
from transports.cli.options import DataOption, JsonOption, TokenFileOption

if TYPE_CHECKING:
    from actors.vault.store import Vault
    from events import Journal

app = typer.Typer(help="Set, list, rotate and delete vault secrets.", no_args_is_help=True)
_json = msgspec.json.Encoder()
_OPTIONS = {"name": "NAME", "value": "the value"}
"""The fields a refusal names, as this command line names them."""

NameArgument = Annotated[str, typer.Argument(help="The secret's name (what handles name).")]
FileOption = Annotated[
    Path | None,
    typer.Option("--file", help="Read the value from this file (default: standard input)."),
]
NoValueOnArgv = Annotated[
    str | None,
    typer.Argument(hidden=True, show_default=False, help="Refused: never pass a value here."),
]


def _value(file: Path | None, on_argv: str | None) -> str:
    """The value from ``--file`` or standard input (one trailing newline dropped, as
    ``echo`` and editors add it). A value on the command line is a usage error."""
    if on_argv is not None:
        raise typer.BadParameter(
            "a value is never taken on the command line (the shell history and the process "
            "list would keep it): pipe it on standard input or pass --file",
            param_hint="VALUE",
        )
    if file is not None:
        try:
            text = file.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            reason = getattr(exc, "strerror", None) or "not UTF-8 text"
            raise typer.BadParameter(f"cannot read {file}: {reason}", param_hint="--file") from None
    elif sys.stdin.isatty():
        import getpass

        text = getpass.getpass("value (not echoed): ")
    else:
        text = sys.stdin.read()
    return text.removesuffix("\n").removesuffix("\r")


def _checked(name: str, value: str | None = None) -> None:
    """The vault's own checks, as usage errors naming the argument (exit 2) before anything
    is opened or asked."""
    from actors.vault.decide import InvalidSecret, check_name, check_value

    try:
        check_name(name)
        if value is not None:
            check_value(value)
    except InvalidSecret as exc:
        hint = "NAME" if exc.field == "name" else "--file / standard input"
        raise typer.BadParameter(str(exc).partition(": ")[2], param_hint=hint) from None


def _iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec="seconds")


def _print(info: SecretInfo, json: bool, done: str) -> None:
    if json:
        print(_json.encode(info).decode())
    else:
        print(f"{done} secret {info.name} (revision {info.revision})")


@app.command("set")
def set_cmd(
    name: NameArgument,
    on_argv: NoValueOnArgv = None,
    file: FileOption = None,
    data: DataOption = None,
    json: JsonOption = False,
    token_file: TokenFileOption = None,
) -> None:
    """Set a new secret; its value from standard input or --file (never an argument)."""
    _checked(name)
    value = _value(file, on_argv)
    _checked(name, value)
    online = _online(data)
    if online is not None:
        body = {"name": name, "value": value}
        made = _api(online, token_file, "POST", "/v1/vault", body, 201, _OPTIONS)
        _print(msgspec.convert(made, SecretInfo), json, "set")
        return
    with _offline(data) as (journal, vault):
        info = vault.set(journal, name, value, by=CLI_PRINCIPAL)
    _print(info, json, "set")


@app.command("rotate")
def rotate_cmd(
    name: NameArgument,
    on_argv: NoValueOnArgv = None,
    file: FileOption = None,
    data: DataOption = None,
    json: JsonOption = False,
    token_file: TokenFileOption = None,
) -> None:
    """Give a secret its next value: the next tool call uses it, the old one stays redacted."""
    _checked(name)
    value = _value(file, on_argv)
    _checked(name, value)
    online = _online(data)
    if online is not None:
        path = f"/v1/vault/{urllib.parse.quote(name)}/rotate"
        made = _api(online, token_file, "POST", path, {"value": value}, 200, _OPTIONS)
        _print(msgspec.convert(made, SecretInfo), json, "rotated")
        return
    with _offline(data) as (journal, vault):
        info = vault.rotate(journal, name, value, by=CLI_PRINCIPAL)
    _print(info, json, "rotated")


@app.command("delete")
def delete_cmd(
    name: NameArgument,
    data: DataOption = None,
    json: JsonOption = False,
    token_file: TokenFileOption = None,
) -> None:
    """Delete a secret and erase its values: a handle naming it fails from then on."""
    _checked(name)
    online = _online(data)
    if online is not None:
        path = f"/v1/vault/{urllib.parse.quote(name)}"
        made = _api(online, token_file, "DELETE", path, None, 200, _OPTIONS)
        _print(msgspec.convert(made, SecretInfo), json, "deleted")
        return
    with _offline(data) as (journal, vault):
        info = vault.delete(journal, name, by=CLI_PRINCIPAL)
    _print(info, json, "deleted")


@app.command("list")
def list_cmd(
    data: DataOption = None, json: JsonOption = False, token_file: TokenFileOption = None
) -> None:
    """Every secret: name, revision, last change and by whom (never a value). With --json: the
    items of GET /v1/vault, in its shape."""
    online = _online(data)
    if online is not None:
        listed = _api(online, token_file, "GET", "/v1/vault", None, 200)["items"]
        infos = msgspec.convert(listed, list[SecretInfo])
    else:
        with _offline(data) as (_journal, vault):
            infos = vault.list()
    if json:
        print(_json.encode(infos).decode())
        return
    if not infos:
        print("no secrets (reel vault set NAME < value-file)")
        return
    for s in infos:
        print(
            f"{s.name:<32} revision={s.revision:<4} updated={_iso(s.updated_at_ms)} "
            f"by={s.updated_by}" + ("" if s.readable else "  UNREADABLE (wrong key file?)")
        )


@contextmanager
def _offline(data: Path | None) -> Iterator[tuple[Journal, Vault]]:
    """The data dir's journal (its writer lock held) and its vault, opened with the key file
    of the node's config."""
    from actors.vault.store import open_vault
    from transports.cli.data_dir import existing, node_config
    from transports.cli.offline import journal_writer
    from transports.config import load_config

    data_dir = existing(data)
    key_file = load_config(node_config(data_dir)).vault.key_file
    with journal_writer(data_dir, "manage the vault through its API", _OPTIONS) as journal:
        yield journal, open_vault(journal, data_dir, key_file)
