"""API tokens: who a bearer token speaks for, folded from ``token.*`` events (:class:`Tokens`,
an :class:`actors.aggregate.Aggregate` over every token's streams, held by a :class:`TokenBook`).

A token is ``reel_<token_id>_<secret>``: the id finds its record, the secret (256 random bits)
proves possession. The journal keeps the token's id, principal, roles, expiry and SHA-256
digest (``token.created``), its revocation (``token.revoked``) and, at most hourly, its use
(``token.used``), never the token, so the auth view is a fold like every other view. The node's
book follows the journal (:func:`follow_tokens`, :class:`actors.tail.Tail`): a token created or
revoked through any writer of the journal (another node, on PostgreSQL) is folded here once this
node's journal sees the commit, and a command of this node that appended one folds it before it
replies; nothing else changes the book (docs/scale-out.md, "Caches"). The data dir's
``admin.token`` stays outside the journal: it is the principal ``admin`` with the role
``admin``, so a fresh node is reachable with one file.

Authentication answers the same ``None`` for an unknown, malformed, expired or revoked token,
so a caller cannot tell which (no oracle); comparison is constant-time.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
import threading
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Literal

import msgspec

from events import AppendResult, JournalPort, JournalReadPort, new_id
from events.catalog import TOKEN_KINDS, TokenCreated, TokenRevoked, TokenUsed
from events.errors import ConcurrencyConflict
from events.fields import PRINCIPAL
from transports.access.token_info import CreatedToken, TokenInfo

if TYPE_CHECKING:
    from actors.stream import Recorded
    from actors.tail import Tail

ADMIN_PRINCIPAL = "admin"
"""The principal of the data dir's ``admin.token``."""

PRINCIPAL_PATTERN = re.compile(r"(?:user|service|agent):[a-z0-9][a-z0-9._@-]{0,62}")
"""What ``reel tokens create --principal`` accepts: a kind, a colon and a lowercase name
(``user:alice``, ``service:ci``, ``agent:support-bot``). ``admin`` and ``channel:...`` are
reserved for the admin token and chat connectors."""

_TOKEN = re.compile(r"reel_([0-9A-Z]{26})_([A-Za-z0-9_-]{43})")


USE_RECORDED_EVERY_MS = 3_600_000
"""A token's use is recorded (``token.used``) at most once an hour: "last used" to the hour."""


class TokenError(ValueError):
    """A token request is malformed; ``field`` names what is wrong."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field


class UnknownToken(LookupError):
    """No token has this id."""


class TokenAlreadyRevoked(Exception):
    """The token was revoked before; nothing changed."""


class Credentials(msgspec.Struct, frozen=True):
    """Who an authenticated request speaks for."""

    principal: str
    roles: tuple[str, ...]
    token_id: str
    """The token's id (``admin`` for the data dir's admin token)."""


class TokenRecord(msgspec.Struct, frozen=True, kw_only=True):
    """One token as the journal describes it (never the token itself)."""

    token_id: str
    principal: str
    roles: tuple[str, ...]
    digest: bytes
    created_at_ms: int
    expires_at_ms: int | None
    note: str
    revoked_at_ms: int | None = None
    last_used_ms: int | None = None
    """When a ``token.used`` last recorded it authenticating (to the hour; None: never)."""

    def active(self, now_ms: int) -> bool:
        return self.revoked_at_ms is None and (
            self.expires_at_ms is None or now_ms < self.expires_at_ms
        )


def token_info(record: TokenRecord, now_ms: int) -> TokenInfo:
    """``record`` as :class:`TokenInfo`, its state at ``now_ms``."""
    state: Literal["active", "expired", "revoked"] = (
        "revoked"
        if record.revoked_at_ms is not None
        else "active"
        if record.active(now_ms)
        else "expired"
    )
    return TokenInfo(
        id=record.token_id,
        principal=record.principal,
        roles=record.roles,
        created_at_ms=record.created_at_ms,
        expires_at_ms=record.expires_at_ms,
        revoked_at_ms=record.revoked_at_ms,
        last_used_at_ms=record.last_used_ms,
        note=record.note,
        state=state,
    )


def created_token(token: str, record: TokenRecord, now_ms: int) -> CreatedToken:
    """What creating ``record`` answers: its :class:`TokenInfo` and ``token``."""
    info = token_info(record, now_ms)
    return CreatedToken(**msgspec.structs.asdict(info), token=token)


def digest(token: str) -> bytes:
    """The SHA-256 of the token's text: what the journal keeps."""
    return hashlib.sha256(token.encode()).digest()


