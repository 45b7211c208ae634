"""People on the real homeserver, as the Matrix tests drive them: a matrix-nio client per
person that creates rooms, invites, says things (with or without ``m.mentions``, in threads)
and waits for what others say. Nothing here is reel's code: what the bot receives and sends is
only ever seen through the homeserver."""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

from nio import (  # type: ignore[import-untyped]  # matrix-nio ships no type information
    AsyncClient,
    AsyncClientConfig,
    RoomCreateResponse,
    RoomSendResponse,
)

from tests.transports.channels_matrix.synapse import Homeserver

T = TypeVar("T")
WAIT_S = 20.0
"""The longest a test waits for one thing to happen (a message takes ~70 ms)."""


def unique(prefix: str) -> str:
    """A localpart no other test uses (the homeserver lives for a whole session)."""
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


async def settled(check: Callable[[], object], what: str, timeout: float = WAIT_S) -> None:
    """Wait (without blocking the loop) until ``check()`` holds; fail naming ``what``."""
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"never: {what}")
        await asyncio.sleep(0.02)


def run(coro: Any, timeout: float = 90.0) -> Any:
    """Run a test body with a bound: a hang fails, it never blocks the suite."""
    return asyncio.run(asyncio.wait_for(coro, timeout))


class Cable:
    """A TCP relay between the bot and the homeserver that a test can cut and mend: a lost
    connection as the bot meets it (open connections reset, new ones closed at once), while
    everyone else still reaches the homeserver."""

    def __init__(self, upstream_port: int) -> None:
        self.upstream_port = upstream_port
        self.port = 0
        self.connected = True
        self._loop = asyncio.new_event_loop()
        self._writers: set[asyncio.StreamWriter] = set()
        ready = threading.Event()
        threading.Thread(target=self._run, args=(ready,), daemon=True).start()
        assert ready.wait(10)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _run(self, ready: threading.Event) -> None:
        async def serve() -> None:
            server = await asyncio.start_server(self._relay, "127.0.0.1", 0)
            self.port = server.sockets[0].getsockname()[1]
            ready.set()

        self._loop.run_until_complete(serve())
        self._loop.run_forever()

    async def _relay(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if not self.connected:
            writer.close()
            return
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.upstream_port)
        self._writers.update((writer, up_writer))

        async def pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
            with contextlib.suppress(OSError):
                while data := await src.read(65536):
                    dst.write(data)
                    await dst.drain()
            dst.close()

        await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))
        self._writers.difference_update((writer, up_writer))

    def cut(self) -> None:
        def reset() -> None:
            self.connected = False
            for writer in list(self._writers):
                writer.transport.abort()

        self._loop.call_soon_threadsafe(reset)

    def mend(self) -> None:
        def restore() -> None:
            self.connected = True

        self._loop.call_soon_threadsafe(restore)

    def close(self) -> None:
        async def shutdown() -> None:
            self.connected = False
            for writer in list(self._writers):
                writer.transport.abort()
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

        asyncio.run_coroutine_threadsafe(shutdown(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
