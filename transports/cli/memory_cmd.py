"""``reel memory write | search | list | delete``: durable memory items (docs/memory.md).

While a node holds the data dir these commands ask its API (``/v1/memory``) with a token
(``--token-file``, ``REEL_TOKEN``, else the data dir's ``admin.token``), as the token's
principal. On a data dir no node holds they work on the files themselves, holding the journal's
writer lock so that no node starts meanwhile: a write or delete is appended to the journal as
principal ``cli`` (the person at the machine's console) through the same rules as the API
(:mod:`actors.memory.items`), and the views are brought up to the journal's head with the node's
embedder before anything is read, exactly as a node would on start. Offline, ``list`` shows
every item (whoever holds the data dir can read its journal anyway) and ``search`` searches as
``--principal`` (default ``cli``), with ``--session``'s items.

Bad input is one line naming the option, exit 2 (``--tag``: too many tags; ``TEXT``: over the
cap of 8,000 characters); deleting an item already deleted is exit 1, nothing changed.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any
from urllib.parse import quote, urlencode

import msgspec
import typer

from transports.cli.errors import CliError
from transports.cli.node_api import api
from transports.cli.node_api import online as _online
from transports.cli.offline import CLI_PRINCIPAL
from transports.cli.options import DataOption, JsonOption, TokenFileOption
from transports.cli.tokens_cmd import parse_duration

if TYPE_CHECKING:
    from projections import MemoryView

app = typer.Typer(help="Write, search, list and delete memory items.", no_args_is_help=True)
_json = msgspec.json.Encoder()

OPTION_OF = {
    "text": "TEXT",
    "tags": "--tag",
    "scope": "--scope",
    "session_id": "--session",
    "expires_at": "--expires",
    "reason": "--reason",
    "q": "QUERY",
    "k": "-k",
}
"""The CLI's name for each input the rules of :mod:`actors.memory.items` (or the API) name."""
_SHOWN = 100
"""How much of an item's text one line shows (--json has it whole)."""

SessionOption = Annotated[
    str | None,
    typer.Option("--session", help="The session of a session item / whose items to search too."),
]


def _api(
    data_dir: Path, token_file: Path | None, method: str, path: str, body: Any, ok: int
) -> Any:
    """The node's answer, or a :class:`CliError` naming the option the node refused."""
    return api(data_dir, token_file, method, path, body, ok, OPTION_OF)


# --- offline ---------------------------------------------------------------------------------


class _Offline:
    """A data dir no node holds: its journal, held for writing (or only its writer lock, to
    read), and its memory view, with the views brought up to the journal's head."""

    def __init__(self, journal: Any, data_dir: Path, view: MemoryView) -> None:
        self.journal = journal
        self.data_dir = data_dir
        self.view = view

    def catch_up(self) -> None:
        """What a node does on start: views.db follows the journal (with the node's embedder),
        so what this command appended is read back, and the node starts from the head."""
        from projections import Projector, all_projections

        projector = Projector(
            self.journal, self.data_dir / "views.db", all_projections(self.view.embedder)
        )
        try:
            projector.catch_up()
        finally:
            projector.close()


@contextmanager
def _offline(data: Path | None, *, write: bool) -> Iterator[_Offline]:
    """The data dir under the journal's writer lock (so no node starts meanwhile); a read
    finds the views caught up already, a write catches them up itself after appending."""
    from projections import MemoryView
    from transports.cli.data_dir import existing
    from transports.cli.replay_cmd import node_embedder

    data_dir = existing(data)
    embedder = node_embedder(data_dir)
    with _journal(data_dir, write=write) as journal:
        box = _Offline(journal, data_dir, MemoryView(data_dir / "views.db", embedder))
        try:
            if not write:
                box.catch_up()
            yield box
        finally:
            box.view.close()


@contextmanager
def _journal(data_dir: Path, *, write: bool) -> Iterator[Any]:
    """The journal to write (checked first: :mod:`transports.cli.offline`), or to read under
    its writer lock."""
    from events import JournalReader
    from events.errors import JournalLocked
    from events.sqlite.lock import WriterLock
    from transports.cli.data_dir import journal_path
    from transports.cli.offline import journal_writer

    if write:
        with journal_writer(data_dir, "use its API", OPTION_OF) as journal:
            yield journal
        return
    path = journal_path(data_dir)
    if not path.exists():
        raise CliError(f"no journal at {path}: nothing is remembered here yet")
    lock = WriterLock(path.with_name(path.name + ".lock"))
    try:
        lock.acquire(str(path))
    except JournalLocked as exc:
        raise CliError(f"{exc}: stop the node, or use its API") from exc
    try:
        reader = JournalReader.open(path)
        try:
            yield reader
        finally:
            reader.close()
    finally:
        lock.release()


# --- commands --------------------------------------------------------------------------------