def validate_principal(principal: str) -> str:
    """``principal`` if it is one a token may carry, else :class:`TokenError`."""
    if not PRINCIPAL_PATTERN.fullmatch(principal):
        raise TokenError(
            "principal",
            f"{principal[:80]!r} is not a principal: use user:NAME, service:NAME or agent:NAME "
            "(lowercase letters, digits, . _ @ -)",
        )
    return principal


def is_request_principal(principal: str) -> bool:
    """Whether a request can carry ``principal``: the admin token's, a token's
    (:data:`PRINCIPAL_PATTERN`), or a chat sender's (``channel:<channel>:<sender>``, as the
    journal takes it)."""
    if principal == ADMIN_PRINCIPAL or PRINCIPAL_PATTERN.fullmatch(principal):
        return True
    from events.redaction.redact import looks_secret  # see validate_roles

    return principal.startswith("channel:") and PRINCIPAL.problem(principal, looks_secret) is None


def validate_roles(roles: Iterable[str]) -> tuple[str, ...]:
    """The roles, sorted and deduplicated, if each is a built-in role, else :class:`TokenError`."""
    # Imported here, not with the module: ``reel tokens list`` against a running node reads
    # this module's records only, and Cedar (policies) and the redaction's expressions cost it
    # a tenth of a second.
    from policies import ROLES

    out = tuple(sorted(set(roles)))
    if not out:
        raise TokenError("role", f"at least one role is required; roles: {', '.join(ROLES)}")
    for role in out:
        if role not in ROLES:
            raise TokenError("role", f"unknown role {role!r}; roles: {', '.join(ROLES)}")
    return out


def mint(
    principal: str,
    roles: Iterable[str],
    *,
    token_id: str,
    expires_at_ms: int | None = None,
    note: str = "",
) -> tuple[str, TokenCreated]:
    """A new token and the ``token.created`` event that records it (the token is returned
    once, to be shown once). ``token_id`` is a new ULID (the caller's id source)."""
    principal, checked_roles = validate_principal(principal), validate_roles(roles)
    token = f"reel_{token_id}_{secrets.token_urlsafe(32)}"
    if not _TOKEN.fullmatch(token):
        raise TokenError("token_id", f"{token_id!r} is not a ULID")
    created = TokenCreated(
        token_id=token_id,
        principal=principal,
        roles=checked_roles,
        digest=digest(token),
        expires_at_ms=expires_at_ms,
        note=note,
    )
    return token, created


class Tokens(msgspec.Struct, frozen=True):
    """Every token the journal describes, by id: the state of the auth view."""

    records: Mapping[str, TokenRecord] = msgspec.field(default_factory=dict)


def initial(first: Recorded) -> Tokens:
    """The tokens after ``first`` (every record starts the book, empty or not)."""
    return apply(Tokens(), first)


def apply(state: Tokens, rec: Recorded) -> Tokens:
    """``state`` after ``rec`` (records of other kinds change nothing; a new mapping is made
    for what changes, the state is never mutated)."""
    event, at_ms = rec.event, rec.at_ms
    record = state.records.get(getattr(event, "token_id", ""))
    if isinstance(event, TokenCreated):
        record = TokenRecord(
            token_id=event.token_id,
            principal=event.principal,
            roles=event.roles,
            digest=event.digest,
            created_at_ms=at_ms,
            expires_at_ms=event.expires_at_ms,
            note=event.note,
        )
    elif isinstance(event, TokenUsed) and record and (record.last_used_ms or 0) < at_ms:
        record = msgspec.structs.replace(record, last_used_ms=at_ms)
    elif isinstance(event, TokenRevoked) and record and record.revoked_at_ms is None:
        record = msgspec.structs.replace(record, revoked_at_ms=at_ms)
    else:
        return state
    return Tokens({**state.records, record.token_id: record})


