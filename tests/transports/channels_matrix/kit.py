"""People on the real homeserver, as the Matrix tests drive them: a matrix-nio client per
person that creates rooms, invites, says things (with or without ``m.mentions``, in threads)
and waits for what others say. Nothing here is reel's code: what the bot receives and sends is
only ever seen through the homeserver."""

from __future__ import annotations

import asyncio
import secrets
import time
from collections.abc import Callable
from typing import Any, TypeVar

from nio import AsyncClient, AsyncClientConfig, RoomCreateResponse, RoomSendResponse

from tests.transports.channels_matrix.synapse import Homeserver

T = TypeVar("T")
WAIT_S = 20.0
"""The longest a test waits for one thing to happen (a message takes ~70 ms)."""


def unique(prefix: str) -> str:
    """A localpart no other test uses (the homeserver lives for a whole module)."""
    return f"{prefix}_{secrets.token_hex(3)}"


class Person:
    """A Matrix user with a client that records every timeline event and membership it sees."""

    def __init__(self, homeserver: Homeserver, prefix: str) -> None:
        self.password = secrets.token_hex(12)
        self.user_id = homeserver.register(unique(prefix), self.password)
        self.client = AsyncClient(
            homeserver.base_url,
            self.user_id,
            config=AsyncClientConfig(max_limit_exceeded=0, max_timeouts=1),
        )
        self.events: dict[str, list[dict[str, Any]]] = {}
        """Room id -> the raw timeline events seen there, in order."""
        self.membership: dict[tuple[str, str], str] = {}
        """(room id, user id) -> the latest membership seen."""

    async def login(self) -> Person:
        response = await self.client.login(self.password)
        assert response.__class__.__name__ == "LoginResponse", response
        await self.client.sync(timeout=0)
        return self

    async def close(self) -> None:
        await self.client.logout()
        await self.client.close()

    async def __aenter__(self) -> Person:
        return await self.login()

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def sync(self, timeout_ms: int = 300) -> None:
        response = await self.client.sync(timeout=timeout_ms)
        rooms = getattr(response, "rooms", None)
        if rooms is None:
            return
        for room_id, info in rooms.join.items():
            for event in info.timeline.events:
                source = event.source
                self.events.setdefault(room_id, []).append(source)
                if source.get("type") == "m.room.member":
                    membership = source.get("content", {}).get("membership", "")
                    self.membership[(room_id, source.get("state_key", ""))] = membership

    async def until(self, check: Callable[[], T | None], what: str, timeout: float = WAIT_S) -> T:
        """Sync until ``check()`` gives something; fail naming ``what`` after ``timeout``."""
        deadline = time.monotonic() + timeout
        while True:
            found = check()
            if found:
                return found
            if time.monotonic() > deadline:
                raise AssertionError(f"{self.user_id} never saw {what}; saw {self.events}")
            await self.sync()

    async def room(self, invite: list[str], *, direct: bool = False) -> str:
        """A new private room with ``invite`` invited (as a direct chat when ``direct``)."""
        response = await self.client.room_create(invite=invite, is_direct=direct)
        assert isinstance(response, RoomCreateResponse), response
        return str(response.room_id)

    async def invite(self, room_id: str, user_id: str) -> None:
        await self.client.room_invite(room_id, user_id)

    async def joined(self, room_id: str, user_id: str) -> None:
        """Wait until ``user_id`` has joined ``room_id``."""
        await self.until(
            lambda: self.membership.get((room_id, user_id)) == "join", f"{user_id} join"
        )

    async def say(self, room_id: str, text: str, **content: Any) -> str:
        """Send an ``m.text`` (extra content keys as given: ``m.mentions``, ``m.relates_to``);
        the event id."""
        body = {"msgtype": "m.text", "body": text, **content}
        response = await self.client.room_send(room_id, "m.room.message", body)
        assert isinstance(response, RoomSendResponse), response
        return str(response.event_id)

    def said_by(self, room_id: str, user_id: str) -> list[dict[str, Any]]:
        """What ``user_id`` sent in ``room_id`` (messages and reactions), in order."""
        return [
            e
            for e in self.events.get(room_id, [])
            if e.get("sender") == user_id and e.get("type") in ("m.room.message", "m.reaction")
        ]

    def texts_from(self, room_id: str, user_id: str) -> list[str]:
        return [
            str(e["content"].get("body", ""))
            for e in self.said_by(room_id, user_id)
            if e.get("type") == "m.room.message"
        ]

    async def reply_containing(self, room_id: str, user_id: str, needle: str) -> dict[str, Any]:
        """The first message of ``user_id`` in ``room_id`` whose body holds ``needle``."""

        def found() -> dict[str, Any] | None:
            for event in self.said_by(room_id, user_id):
                if needle in str(event.get("content", {}).get("body", "")):
                    return event
            return None

        return await self.until(found, f"a message containing {needle!r} from {user_id}")


def run(coro: Any, timeout: float = 90.0) -> Any:
    """Run a test body with a bound: a hang fails, it never blocks the suite."""
    return asyncio.run(asyncio.wait_for(coro, timeout))