@app.command("write")
def write_cmd(
    text: Annotated[str, typer.Argument(help="The fact to remember (at most 8,000 characters).")],
    tag: Annotated[
        list[str] | None,
        typer.Option("--tag", metavar="<tag>", help="A label (repeatable, 16 at most)."),
    ] = None,
    scope: Annotated[
        str,
        typer.Option(
            "--scope",
            help="Who is shown it: principal (yours, the default), session (with --session) "
            "or global.",
        ),
    ] = "principal",
    session: SessionOption = None,
    expires: Annotated[
        str | None, typer.Option("--expires", help="Forget it after: 90m, 12h, 30d, 2w.")
    ] = None,
    data: DataOption = None,
    json: JsonOption = False,
    token_file: TokenFileOption = None,
) -> None:
    """Remember a fact: later runs that it matches are shown it (docs/memory.md)."""
    from actors.memory.items import write_item

    tags = tag or []
    now_ms = int(time.time() * 1000)
    expires_at_ms = None if expires is None else now_ms + parse_duration(expires) * 1000
    node = _online(data)
    if node is not None:
        body: dict[str, Any] = {"text": text, "tags": tags, "scope": scope}
        if session is not None:
            body["session_id"] = session
        if expires_at_ms is not None:
            moment = datetime.fromtimestamp(expires_at_ms / 1000, UTC)
            body["expires_at"] = moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")
        made = _api(node, token_file, "POST", "/v1/memory", body, 201)
        item_id, item = made["id"], made.get("item")
    else:
        with _offline(data, write=True) as box:
            item_id, _ = write_item(
                box.journal,
                text,
                principal=CLI_PRINCIPAL,
                tags=tags,
                scope=scope,
                session_id=session,
                expires_at_ms=expires_at_ms,
                now_ms=now_ms,
            )
            box.catch_up()
            item = _builtins(box.view.get(item_id, include_deleted=True, include_expired=True))
    if json:
        print(_json.encode({"id": item_id, "item": item}).decode())
    else:
        print(f"remembered {item_id} (scope {scope})")


def _builtins(value: Any) -> Any:
    return None if value is None else msgspec.to_builtins(value)


@app.command("search")
def search_cmd(
    query: Annotated[str, typer.Argument(help="The words to look for.")],
    k: Annotated[int, typer.Option("-k", help="How many items at most (1-50).")] = 5,
    session: SessionOption = None,
    principal: Annotated[
        str | None,
        typer.Option(
            "--principal",
            help="Offline only: search as this principal (default cli); online the token's.",
        ),
    ] = None,
    data: DataOption = None,
    json: JsonOption = False,
    token_file: TokenFileOption = None,
) -> None:
    """The best items for QUERY, each with its scores (lexical, vector, recency, final)."""
    if not 1 <= k <= 50:
        raise typer.BadParameter("k must be from 1 to 50", param_hint="-k")
    node = _online(data)
    if node is not None:
        if principal is not None:
            raise typer.BadParameter(
                "a running node searches as the token's principal", param_hint="--principal"
            )
        params = {"q": query, "k": str(k)}
        if session is not None:
            params["session_id"] = session
        found = _api(node, token_file, "GET", f"/v1/memory?{urlencode(params)}", None, 200)
        hits: list[Any] = found["hits"]
    else:
        with _offline(data, write=False) as box:
            found_hits = box.view.search(
                query, k, principal=principal or CLI_PRINCIPAL, session_id=session
            )
        hits = [msgspec.to_builtins(h) for h in found_hits]
    if json:
        print(_json.encode({"query": query, "k": k, "hits": hits}).decode())
        return
    if not hits:
        print("no memory matches")
        return
    for hit in hits:
        item = hit["item"]
        print(
            f"{item['item_id']}  final={hit['final']:.2f} (lexical {hit['lexical']:.2f}, "
            f"vector {hit['vector']:.2f}, recency {hit['recency']:.2f})  [{item['scope']}] "
            f"{_short(item['text'])}"
        )


@app.command("list")
def list_cmd(
    data: DataOption = None, json: JsonOption = False, token_file: TokenFileOption = None
) -> None:
    """Every live item you may read (offline: every live item), in write order."""
    node = _online(data)
    items: list[Any] = []
    if node is not None:
        query: dict[str, str] = {"limit": "200"}
        while True:
            page = _api(node, token_file, "GET", f"/v1/memory?{urlencode(query)}", None, 200)
            items += page["items"]
            if page.get("next_after") is None:
                break
            query["after"] = page["next_after"]
    else:
        with _offline(data, write=False) as box:
            after: str | None = None
            while batch := box.view.items(everyone=True, after=after, limit=1000):
                items += [msgspec.to_builtins(i) for i in batch]
                after = batch[-1].item_id
    if json:
        print(_json.encode(items).decode())
        return
    if not items:
        print("no memory items")
        return
    for item in items:
        whose = item["principal"] or item["session_id"] or ""
        tags = f" #{' #'.join(item['tags'])}" if item["tags"] else ""
        print(f"{item['item_id']}  {item['scope']:<9} {whose:<26} {_short(item['text'])}{tags}")


@app.command("delete")
def delete_cmd(
    item_id: Annotated[str, typer.Argument(help="The item's id (from reel memory list).")],
    reason: Annotated[str, typer.Option("--reason", help="Recorded with the deletion.")] = "",
    data: DataOption = None,
    json: JsonOption = False,
    token_file: TokenFileOption = None,
) -> None:
    """Forget an item: no view shows it again (its written event stays in the journal)."""
    from actors.memory.items import delete_item

    node = _online(data)
    if node is not None:
        path = f"/v1/memory/{quote(item_id, safe='')}"
        if reason:
            path += f"?{urlencode({'reason': reason})}"
        item = _api(node, token_file, "DELETE", path, None, 200).get("item")
    else:
        with _offline(data, write=True) as box:
            delete_item(box.journal, item_id, principal=CLI_PRINCIPAL, reason=reason)
            box.catch_up()
            item = _builtins(box.view.get(item_id, include_deleted=True, include_expired=True))
    if json:
        print(_json.encode({"id": item_id, "item": item}).decode())
    else:
        print(f"forgot {item_id}")


def _short(text: str) -> str:
    line = " ".join(text.split())
    return line if len(line) <= _SHOWN else line[:_SHOWN] + "..."
