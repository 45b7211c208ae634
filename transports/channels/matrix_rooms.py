"""The rooms the Matrix bot is in, which of them are direct, and the invites that bring it in.

Matrix does not say which rooms are direct: the connector tracks them itself, from the
``is_direct`` flag of the invite it accepted and from its ``m.direct`` account data (which it
also updates, as Matrix clients do, so a restart still knows). Invites are joined when
``allow_rooms`` names the room, the inviter, or ``*``
(:func:`~transports.channels.matrix_events.allowed_invite`); any other invite is rejected.
Each invite is answered in a task of its own (a rate-limited join must not hold up the sync
loop), its requests retried through
:class:`~transports.channels.matrix_answers.Retrying`.

The connector (:mod:`transports.channels.matrix`) hands each sync answer's account data and
invites to :class:`Rooms`, keeps :attr:`Rooms.joined` as its syncs show the rooms, and asks
:attr:`Rooms.direct` whether a room's messages are direct.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from typing import NamedTuple
from urllib.parse import quote

from nio import (  # type: ignore[import-untyped]  # matrix-nio ships no type information
    AsyncClient,
    ErrorResponse,
    SyncResponse,
)

from actors.log_fields import fields
from transports.channels.connector import ConnectorError
from transports.channels.matrix_answers import LOST, Retrying, Unavailable, describe, source_of
from transports.channels.matrix_events import allowed_invite

log = logging.getLogger("reel.channels.matrix")  # the connector's one logger (matrix.py)


class Invite(NamedTuple):
    """An invite of the bot, as a sync answer shows it."""

    room_id: str
    inviter: str
    is_direct: bool


class Rooms:
    """One Matrix channel's rooms (see the module's docstring)."""

    def __init__(
        self, channel: str, user_id: str, allow_rooms: Sequence[str], retrying: Retrying
    ) -> None:
        self.channel = channel
        self.user_id = user_id
        self.allow_rooms = allow_rooms
        self._retrying = retrying
        self.joined: set[str] = set()
        """Rooms the bot is in, as its syncs have shown them."""
        self.direct: set[str] = set()
        """Direct rooms: from accepted ``is_direct`` invites and ``m.direct``."""
        self.refused_invites = 0
        self._direct_content: dict[str, list[str]] = {}
        """``m.direct`` as the bot last read or wrote it (user id -> room ids)."""
        self._invites: set[str] = set()
        """Invites being handled (a sync may show one again before the join lands)."""

    def account_data(self, response: SyncResponse) -> None:
        for event in response.account_data_events:
            if getattr(event, "type", None) == "m.direct":
                content = getattr(event, "content", None)
                if isinstance(content, dict):
                    self._direct_content = {
                        user: [r for r in rooms if isinstance(r, str)]
                        for user, rooms in content.items()
                        if isinstance(user, str) and isinstance(rooms, list)
                    }
                    for rooms in self._direct_content.values():
                        self.direct.update(rooms)

    def invited(self, response: SyncResponse) -> list[Invite]:
        """The sync answer's invites not being handled yet, each then handled until
        :meth:`answer` has answered it."""
        invites = []
        for room_id, info in response.rooms.invite.items():
            if room_id in self._invites:
                continue
            mine = [
                source
                for source in map(source_of, info.invite_state)
                if source.get("type") == "m.room.member" and source.get("state_key") == self.user_id
            ]
            if not mine:
                continue
            self._invites.add(room_id)
            invite = mine[-1]
            content = invite.get("content")
            is_direct = isinstance(content, dict) and content.get("is_direct") is True
            inviter = invite.get("sender")
            invites.append(Invite(room_id, str(inviter or ""), is_direct))
        return invites

    async def answer(self, client: AsyncClient, invite: Invite) -> None:
        """Join or reject ``invite`` as ``allow_rooms`` says (and remember a direct room)."""
        room_id, inviter, is_direct = invite
        try:
            if not allowed_invite(self.allow_rooms, room_id, inviter):
                self.refused_invites += 1
                log.info(
                    "matrix invite rejected: not on allow_rooms",
                    extra=fields(channel=self.channel, room=room_id, inviter=inviter),
                )
                await self._retrying("leave", room_id, lambda: client.room_leave(room_id))
                return
            if is_direct:
                self.direct.add(room_id)  # before the join: its first messages are direct
            response = await self._retrying("join", room_id, lambda: client.join(room_id))
            if isinstance(response, ErrorResponse):
                self.direct.discard(room_id)
                log.warning(
                    "matrix join failed",
                    extra=fields(channel=self.channel, room=room_id, error=describe(response)),
                )
                return
            log.info(
                "matrix invite accepted",
                extra=fields(
                    channel=self.channel, room=room_id, inviter=inviter, is_direct=is_direct
                ),
            )
            if is_direct and inviter:
                await self._remember_direct(client, room_id, inviter)
        except ConnectorError as exc:
            log.warning(
                "matrix invite not answered",
                extra=fields(channel=self.channel, room=room_id, error=str(exc)),
            )
        finally:
            self._invites.discard(room_id)

    async def _remember_direct(self, client: AsyncClient, room_id: str, inviter: str) -> None:
        """Add the room to the bot's ``m.direct`` account data, as Matrix clients do, so the
        next start (whose first sync reads it) still knows the room is direct."""
        rooms = self._direct_content.setdefault(inviter, [])
        if room_id in rooms:
            return
        rooms.append(room_id)
        path = f"/_matrix/client/v3/user/{quote(self.user_id, safe='')}/account_data/m.direct"
        body = json.dumps(self._direct_content)
        headers = {
            "Authorization": f"Bearer {client.access_token}",
            "Content-Type": "application/json",
        }
        try:
            response = await client.send("PUT", path, body, headers)
            await response.read()
            if response.status != 200:
                raise Unavailable(f"HTTP {response.status}")
        except (*LOST, Unavailable) as exc:
            log.warning(
                "matrix m.direct not saved; the room is direct until the node restarts",
                extra=fields(channel=self.channel, room=room_id, error=describe(exc)),
            )
