"""One token JSON shape on every surface: ``reel tokens create|list|revoke --json`` (through a
running node's API or on the journal of a stopped one) print a token exactly as ``POST``,
``GET`` and ``DELETE /v1/tokens`` answer it, and the token itself only where it is created."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from events.catalog import TokenRevoked
from events.sqlite.reader import JournalReader
from tests.processes import REEL
from tests.transports.cli.nodekit import api, reel, running_node
from transports.http.bodies import CreatedToken, TokenInfo

INFO_KEYS = set(TokenInfo.__struct_fields__)
CREATED_KEYS = set(CreatedToken.__struct_fields__)


def cli(data: Path, *args: str) -> Any:
    done = reel("tokens", *args, "--json", "--data", str(data))
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def listed(data: Path) -> list[dict[str, Any]]:
    status, body = api(data, "GET", "/v1/tokens")
    assert status == 200, body
    items: list[dict[str, Any]] = body["items"]
    return items


def without_token(made: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in made.items() if k != "token"}


def test_the_cli_and_the_api_show_a_token_with_the_same_keys_and_values(data_dir: Path) -> None:
    create = ("create", "--principal", "user:ann", "--role", "viewer", "--expires", "30d")
    offline_made = cli(data_dir, *create, "--note", "made offline")
    assert set(offline_made) == CREATED_KEYS
    with running_node([str(REEL), "node", "--data", str(data_dir)]):
        (seen,) = listed(data_dir)
        assert seen == without_token(offline_made)
        status, api_made = api(
            data_dir, "POST", "/v1/tokens", {"principal": "user:bob", "roles": ["approver"]}
        )
        assert status == 201, api_made
        cli_made = cli(data_dir, "create", "--principal", "user:cy", "--role", "operator")
        assert set(api_made) == set(cli_made) == CREATED_KEYS
        items = listed(data_dir)
        assert items == [without_token(m) for m in (offline_made, api_made, cli_made)]
        assert cli(data_dir, "list") == items
        status, api_revoked = api(data_dir, "DELETE", f"/v1/tokens/{api_made['id']}")
        assert status == 200, api_revoked
        cli_revoked = cli(data_dir, "revoke", cli_made["id"])
        items = listed(data_dir)
        assert [api_revoked, cli_revoked] == items[1:]
        assert {t["state"] for t in items[1:]} == {"revoked"}
    assert cli(data_dir, "list") == items  # offline: folded from the journal alone
    offline_revoked = cli(data_dir, "revoke", offline_made["id"])
    assert set(offline_revoked) == INFO_KEYS and offline_revoked["state"] == "revoked"
    assert cli(data_dir, "list") == [offline_revoked, *items[1:]]
    text = reel("tokens", "list", "--data", str(data_dir)).stdout
    for made in (offline_made, api_made, cli_made):  # the token only where it was made
        assert made["token"] not in text and made["id"] in text


def test_a_revocation_s_reason_is_recorded_through_a_running_node_too(data_dir: Path) -> None:
    """``reel tokens revoke --reason`` dropped the reason when a node ran (the API took none)."""
    with running_node([str(REEL), "node", "--data", str(data_dir)]):
        made = cli(data_dir, "create", "--principal", "user:dee", "--role", "viewer")
        cli(data_dir, "revoke", made["id"], "--reason", "left the team")
        status, body = api(data_dir, "DELETE", f"/v1/tokens/{made['id']}?reason=")
        assert status == 400 and body["error"]["field"] == "query.reason"
    reader = JournalReader.open(data_dir / "journal.db")
    try:
        (revoked,) = [s.decode() for s in reader.read(0, 10_000) if s.kind == "token.revoked"]
    finally:
        reader.close()
    assert isinstance(revoked, TokenRevoked) and revoked.reason == "left the team"
