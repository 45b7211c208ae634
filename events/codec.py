"""Payload codec: events to msgpack and back through one tagged union, upcasting old versions.

The payload is the msgpack encoding of the event Struct, including its ``kind`` tag; the
envelope carries kind and version as columns too, so a reader can route without decoding.
"""

from __future__ import annotations

from typing import Any, Union

import msgspec

from events.catalog import BY_KIND, CATALOG, Event, kind_of
from events.errors import UnknownEventKind
from events.upcast import UPCASTERS

AnyEvent: Any = Union[tuple(CATALOG)]  # noqa: UP007 - a runtime union built from the catalog
"""The tagged union of every current event class (for msgspec decoding and schemas)."""

_encoder = msgspec.msgpack.Encoder()
_decoder: msgspec.msgpack.Decoder[Event] = msgspec.msgpack.Decoder(AnyEvent)
_raw_decoder = msgspec.msgpack.Decoder(dict[str, Any])


def encode(event: Event) -> bytes:
    """The payload bytes stored (and hashed) for ``event``."""
    return _encoder.encode(event)


def decode(kind: str, version: int, payload: bytes) -> Event:
    """Decode a stored payload to the current class for ``kind``, upcasting older versions.

    Raises :class:`UnknownEventKind` for a kind the catalog lacks, a version newer than the
    catalog's, a missing upcaster, or a payload that does not match its class.
    """
    cls = BY_KIND.get(kind)
    if cls is None:
        raise UnknownEventKind(f"unknown event kind {kind!r}")
    try:
        if version == cls.version:
            event = _decoder.decode(payload)
        elif version < cls.version:
            event = _upcast(kind, version, cls, _raw_decoder.decode(payload))
        else:
            raise UnknownEventKind(
                f"{kind} v{version} is newer than this reel understands (v{cls.version})"
            )
    except msgspec.ValidationError as exc:
        raise UnknownEventKind(f"{kind} v{version}: payload does not match: {exc}") from exc
    except msgspec.DecodeError as exc:
        raise UnknownEventKind(f"{kind} v{version}: payload is not msgpack: {exc}") from exc
    if kind_of(event) != kind:
        raise UnknownEventKind(f"payload is tagged {kind_of(event)!r} but envelope says {kind!r}")
    return event


def _upcast(kind: str, version: int, cls: type[Event], payload: dict[str, Any]) -> Event:
    while version < cls.version:
        step = UPCASTERS.get((kind, version))
        if step is None:
            raise UnknownEventKind(f"no upcaster for {kind} v{version} -> v{version + 1}")
        payload = step(payload)
        version += 1
    return msgspec.convert(payload, cls)
