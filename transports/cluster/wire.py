"""A forwarded command and its answer on the wire (msgpack), and the signature that proves
which node sent it.

A :class:`Forward` names the sending node and incarnation, when it was sent, a random nonce and
the command (its class name and its fields but the reply future), and is signed with the
sender's node key (Ed25519) over all of that. The receiver checks the signature against the key
the sender's live ``nodes`` row publishes (:class:`events.postgres.reader.Member`), the age, and
that the nonce is new (:mod:`.service`). Only the commands in :data:`FORWARDED` travel; a reply
or an error travels back as its class (from reel's own packages only) and its fields.
"""

from __future__ import annotations

import importlib
import os
import time
from typing import Any, TypeVar

import msgspec

from actors.channels.requests import CHANNEL_REQUESTS
from actors.messages import (
    CancelRun,
    CreateSession,
    ResolveApproval,
    ResolveSession,
    RevokeGrant,
    StallRun,
    StartRun,
)
from actors.system.directory import SESSION_COMMANDS
from events.checkpoint import NodeKey
from events.sqlite.journal import AppendRequest
from transports.cluster.errors import ForwardFailed

FORWARDED: dict[str, type[msgspec.Struct]] = {
    cls.__name__: cls
    for cls in (
        StartRun,
        CreateSession,
        ResolveSession,
        *SESSION_COMMANDS,
        CancelRun,
        StallRun,
        ResolveApproval,
        RevokeGrant,
        *CHANNEL_REQUESTS,
    )
}
"""The commands a node forwards: to a session's owner every command a transport sends, and
the watchdog's (which runs on one node of a cluster); to the node running a channel, the
channel's requests."""

LOCAL_FIELDS = frozenset({"reply", "then"})
"""Fields that never travel: the caller's reply future, and a follow-up only the directory sets."""

REEL_PACKAGES = ("actors.", "events.", "transports.cluster.", "transports.channels.")
"""Where a class named on the wire may come from: an answer never names another module."""


class Forward(msgspec.Struct, frozen=True, kw_only=True):
    """A command one node asks another to run."""

    node: str
    incarnation: int
    sent_at_ms: int
    nonce: bytes
    command: str
    fields: bytes
    signature: bytes = b""

    def signed_part(self) -> bytes:
        """What the signature covers: everything else."""
        return msgspec.msgpack.encode(msgspec.structs.replace(self, signature=b""))


APPEND = "append"
"""The :attr:`Forward.command` of an append to a stream whose shard the receiver holds."""


class ForwardedAppend(msgspec.Struct, frozen=True, kw_only=True):
    """An append the sender prepared (checked, redacted, encoded: :func:`events.sqlite.journal.
    prepare`), to a stream no session homes whose shard the receiver holds."""

    stream: str
    payloads: list[tuple[str, int, bytes]]
    expected_seq: int | None
    principal: str
    correlation_id: str | None
    causation_id: str | None
    idempotency_key: str | None

    @classmethod
    def of(cls, request: AppendRequest) -> ForwardedAppend:
        return cls(
            stream=request.stream,
            payloads=request.payloads,
            expected_seq=request.expected_seq,
            principal=request.principal,
            correlation_id=request.correlation_id,
            causation_id=request.causation_id,
            idempotency_key=request.idempotency_key,
        )

    def request(self) -> AppendRequest:
        """The append as the receiver's writer takes it."""
        return AppendRequest(
            self.stream,
            self.payloads,
            self.expected_seq,
            self.principal,
            self.correlation_id,
            self.causation_id,
            self.idempotency_key,
        )


class Answer(msgspec.Struct, frozen=True, kw_only=True):
    """What the command's reply was: a value or an error, and how far the owner's journal had
    committed when it answered (the caller waits for its own views to get there)."""

    position: int = 0
    value_type: str = ""
    """``none``, ``bool`` or a reel Struct's ``module:qualname``."""
    value: bytes = b""
    error: str = ""
    """An exception's ``module:qualname`` (empty: no error)."""
    error_args: list[Any] = []
    error_attrs: dict[str, Any] = {}


