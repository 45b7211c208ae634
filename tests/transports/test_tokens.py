"""The auth view: minting, folding token events, and authentication without an oracle."""

from __future__ import annotations

import pytest

from actors.stream import Recorded
from events import new_id
from events.catalog import TokenRevoked, TokenUsed
from transports.access.tokens import (
    ADMIN_PRINCIPAL,
    USE_RECORDED_EVERY_MS,
    Credentials,
    TokenBook,
    TokenError,
    bearer,
    digest,
    mint,
)

ADMIN = "admin-token-text"


def book_with(*, expires_at_ms: int | None = None) -> tuple[TokenBook, str, str]:
    book = TokenBook(ADMIN)
    token_id = new_id()
    token, created = mint(
        "user:alice",
        ["approver", "viewer", "approver"],
        token_id=token_id,
        expires_at_ms=expires_at_ms,
    )
    book.fold(Recorded(created, "token/x", 1_000, "admin"))
    return book, token, token_id


def test_a_minted_token_authenticates_as_its_principal_and_roles() -> None:
    book, token, token_id = book_with()
    assert book.authenticate(token, 2_000) == Credentials(
        "user:alice", ("approver", "viewer"), token_id
    )
    assert book.authenticate(ADMIN, 2_000) == Credentials(ADMIN_PRINCIPAL, ("admin",), "admin")


def test_the_event_keeps_the_digest_never_the_token() -> None:
    token_id = new_id()
    token, created = mint("user:alice", ["viewer"], token_id=token_id)
    assert created.digest == digest(token)
    secret = token.removeprefix(f"reel_{token_id}_")
    assert len(secret) == 43 and secret not in repr(created)


def test_unknown_tampered_expired_and_revoked_tokens_are_refused_alike() -> None:
    book, token, token_id = book_with(expires_at_ms=5_000)
    other, _ = mint("user:bob", ["viewer"], token_id=new_id())  # never recorded
    tampered = token[:-1] + ("A" if token[-1] != "A" else "B")
    for refused in (other, tampered, "", "reel_", token + " ", "Bearer " + token, ADMIN + "x"):
        assert book.authenticate(refused, 2_000) is None, refused
    assert book.authenticate(token, 4_999) is not None
    assert book.authenticate(token, 5_000) is None  # expired
    book, token, token_id = book_with()
    book.fold(Recorded(TokenRevoked(token_id=token_id, reason="left"), "token/x", 3_000, "admin"))
    assert book.authenticate(token, 3_001) is None
    (record,) = book.records()
    assert record.revoked_at_ms == 3_000


def test_a_tokens_use_is_recorded_at_most_hourly_and_folded_as_last_used() -> None:
    book, token, token_id = book_with()
    who = book.authenticate(token, 2_000)
    assert who is not None
    assert book.use_to_record(who, 2_000) == TokenUsed(token_id=token_id)
    assert book.use_to_record(who, 2_001) is None  # asked for, not folded yet: not again
    book.fold(Recorded(TokenUsed(token_id=token_id), "token/x", 2_005, "admin"))
    assert book.records()[0].last_used_ms == 2_005
    assert book.use_to_record(who, 2_005 + USE_RECORDED_EVERY_MS - 1) is None
    assert book.use_to_record(who, 2_005 + USE_RECORDED_EVERY_MS) == TokenUsed(token_id=token_id)
    book.fold(
        Recorded(TokenUsed(token_id=token_id), "token/x", 1_500, "admin")
    )  # an older use never moves it back
    assert book.records()[0].last_used_ms == 2_005
    admin = book.authenticate(ADMIN, 2_000)
    assert admin is not None and book.use_to_record(admin, 2_000) is None


@pytest.mark.parametrize(
    ("principal", "roles", "field"),
    [
        ("alice", ["viewer"], "principal"),
        ("admin", ["viewer"], "principal"),
        ("channel:matrix:bob", ["viewer"], "principal"),
        ("user:Alice", ["viewer"], "principal"),
        ("user:" + "a" * 64, ["viewer"], "principal"),
        ("user:alice", ["root"], "role"),
        ("user:alice", [], "role"),
    ],
)
def test_bad_principals_and_roles_name_the_field(
    principal: str, roles: list[str], field: str
) -> None:
    with pytest.raises(TokenError) as caught:
        mint(principal, roles, token_id=new_id())
    assert caught.value.field == field


def test_bearer_parses_only_the_bearer_scheme() -> None:
    assert bearer("Bearer abc") == "abc"
    assert bearer("bearer  abc ") == "abc"
    assert bearer("Basic abc") is None
    assert bearer("Bearer ") is None
    assert bearer(None) is None
    assert bearer("Bearer \udcff\udcfe") is None  # bytes aiohttp could not decode
    assert bearer("Bearer reel_\u00e9") is None  # every token is ASCII


def test_a_request_value_cedar_cannot_hold_is_bad_input_on_both_transports() -> None:
    """A malformed Cedar context (a value from the request) is the caller's error: 400 naming
    the field / INVALID_ARGUMENT, never a 500."""
    from grpclib.const import Status

    from policies import PolicyRequestError
    from transports.grpc.status import to_grpc_error
    from transports.http.failures import to_api_error

    problem = PolicyRequestError("context.posture", "must be a string")
    answer = to_api_error(problem)
    assert (answer.status, answer.field) == (400, "$.posture")
    assert to_grpc_error(problem).status is Status.INVALID_ARGUMENT


def test_a_book_without_an_admin_token_never_takes_an_empty_token_for_it() -> None:
    """Offline commands fold tokens with no admin token: an empty bearer is nobody."""
    assert TokenBook("").authenticate("", 1) is None
