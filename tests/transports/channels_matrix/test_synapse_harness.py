"""The homeserver the Matrix tests use is real: users register, log in, DM each other."""

from __future__ import annotations

import asyncio

from nio import AsyncClient, AsyncClientConfig, RoomMessageText  # type: ignore[import-untyped]  # matrix-nio ships no type information

from tests.transports.channels_matrix.synapse import Homeserver


async def _dm(homeserver: Homeserver) -> str:
    alice_id = homeserver.register("harness_alice", "pw-alice-123")
    bob_id = homeserver.register("harness_bob", "pw-bob-123")
    config = AsyncClientConfig(max_limit_exceeded=0, max_timeouts=1)
    alice = AsyncClient(homeserver.base_url, alice_id, config=config)
    bob = AsyncClient(homeserver.base_url, bob_id, config=config)
    try:
        await alice.login("pw-alice-123")
        await bob.login("pw-bob-123")
        room = await alice.room_create(invite=[bob_id], is_direct=True)
        await bob.sync(timeout=0)
        await bob.join(room.room_id)
        await bob.sync(timeout=0)
        got: list[str] = []

        def on_message(_room: object, event: RoomMessageText) -> None:
            if event.sender == alice_id:
                got.append(event.body)

        bob.add_event_callback(on_message, RoomMessageText)
        await alice.room_send(
            room.room_id, "m.room.message", {"msgtype": "m.text", "body": "hello bob"}
        )
        for _ in range(20):
            await bob.sync(timeout=500)
            if got:
                break
        return got[0]
    finally:
        for client in (alice, bob):
            await client.logout()
            await client.close()


def test_a_direct_message_reaches_the_other_user(homeserver: Homeserver) -> None:
    assert asyncio.run(asyncio.wait_for(_dm(homeserver), 60)) == "hello bob"