def _mirror(cls: type[msgspec.Struct]) -> type[msgspec.Struct]:
    fields: list[tuple[str, Any] | tuple[str, Any, Any]] = []
    for f in msgspec.structs.fields(cls):
        if f.name in LOCAL_FIELDS:
            continue
        if f.default is not msgspec.NODEFAULT:
            fields.append((f.name, f.type, f.default))
        elif f.default_factory is not msgspec.NODEFAULT:
            fields.append((f.name, f.type, msgspec.field(default_factory=f.default_factory)))
        else:
            fields.append((f.name, f.type))
    return msgspec.defstruct(
        f"Wire{cls.__name__}", fields, kw_only=True, forbid_unknown_fields=True
    )


_MIRRORS: dict[str, type[msgspec.Struct]] = {name: _mirror(cls) for name, cls in FORWARDED.items()}
"""Each forwarded command's fields but the local ones, typed: decoding validates them."""


def sign(
    key: NodeKey, node: str, incarnation: int, command: msgspec.Struct | ForwardedAppend
) -> Forward:
    """``command`` (one of :data:`FORWARDED`, or an append) as ``node`` sends it, signed with
    ``key``."""
    if isinstance(command, ForwardedAppend):
        name, fields = APPEND, msgspec.msgpack.encode(command)
    else:
        name = type(command).__name__
        if name not in FORWARDED:
            raise ValueError(f"{name} is not forwarded between nodes")
        if getattr(command, "then", None) is not None:
            raise ValueError("a command with a follow-up is not forwarded")
        fields = msgspec.msgpack.encode(
            {f: getattr(command, f) for f in command.__struct_fields__ if f not in LOCAL_FIELDS}
        )
    unsigned = Forward(
        node=node,
        incarnation=incarnation,
        sent_at_ms=time.time_ns() // 1_000_000,
        nonce=os.urandom(16),
        command=name,
        fields=fields,
    )
    return msgspec.structs.replace(unsigned, signature=key.sign_bytes(unsigned.signed_part()))


def command_of(forward: Forward) -> msgspec.Struct:
    """The command a (verified) forward carries; ``msgspec.ValidationError`` or ``KeyError``
    when it is not one of :data:`FORWARDED` (or an append) with valid fields."""
    if forward.command == APPEND:
        return msgspec.msgpack.decode(forward.fields, type=ForwardedAppend)
    mirror = msgspec.msgpack.decode(forward.fields, type=_MIRRORS[forward.command])
    return FORWARDED[forward.command](**msgspec.structs.asdict(mirror))


def answer_of(value: Any, position: int) -> Answer:
    """The answer for a command's reply ``value``."""
    if value is None:
        return Answer(position=position, value_type="none")
    if isinstance(value, bool):
        return Answer(position=position, value_type="bool", value=msgspec.msgpack.encode(value))
    cls = type(value)
    return Answer(
        position=position,
        value_type=f"{cls.__module__}:{cls.__qualname__}",
        value=msgspec.msgpack.encode(value),
    )


def failure_of(error: BaseException, position: int = 0) -> Answer:
    """The answer for a command that failed with ``error``."""
    cls = type(error)
    plain = (str, int, float, bool, type(None))
    return Answer(
        position=position,
        error=f"{cls.__module__}:{cls.__qualname__}",
        error_args=[a if isinstance(a, plain) else str(a) for a in error.args],
        error_attrs={k: v for k, v in vars(error).items() if isinstance(v, plain)},
    )


T = TypeVar("T")


def _reel_class(name: str, base: type[T]) -> type[T] | None:
    module, _, qualname = name.partition(":")
    if not module.startswith(REEL_PACKAGES) or not qualname.isidentifier():
        return None
    try:
        found = getattr(importlib.import_module(module), qualname, None)
    except ImportError:
        return None
    return found if isinstance(found, type) and issubclass(found, base) else None


def outcome(answer: Answer) -> Any:
    """The reply an answer carries, or raises the error it carries (as its own class, so the
    edge answers it as if the command had run here)."""
    if answer.error:
        cls = _reel_class(answer.error, Exception)
        if cls is None:
            raise ForwardFailed(
                f"the owner failed with an error of a kind unknown here: {answer.error}"
            )
        error = cls.__new__(cls)
        error.args = tuple(answer.error_args)
        error.__dict__.update(answer.error_attrs)
        raise error
    if answer.value_type == "none":
        return None
    if answer.value_type == "bool":
        return msgspec.msgpack.decode(answer.value, type=bool)
    struct = _reel_class(answer.value_type, msgspec.Struct)
    if struct is None:
        raise ForwardFailed(
            f"the owner answered a value of a kind unknown here: {answer.value_type}"
        )
    return msgspec.msgpack.decode(answer.value, type=struct)
