"""A token's last use: recorded as ``token.used`` by its principal at most hourly, shown by
``GET /v1/tokens`` and ``reel tokens list`` (online and offline), never for the admin token."""

from __future__ import annotations

import json
from pathlib import Path

from tests.transports.http.httpkit import close_node, eventually, open_node
from tests.transports.node.test_daemon import reel


def test_a_tokens_last_use_is_recorded_once_an_hour_and_listed(tmp_path: Path) -> None:
    node = open_node(tmp_path)
    try:
        made = node.call("POST", "/v1/tokens", {"principal": "user:ann", "roles": ["viewer"]})
        token_id, auth = made.json()["id"], f"Bearer {made.json()['token']}"
        assert made.json()["last_used_at_ms"] is None
        for _ in range(3):
            assert node.call("GET", "/v1/whoami", auth=auth).status == 200

        def listed() -> dict[str, object]:
            items = node.call("GET", "/v1/tokens").json()["items"]
            return next(t for t in items if t["id"] == token_id)

        assert eventually(lambda: listed()["last_used_at_ms"] is not None)
        uses = node.runtime.journal.read_stream(f"token-use/{token_id}")
        assert [(u.kind, u.principal) for u in uses] == [("token.used", "user:ann")]
        every_use = node.runtime.journal.events_of_kinds(("token.used",))
        assert len(every_use) == 1  # the admin token's requests are not recorded
    finally:
        close_node(node)
    offline = reel("tokens", "list", "--json", "--data", str(tmp_path))
    (entry,) = json.loads(offline.stdout)
    assert entry["last_used_at_ms"] is not None and entry["id"] == token_id
    text = reel("tokens", "list", "--data", str(tmp_path)).stdout
    assert "last_used=never" not in text and f"{token_id}  active" in text
    assert reel("journal", "verify", "--data", str(tmp_path)).returncode == 0