class _Folded:
    """What books that share their records hold: the folded :class:`Tokens`, the uses asked
    for and not yet folded, and the lock over both."""

    def __init__(self, tokens: Tokens) -> None:
        self.tokens = tokens
        self.asked: dict[str, int] = {}
        """Token id -> when a ``token.used`` was last asked for (before it is folded)."""
        self.lock = threading.Lock()
        self.tail: Tail | None = None
        """What folds the journal's ``token.*`` records in (:func:`load_tokens`)."""


class TokenBook:
    """The auth view: the folded :class:`Tokens`, plus the admin token.

    Thread-safe: the transports authenticate from many threads while the book's tail folds
    new records in as the journal commits them (:meth:`fold`, :meth:`sync`)."""

    def __init__(self, admin_token: str, tokens: Tokens | None = None) -> None:
        self._admin = admin_token
        self._folded = _Folded(tokens or Tokens())

    def sharing(self, admin_token: str) -> TokenBook:
        """This book with another admin token: the same records (a token created or revoked
        through either is seen by both), for a server started with a token of its own."""
        if hmac.compare_digest(admin_token.encode(), self._admin.encode()):
            return self
        other = TokenBook(admin_token)
        other._folded = self._folded
        return other

    @property
    def tokens(self) -> Tokens:
        """The folded state now."""
        return self._folded.tokens

    def fold(self, rec: Recorded) -> None:
        """Fold one record into the book (:func:`apply`)."""
        with self._folded.lock:
            self._folded.tokens = apply(self._folded.tokens, rec)

    def sync(self) -> None:
        """Fold every ``token.*`` record the journal committed by now (a book made by
        :func:`load_tokens`; else nothing): what a command that appended one calls before it
        replies. Raises what reading the journal raises."""
        tail = self._folded.tail
        if tail is not None:
            tail.sync()

    def written(self, result: AppendResult, principal: str) -> None:
        """:meth:`sync`, with this node's own append ``result`` folded as written (by
        ``principal``); a book without a tail folds just that."""
        tail = self._folded.tail
        if tail is not None:
            tail.written(result, principal)
            return
        from actors.stream import Recorded  # here: the CLI reads this module without the actors

        for event in result.events:
            self.fold(Recorded(event, result.stream, result.recorded_at_ms, principal))

    def records(self) -> list[TokenRecord]:
        """Every token ever created, oldest first."""
        records = self.tokens.records.values()
        return sorted(records, key=lambda r: (r.created_at_ms, r.token_id))

    def get(self, token_id: str) -> TokenRecord | None:
        return self.tokens.records.get(token_id)

    def roles_of(self, principal: str, now_ms: int) -> tuple[str, ...]:
        """The roles ``principal`` holds now: those of its active tokens (``admin`` for the
        admin token's principal). Tool calls a run makes are decided with them, so a tool
        policy can say ``principal in Role::"operator"``."""
        roles: set[str] = {"admin"} if principal == ADMIN_PRINCIPAL and self._admin else set()
        for record in self.tokens.records.values():
            if record.principal == principal and record.active(now_ms):
                roles.update(record.roles)
        return tuple(sorted(roles))

    def use_to_record(self, credentials: Credentials, now_ms: int) -> TokenUsed | None:
        """The ``token.used`` to record for a request ``credentials`` authenticated at
        ``now_ms``: one when the token's last recorded use (or the last one this book asked
        for) is an hour old or more, else None (the admin token's uses are not recorded)."""
        folded = self._folded
        with folded.lock:
            record = folded.tokens.records.get(credentials.token_id)
            if record is None:
                return None
            last = max(record.last_used_ms or 0, folded.asked.get(record.token_id, 0))
            if last and now_ms - last < USE_RECORDED_EVERY_MS:
                return None
            folded.asked[record.token_id] = now_ms
        return TokenUsed(token_id=record.token_id)

    def authenticate(self, token: str, now_ms: int) -> Credentials | None:
        """Who ``token`` speaks for, or None (unknown, malformed, expired or revoked alike)."""
        if self._admin and hmac.compare_digest(token.encode(), self._admin.encode()):
            return Credentials(ADMIN_PRINCIPAL, ("admin",), "admin")
        match = _TOKEN.fullmatch(token)
        if match is None:
            return None
        record = self.get(match.group(1))
        if record is None or not hmac.compare_digest(digest(token), record.digest):
            return None
        if not record.active(now_ms):
            return None
        return Credentials(record.principal, record.roles, record.token_id)


