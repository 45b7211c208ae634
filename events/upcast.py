"""Upcasters: small named functions turning an old payload (a plain dict) into the next version.

``UPCASTERS[(kind, v)]`` turns version ``v`` into ``v + 1``. Decoding applies them in a chain until
the payload reaches the catalog's current version; the stored bytes are never rewritten, so the
hash chain keeps covering exactly what was written.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from events.catalog import SessionCreated, kind_of

Payload = dict[str, Any]
Upcaster = Callable[[Payload], Payload]


def upcast_session_created_v1_v2(payload: Payload) -> Payload:
    """v1 named the optional unique key ``key``; v2 calls it ``session_key``."""
    out = dict(payload)
    if "key" in out:
        out["session_key"] = out.pop("key")
    return out


UPCASTERS: dict[tuple[str, int], Upcaster] = {
    (kind_of(SessionCreated), 1): upcast_session_created_v1_v2,
}
