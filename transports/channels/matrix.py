"""The Matrix connector (matrix-nio): a bot user that syncs with its homeserver.

``[channels.<name>] kind = "matrix"`` with ``homeserver``, ``user_id``, ``password_env`` or
``access_token_env`` (the names of environment variables: a secret is never in the config, the
journal or a log line) and ``allow_rooms``, plus the router keys every channel has
(docs/channels.md). This module logs in, syncs and sends; its parts are modules of their own:

- :mod:`~transports.channels.matrix_config`: the config's keys, checked, and the bot's login;
- :mod:`~transports.channels.matrix_events`: what the events mean (pure);
- :mod:`~transports.channels.matrix_rooms`: the rooms the bot is in, which are direct, invites;
- :mod:`~transports.channels.matrix_backfill`: what a room said that a sync did not show;
- :mod:`~transports.channels.matrix_answers`: the homeserver's answers and the waits.

Inbound. The connector logs in, syncs once with ``timeout=0`` (that sync's timelines are
history and never handed in; its account data, rooms and invites are read), then long-polls
``/sync`` from the token it got, or from its saved cursor when the node ran before. The cursor
(the sync token) is saved through the channel's actor (``channel.cursor_saved``) after a sync
whose messages were all handed to the hub, and at stop: a restarted node answers what was said
while it was stopped, and a crash before the save re-delivers at worst (dropped by the hub). Each
``m.room.message`` of another user becomes one :class:`InboundMessage`: the event id is the
message id (the hub's idempotency key), the room id the conversation, ``m.thread`` relations
the thread. Matrix does not say which rooms are direct: the connector tracks them itself, from
the ``is_direct`` flag of the invite it accepted and from its ``m.direct`` account data (which
it also updates, so a restart still knows). A message mentions the bot when ``m.mentions``
names it, or, in a message without ``m.mentions`` (older clients), when the body holds its
user id or its display name as a word. Invites are joined when ``allow_rooms`` names the room,
the inviter, or ``*``; any other invite is rejected. A room the bot has just joined is handed
in from the bot's invite on (what was said before is history).

Outbound. Replies are ``m.notice`` events (the spec's kind for automated messages, which no
bot answers, so two bots never loop), the first part a rich reply to the message answered and
every part in its thread when it came in one. A transaction id per part makes a retried send
land once. The acknowledgement is a reaction (``ack = "react"``) or a short notice.

Faults. nio is told never to sleep on a 429 or retry a lost connection by itself
(``max_limit_exceeded=0``, ``max_timeouts=0``): the connector does it, visibly (a warning line
and the counters in ``GET /v1/channels``). A rate-limited or failed send waits in its own task,
in order per room, so other rooms and the sync loop go on; it gives up after
:data:`~transports.channels.matrix_answers.GIVE_UP_S` (a failed delivery, recorded on
``channel.reply_sent``). A lost sync reconnects with exponential backoff and resumes from its
last token, so nothing is missed; a timeline the homeserver cut short (``limited``) is
backfilled up to that token; anything handed in twice is dropped by the hub (same message id).
The connector logs out on stop when it logged in with a password (an access token from the
environment is the operator's: it is left valid).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import uuid
from collections.abc import Callable, Coroutine, Mapping
from typing import Any, Final

from nio import (  # type: ignore[import-untyped]  # matrix-nio ships no type information
    AsyncClient,
    AsyncClientConfig,
    ErrorResponse,
    LoginResponse,
    ProfileGetDisplayNameResponse,
    SyncResponse,
    WhoamiResponse,
)

from actors.channels.config import ChannelConfig
from actors.channels.message import InboundMessage, InvalidMessage, OutboundMessage
from actors.log_fields import fields
from transports.channels.connector import Connector, ConnectorError, Inbound
from transports.channels.matrix_answers import (
    BACKOFF_MAX_S,
    LOST,
    CursorRefused,
    RateLimited,
    Refused,
    Retrying,
    Unavailable,
    backoff_s,
    describe,
    http_status,
    retry_after_s,
    source_of,
)
from transports.channels.matrix_backfill import backfill
from transports.channels.matrix_config import login_of
from transports.channels.matrix_events import inbound_of, new_since, outbound_content
from transports.channels.matrix_rooms import Rooms
from transports.config import ConfigError

log = logging.getLogger("reel.channels.matrix")

SYNC_TIMEOUT_MS: Final = 30_000
"""How long one long-poll ``/sync`` waits for news."""
SYNC_GRACE_S: Final = 15.0
"""How much longer than that the connector waits for the answer before calling it lost."""
START_TIMEOUT_S: Final = 10.0
"""How long :meth:`MatrixConnector.start` tries to log in and sync before it lets the node
start anyway (the sync loop goes on trying in the background)."""
REQUEST_TIMEOUT_S: Final = 30.0
TIMELINE_LIMIT: Final = 50
"""Events per room one sync returns; more is a ``limited`` timeline, backfilled."""
MAX_TEXT_CHARS: Final = 12_000
"""Reply parts are cut to at most this many characters whatever ``reply_max_chars`` says: an
event is at most 64 KiB, and 12,000 characters are at most 48 KB of UTF-8."""
DEVICE_NAME: Final = "reel"

_INITIAL_FILTER: Final = {"room": {"timeline": {"limit": 1}}, "presence": {"types": []}}
_FILTER: Final = {"room": {"timeline": {"limit": TIMELINE_LIMIT}}, "presence": {"types": []}}

# --- the connector -------------------------------------------------------------------------------


class MatrixConnector(Connector):
    kind = "matrix"

    def __init__(
        self, name: str, config: ChannelConfig, environ: Mapping[str, str] | None = None
    ) -> None:
        super().__init__(name, config, environ)
        login = login_of(config, os.environ if environ is None else environ)
        self._mode, self._secret_key, self._secret = login
        self.user_id = config.user_id
        self.since: str | None = None
        """The sync token the next ``/sync`` continues from (None: not synced yet)."""
        self.saved: str | None = None
        """The cursor last saved (or resumed from): the sync token a restart continues from."""
        self._save: Callable[[str], None] | None = None
        self._resumed_from: str | None = None
        """The saved cursor until a sync from it succeeds (a refusal of it is then final)."""
        self._fresh: str | None = None
        """The token of the first sync since start: where a refused saved cursor gives way."""
        self._primed = False
        """Whether the first sync (account data, rooms, invites) has been read since start."""
        self._handed = 0
        """Messages handed to the hub since the node started (a batch held some: save)."""
        self.connected = False
        self.reconnects = 0
        """Syncs that failed and were retried since the node started."""
        self._client: AsyncClient | None = None
        self._retrying = Retrying(name, lambda: self._client is not None)
        self.rooms = Rooms(name, self.user_id, config.allow_rooms, self._retrying)
        self._inbound: Inbound | None = None
        self._loop_task: asyncio.Task[None] | None = None
        self._stopping = False
        """Set by stop(): the sync loop ends at its next turn even if a cancel was lost."""
        self._tasks: set[asyncio.Task[Any]] = set()
        self._locks: dict[str, asyncio.Lock] = {}
        self._logged_in = False
        self._profile_name = ""
        self._encrypted_warned: set[str] = set()

    @property
    def rate_limited(self) -> int:
        """429 answers met since the node started (each waited out, then retried)."""
        return self._retrying.rate_limited

    @property
    def max_text_chars(self) -> int:
        return min(self.config.reply_max_chars, MAX_TEXT_CHARS)

    def resume(self, cursor: str | None, save: Callable[[str], None]) -> None:
        """Before :meth:`start`: continue from ``cursor`` (the sync token saved when the node
        last ran; None on the first start) and give each cursor to save to ``save`` (which
        records it on the channel's stream)."""
        self.since = self.saved = self._resumed_from = cursor
        self._save = save

    def _save_cursor(self) -> None:
        if self._save is not None and self.since is not None and self.since != self.saved:
            self._save(self.since)
            self.saved = self.since

    # --- life ------------------------------------------------------------------------------------

    async def start(self, inbound: Inbound) -> None:
        """Log in and sync once (both bounded by :data:`START_TIMEOUT_S`), then long-poll in
        the background. Credentials the homeserver refuses stop the node (a
        :class:`ConfigError` naming the key); an unreachable homeserver does not: the loop
        keeps trying, with backoff, and says so."""
        self._inbound = inbound
        self._primed = False
        self._stopping = False
        self._client = AsyncClient(
            self.config.homeserver,
            self.user_id,
            config=AsyncClientConfig(
                max_limit_exceeded=0, max_timeouts=0, request_timeout=REQUEST_TIMEOUT_S
            ),
        )
        try:
            await asyncio.wait_for(self._connect(), START_TIMEOUT_S)
        except Refused as exc:
            await self._close()
            raise ConfigError(
                f"config key channels.{self.name}.{self._secret_key}: the homeserver refused "
                f"the bot's credentials ({exc})"
            ) from None
        except (*LOST, Unavailable, RateLimited) as exc:
            log.warning(
                "matrix homeserver not reachable at start; retrying in the background",
                extra=fields(channel=self.name, error=describe(exc)),
            )
        self._loop_task = asyncio.create_task(self._sync_loop(), name=f"matrix:{self.name}")

    async def stop(self) -> None:
        """End the sync loop and pending work, log out (password logins only), close."""
        # The flag as well as the cancel: Python 3.11's wait_for (inside nio) can swallow a
        # cancellation that arrives as its request completes; the loop then ends next turn.
        self._stopping = True
        tasks = [t for t in (self._loop_task, *self._tasks) if t is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._loop_task = None
        self._save_cursor()  # ``since`` moves only once a sync's messages were all handed in
        client = self._client
        if client is not None and self._logged_in and self._mode == "password":
            with contextlib.suppress(*LOST, asyncio.TimeoutError):
                await asyncio.wait_for(client.logout(), 5)
        await self._close()

    async def _close(self) -> None:
        self.connected = False
        self._logged_in = False
        if self._client is not None:
            with contextlib.suppress(Exception):
                await self._client.close()
            self._client = None

    @property
    def client(self) -> AsyncClient:
        if self._client is None:
            raise ConnectorError("the matrix connector is not started")
        return self._client

    def describe(self) -> dict[str, Any]:
        return {
            "homeserver": self.config.homeserver,
            "user_id": self.user_id,
            self._secret_key: self.config.password_env or self.config.access_token_env,
            "connected": self.connected,
            "rooms": len(self.rooms.joined),
            "direct_rooms": len(self.rooms.direct & self.rooms.joined),
            "allow_rooms": len(self.config.allow_rooms),
            "rate_limited": self.rate_limited,
            "reconnects": self.reconnects,
            "refused_invites": self.rooms.refused_invites,
        }

    # --- logging in and syncing ------------------------------------------------------------------

    async def _connect(self) -> None:
        """Log in if not logged in, and do the first sync if not done (its timelines are
        history: only its account data, rooms and pending invites are read). Its token is
        kept unless the connector resumes from a saved cursor: then the long-poll starts from
        that cursor (an incremental sync does not repeat ``m.direct`` or the joined rooms,
        hence this first sync either way)."""
        client = self.client
        if not self._logged_in:
            await self._login(client)
        if not self._primed:
            response = await self._sync(client, 0, _INITIAL_FILTER, since=None)
            self.rooms.account_data(response)
            self.rooms.joined = set(response.rooms.join)
            for left in response.rooms.leave:
                self.rooms.joined.discard(left)
            self._invited(response)
            resumed = self.since is not None
            self._fresh = response.next_batch
            if not resumed:
                self.since = response.next_batch
            self._primed = True
            self.connected = True
            log.info(
                "matrix connected",
                extra=fields(
                    channel=self.name,
                    user_id=self.user_id,
                    rooms=len(self.rooms.joined),
                    resumed=resumed,
                ),
            )

    async def _login(self, client: AsyncClient) -> None:
        if self._mode == "password":
            response: Any = await client.login(self._secret, device_name=DEVICE_NAME)
            if not isinstance(response, LoginResponse):
                self._raise(response)
        else:
            client.access_token = self._secret
            response = await client.whoami()
            if not isinstance(response, WhoamiResponse):
                client.access_token = ""
                self._raise(response)
            if response.user_id != self.user_id:
                raise Refused(f"the access token belongs to {response.user_id}, not user_id")
            client.restore_login(self.user_id, response.device_id or "", self._secret)
        self._logged_in = True
        profile = await client.get_displayname(self.user_id)
        if isinstance(profile, ProfileGetDisplayNameResponse) and profile.displayname:
            self._profile_name = profile.displayname

    def _raise(self, response: object) -> None:
        """Turn a failed login or whoami into :class:`Refused` (a 4xx but 429: retrying the
        same credentials cannot help) or :class:`Unavailable`. Never quotes a secret: the
        homeserver's error code and message only."""
        status = http_status(response)
        wait = retry_after_s(response)
        if wait is not None:
            raise RateLimited(wait)
        if status is not None and 400 <= status < 500:
            raise Refused(describe(response))
        raise Unavailable(describe(response))

    async def _sync(
        self,
        client: AsyncClient,
        timeout_ms: int,
        sync_filter: Mapping[str, Any],
        *,
        since: str | None,
    ) -> SyncResponse:
        response = await asyncio.wait_for(
            client.sync(timeout=timeout_ms, sync_filter=dict(sync_filter), since=since),
            timeout_ms / 1000 + SYNC_GRACE_S,
        )
        if isinstance(response, SyncResponse):
            return response
        wait = retry_after_s(response)
        if wait is not None:
            raise RateLimited(wait)
        if isinstance(response, ErrorResponse) and response.status_code in (
            "M_UNKNOWN_TOKEN",
            "M_MISSING_TOKEN",
        ):
            self._logged_in = False
        else:
            status = http_status(response)
            if since is not None and since == self._resumed_from and 400 <= (status or 0) < 500:
                raise CursorRefused(describe(response))
        raise Unavailable(describe(response))

    async def _sync_loop(self) -> None:
        """Long-poll ``/sync`` until cancelled: each answer is handed in, then its token kept,
        and saved when the answer held messages (an empty poll saves nothing: no journal churn).
        Failures back off (doubling, capped) and say so; 429s wait what the homeserver asks."""
        failures = 0
        while not self._stopping:
            try:
                await self._connect()
                response = await self._sync(self.client, SYNC_TIMEOUT_MS, _FILTER, since=self.since)
            except asyncio.CancelledError:
                raise
            except CursorRefused as refused:
                log.warning(
                    "matrix saved cursor refused; catching up from each room's history",
                    extra=fields(channel=self.name, error=str(refused)),
                )
                self.since, self._resumed_from = self._fresh, None
                await self._catch_up()
                continue
            except RateLimited as limited:
                self._retrying.rate_limited += 1
                problem = f"rate-limited by the homeserver (429, {limited})"
                self._retrying.delayed("sync", "", problem, limited.after_s)
                await asyncio.sleep(limited.after_s)
                continue
            except (Refused, Unavailable, *LOST) as exc:
                failures += 1
                self.reconnects += 1
                self.connected = False
                delay = BACKOFF_MAX_S if isinstance(exc, Refused) else backoff_s(failures)
                log.warning(
                    "matrix sync failed; reconnecting",
                    extra=fields(
                        channel=self.name,
                        error=describe(exc),
                        attempt=failures,
                        retry_in_s=round(delay, 2),
                    ),
                )
                await asyncio.sleep(delay)
                continue
            if failures:
                log.info("matrix reconnected", extra=fields(channel=self.name, after=failures))
                failures = 0
            self.connected = True
            handed = self._handed
            try:
                await self._handle(response)
            except Exception:  # a bug here must not stop the channel: say so, go on
                log.exception("matrix sync answer not handled", extra=fields(channel=self.name))
            self.since = response.next_batch
            self._resumed_from = None  # the saved cursor was good
            if self._handed != handed:
                self._save_cursor()

    async def _catch_up(self) -> None:
        """Instead of a refused saved cursor: in each joined room, hand in again what was said
        after the bot's own last event (its last answer or its join), up to now. What the node
        handled before it stopped is dropped by the hub as a repeat (accepted and refused
        messages alike are keyed by their id); the rest is what was said while it was
        stopped."""
        fresh = self._fresh
        if fresh is None:
            return
        for room_id in sorted(self.rooms.joined):
            since_own = await backfill(
                self.client, self._retrying, room_id, fresh, None, user_id=self.user_id
            )
            for event in since_own:
                await self._room_event(room_id, event)
        self._save_cursor()

    # --- what a sync brings ----------------------------------------------------------------------

    def _invited(self, response: SyncResponse) -> None:
        """Answer each new invite in a task of its own (a rate-limited join must not hold up
        the sync loop)."""
        for invite in self.rooms.invited(response):
            self._spawn(self.rooms.answer(self.client, invite))

    async def _handle(self, response: SyncResponse) -> None:
        self.rooms.account_data(response)
        self._invited(response)
        for room_id, info in response.rooms.join.items():
            events = [source_of(event) for event in info.timeline.events]
            if room_id not in self.rooms.joined:
                events = events[new_since(events, self.user_id) :]
            elif info.timeline.limited and info.timeline.prev_batch and self.since:
                gap = await backfill(
                    self.client,
                    self._retrying,
                    room_id,
                    info.timeline.prev_batch,
                    self.since,
                    user_id=self.user_id,
                )
                events = gap + events
            self.rooms.joined.add(room_id)
            for event in events:
                await self._room_event(room_id, event)
        for room_id in response.rooms.leave:
            self.rooms.joined.discard(room_id)

    async def _room_event(self, room_id: str, event: Mapping[str, Any]) -> None:
        if event.get("type") == "m.room.encrypted":
            if room_id not in self._encrypted_warned:
                self._encrypted_warned.add(room_id)
                log.warning(
                    "matrix room is encrypted: reel cannot read it",
                    extra=fields(channel=self.name, room=room_id),
                )
            return
        room = self.client.rooms.get(room_id)
        names = [self._profile_name]
        sender_name = ""
        if room is not None:
            me = room.users.get(self.user_id)
            if me is not None and me.display_name:
                names.append(me.display_name)
            them = room.users.get(str(event.get("sender")))
            if them is not None and them.display_name:
                sender_name = them.display_name
        message = inbound_of(
            self.name,
            room_id,
            event,
            user_id=self.user_id,
            names=names,
            is_direct=room_id in self.rooms.direct,
            sender_name=sender_name,
        )
        if message is not None:
            await self._hand_in(message)

    async def _hand_in(self, message: InboundMessage) -> None:
        """Give the hub one message. Bad input (too long, say) is answered in the room when
        the message was meant for the bot; it is never retried, nor is anything the hub
        refuses (the hub records its own decisions)."""
        assert self._inbound is not None
        self._handed += 1
        try:
            await self._inbound(message)
        except InvalidMessage as exc:
            log.warning(
                "matrix message not accepted",
                extra=fields(
                    channel=self.name,
                    room=message.conversation,
                    event_id=message.message_id,
                    field=exc.field,
                    problem=exc.problem,
                ),
            )
            if message.is_direct or message.mentions_agent:
                notice = OutboundMessage(
                    channel=self.name,
                    conversation=message.conversation,
                    thread=message.thread,
                    text=f"Your message was not accepted: {exc}.",
                    in_reply_to=message.message_id,
                )
                self._spawn(self._send_quietly(notice))
        except Exception:
            log.exception(
                "matrix message not routed",
                extra=fields(
                    channel=self.name, room=message.conversation, event_id=message.message_id
                ),
            )

    # --- outbound --------------------------------------------------------------------------------

    async def send(self, message: OutboundMessage) -> None:
        await self._event(message.conversation, "m.room.message", outbound_content(message))

    async def acknowledge(self, message: InboundMessage, mode: str, text: str) -> None:
        if mode != "react":
            await super().acknowledge(message, mode, text)
            return
        reaction = {
            "m.relates_to": {
                "rel_type": "m.annotation",
                "event_id": message.message_id,
                "key": text,
            }
        }
        await self._event(message.conversation, "m.reaction", reaction)

    async def _event(self, room_id: str, event_type: str, content: dict[str, Any]) -> None:
        """Send one event, in order within its room; 429s and lost connections are waited out
        in this task only. The transaction id stays the same across retries, so the
        homeserver stores the event once however many times it was sent."""
        client = self.client
        tx_id = str(uuid.uuid4())
        lock = self._locks.setdefault(room_id, asyncio.Lock())
        async with lock:
            response = await self._retrying(
                "send",
                room_id,
                lambda: client.room_send(room_id, event_type, content, tx_id=tx_id),
            )
        if isinstance(response, ErrorResponse):
            raise ConnectorError(f"the homeserver refused the event: {describe(response)}")

    async def _send_quietly(self, message: OutboundMessage) -> None:
        try:
            await self.send(message)
        except ConnectorError as exc:
            log.warning("matrix notice not sent", extra=fields(channel=self.name, error=str(exc)))

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        async def logged() -> None:
            try:
                await coro
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("matrix work failed", extra=fields(channel=self.name))

        task = asyncio.get_running_loop().create_task(logged())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