def bearer(header: str | None) -> str | None:
    """The token of an ``Authorization: Bearer <token>`` header value, else None. Every token
    is ASCII: a value that is not (bytes HTTP/2 or aiohttp could not decode, passed on as
    surrogates or Latin-1) is no credential, so it is refused like a wrong one."""
    if not header or not header.isascii():
        return None
    scheme, _, value = header.strip().partition(" ")
    if scheme.lower() != "bearer" or not value.strip():
        return None
    return value.strip()


def token_stream(token_id: str) -> str:
    return f"token/{token_id}"


def use_stream(token_id: str) -> str:
    """Where a token's ``token.used`` events go: not its own stream, whose ``created`` and
    ``revoked`` are written with expected positions by the API that manages tokens."""
    return f"token-use/{token_id}"


def load_tokens(reader: JournalReadPort, admin_token: str) -> TokenBook:
    """The auth view folded from every ``token.*`` event of the journal; :meth:`TokenBook.sync`
    folds what ``reader`` committed since."""
    from actors.tail import Tail  # the fold's machinery, not what a client command needs

    book = TokenBook(admin_token)
    book._folded.tail = tail = Tail(reader, TOKEN_KINDS, book.fold, "token book")
    tail.sync()
    return book


def follow_tokens(journal: JournalPort, admin_token: str) -> TokenBook:
    """The node's auth view: :func:`load_tokens`, kept current as ``journal`` commits, whoever
    appends (until it closes)."""
    book = load_tokens(journal, admin_token)
    assert book._folded.tail is not None
    book._folded.tail.follow(journal)
    return book


def create_token(
    journal: JournalPort,
    book: TokenBook,
    *,
    principal: str,
    roles: Iterable[str],
    created_by: str,
    expires_at_ms: int | None = None,
    note: str = "",
) -> tuple[str, TokenRecord]:
    """Mint a token, append its ``token.created`` (by ``created_by``) and bring ``book`` up to
    date with the journal (:meth:`TokenBook.sync`: the record as stored, a secret in its note
    redacted); the token is returned once and stored nowhere."""
    token, created = mint(
        principal, roles, token_id=new_id(), expires_at_ms=expires_at_ms, note=note
    )
    from events.redaction.redact import redact_event  # see validate_roles

    stream, clean = token_stream(created.token_id), redact_event(created)
    book.written(journal.append(stream, [clean], expected_seq=0, principal=created_by), created_by)
    record = book.get(created.token_id)
    assert record is not None
    return token, record


def revocation(state: Tokens, token_id: str, reason: str) -> TokenRevoked:
    """``token.revoked`` for ``token_id``; raises :class:`UnknownToken` or
    :class:`TokenAlreadyRevoked` (nothing is appended then)."""
    record = state.records.get(token_id)
    if record is None:
        raise UnknownToken(f"no token with id {token_id!r}")
    if record.revoked_at_ms is not None:
        raise TokenAlreadyRevoked(f"token {token_id} is already revoked")
    return TokenRevoked(token_id=token_id, reason=reason)


def revoke_token(
    journal: JournalPort, book: TokenBook, token_id: str, *, revoked_by: str, reason: str = ""
) -> TokenRecord:
    """Append ``token.revoked`` (by ``revoked_by``) and bring ``book`` up to date with the
    journal: the token is refused on this node when this returns.

    Raises :class:`UnknownToken` or :class:`TokenAlreadyRevoked`."""
    from events.redaction.redact import redact_event  # see validate_roles

    book.sync()  # decided on what the journal holds now: another writer may have revoked it
    revoked = redact_event(revocation(book.tokens, token_id, reason))
    try:
        result = journal.append(
            token_stream(token_id), [revoked], expected_seq=1, principal=revoked_by
        )
    except ConcurrencyConflict as exc:
        raise TokenAlreadyRevoked(f"token {token_id} is already revoked") from exc
    book.written(result, revoked_by)
    updated = book.get(token_id)
    assert updated is not None
    return updated
