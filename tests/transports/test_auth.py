"""The data dir's admin token: made once with a prefix redaction recognises, so the most
powerful secret a node has never reaches its journal in clear, whatever path it takes; a file
written before the prefix keeps working (and the node says it cannot be recognised)."""

from __future__ import annotations

import stat
from pathlib import Path

from events.redaction.redact import looks_secret
from tests.transports.http.httpkit import close_node, open_node
from transports.access.auth import (
    ADMIN_TOKEN_PREFIX,
    is_recognisable,
    load_or_create_token,
    token_path,
)

OLD = "Q2xk3m9Vb7Yp1Rr4Ss8Tt0Uu6Ww2Xx5Zz3Aa7Bb9Cc"
"""An admin token as reel wrote it before the prefix: 43 url-safe characters."""


def test_a_new_admin_token_is_prefixed_private_and_recognised(data_dir: Path) -> None:
    token = load_or_create_token(data_dir)
    assert token.startswith(ADMIN_TOKEN_PREFIX) and len(token) == len(ADMIN_TOKEN_PREFIX) + 43
    assert stat.S_IMODE(token_path(data_dir).stat().st_mode) == 0o600
    assert is_recognisable(token) and looks_secret(f"channel:hook:{token}")
    assert load_or_create_token(data_dir) == token  # made once


def test_an_admin_token_from_before_the_prefix_still_loads(data_dir: Path) -> None:
    token_path(data_dir).write_text(OLD + "\n")
    assert load_or_create_token(data_dir) == OLD
    assert not is_recognisable(OLD)


def test_the_admin_token_pasted_into_a_message_never_reaches_the_journal(data_dir: Path) -> None:
    node = open_node(data_dir)
    try:
        token = node.token
        assert is_recognisable(token)
        run_id = node.start(f"my admin token is {token} please keep it")
        node.finish(run_id)
        refused = node.call("POST", "/v1/sessions", {"session_key": token})
        assert (refused.status, refused.error["field"]) == (400, "$.session_key")
    finally:
        close_node(node)
    stored = b"".join(path.read_bytes() for path in data_dir.glob("*.db*") if path.is_file())
    assert token.encode() not in stored
    assert token[len(ADMIN_TOKEN_PREFIX) :].encode() not in stored
