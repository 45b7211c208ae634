"""ChannelHub: the node's channels, their connectors and actors, and the one inbound entry point.

- :meth:`ChannelHub.receive` (and its awaitable form :meth:`ChannelHub.route`) is where every
  inbound message enters, whatever brought it: a connector's sync loop, the webhook route,
  ``POST /v1/channels/{channel}/messages`` or gRPC ``RouteMessage``. It checks the message
  (:func:`~actors.channels.message.check_inbound`: bad input is an error naming the
  field, never a decision) and hands it to the channel's :class:`ChannelActor`, which decides
  and records.
- Outbound work runs on the node's asyncio loop: following an accepted run's tape (an
  acknowledgement while it runs, a prompt when it waits for an approval, the answer split to
  the platform's limit when it ends), ``!reel`` commands (each a Cedar decision for the
  sender), and notices (pairing). Outcomes go back to the actor to be recorded.
- In a cluster each channel runs on one node at a time, the holder of its singleton lease
  (docs/scale-out.md, "Chat channels"): :meth:`ChannelHub.start_channel` when the node takes the
  lease (the actor folds the stream and carries out the backlog, the connector resumes from the
  saved cursor), :meth:`ChannelHub.stop_channel` when it loses it. A message or a pairing code
  asked of any other node goes to that one (:attr:`ChannelHub.elsewhere`, the cluster's router,
  with a request of :mod:`actors.channels.requests`).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import Future
from pathlib import Path
from typing import Any, Protocol, TypeVar, runtime_checkable

import msgspec
import pykka

from actors import Node
from actors.channels.actor import ChannelActor, state_of
from actors.channels.config import ChannelConfig
from actors.channels.message import InboundMessage, OutboundMessage, check_inbound, split_text
from actors.channels.messages import Deliver, MintCode, Record, ResumeChannel
from actors.channels.records import record_command, record_reply, stream_of
from actors.channels.requests import MintPairCode, RouteInbound, channel_of
from actors.channels.results import MintedCode, RouteResult
from actors.channels.router import Command
from events import JournalPort
from events.catalog import ApprovalRequested, ChannelCursorSaved, ChannelRunStarted, kind_of
from events.errors import ShardNotOwned
from projections import Projector, Views
from projections.follow import Signal, follow_tape
from projections.pool import ReaderLimits
from projections.records import ApprovalRecord
from transports.access.authority import Authority
from transports.access.tokens import Credentials
from transports.channels import commands
from transports.channels.configured import ChannelInfo, UnknownChannel
from transports.channels.connector import CONNECTORS, Connector, ConnectorError
from transports.config import ConfigError

log = logging.getLogger("reel.channels")
R = TypeVar("R")

REQUESTED = kind_of(ApprovalRequested)
"""A tape entry that asks the channel's people for an approval."""
FRESH_WAIT_S = 2.0
"""How long a command waits for the views to include what the journal just committed."""
FINISH_ANSWERS_S = 10.0
"""At a stop, how long the answers of runs that ended in the drain may take to go out."""


@runtime_checkable
class Resumable(Protocol):
    """A connector that reads its platform from a position (Matrix: a sync token) and resumes
    from the one it last saved (``channel.cursor_saved``, appended by the channel's actor)."""

    def resume(self, cursor: str | None, save: Callable[[str], None]) -> None: ...


class ChannelHub:
    """Every configured channel of one node."""

    def __init__(
        self, configs: Mapping[str, ChannelConfig], environ: Mapping[str, str] | None = None
    ) -> None:
        """Build each channel's connector: a config a connector refuses (a secret's variable
        not set, a bad URL) is a :class:`ConfigError` naming the key, before anything opens.
        Nothing runs until :meth:`start`."""
        from transports.channels import webhook  # noqa: F401 - registers the built-in kind

        self.configs = dict(configs)
        self.connectors: dict[str, Connector] = {}
        for name, config in self.configs.items():
            factory = CONNECTORS.get(config.kind)
            if factory is None:
                known = ", ".join(sorted(CONNECTORS)) or "none"
                raise ConfigError(
                    f"config key channels.{name}.kind: unknown kind {config.kind!r} "
                    f"(known: {known})"
                )
            try:
                self.connectors[name] = factory(name, config, environ)
            except ConnectorError as exc:
                raise ConfigError(f"config key channels.{name}.{exc}") from None
        self.actors: dict[str, pykka.ActorRef[Any]] = {}
        """The channels running here, by name (started: :meth:`start_channel`)."""
        self.signal: Signal | None = None
        self.elsewhere: Callable[[RouteInbound | MintPairCode], Future[Any]] | None = None
        """In a cluster, where a request for a channel not running here goes (the router: to the
        node running it); ``None``: such a request is refused (:class:`UnknownChannel`)."""
        self._unlisten: Callable[[], None] | None = None
        self._tasks: dict[asyncio.Task[Any], str] = {}
        """The work on the loop, with the channel it is for (see :meth:`stop_channel`)."""
        self._answering: dict[asyncio.Task[Any], str] = {}
        """The tasks following a run to answer it, with the run's id (see :meth:`stop`)."""
        self._turns = threading.Lock()
        """Held while a channel starts or stops (a lease's change and a stop take turns)."""
        self._closing = False
        self._resumed: dict[str, asyncio.Event] = {}
        """Each running channel's: set on the loop once its actor was told to
        :class:`ResumeChannel`."""
        self._views: Views | None = None
        self._node: Node | None = None
        self._journal: JournalPort | None = None
        self._projector: Projector | None = None
        self._authority: Authority | None = None
        self.duplicates = 0
        """Repeated deliveries dropped since the node started."""
        self.bad_signatures = 0
        """Webhook requests refused for their signature since the node started
        (``reel_channel_webhook_bad_signatures_total``; nothing else is recorded of them)."""

    # --- life --------------------------------------------------------------------------------

    @property
    def node(self) -> Node:
        if self._node is None:
            raise RuntimeError("the channel hub is not started")
        return self._node

    @property
    def journal(self) -> JournalPort:
        assert self._journal is not None, "the channel hub is not started"
        return self._journal

    @property
    def projector(self) -> Projector:
        assert self._projector is not None, "the channel hub is not started"
        return self._projector

    @property
    def authority(self) -> Authority:
        assert self._authority is not None, "the channel hub is not started"
        return self._authority

    @property
    def views(self) -> Views:
        assert self._views is not None, "the channel hub is not started"
        return self._views

    def start(
        self,
        *,
        node: Node,
        journal: JournalPort,
        projector: Projector,
        views_path: Path,
        authority: Authority,
        views_limits: ReaderLimits | None = None,
        run: bool = True,
    ) -> None:
        """Bind the hub to ``node`` and, with ``run``, start every channel here (a lone node;
        a cluster node starts each when it takes the channel's lease)."""
        self._node, self._journal, self._projector = node, journal, projector
        self._authority = authority
        self._views = Views(views_path, views_limits)
        self.signal = Signal(node.io.loop, projector.hurry)
        self._unlisten = projector.listen(self.signal.notify)
        if run:
            for name in self.configs:
                self.start_channel(name)

    def start_channel(self, name: str) -> None:
        """Run channel ``name`` here: its actor folds its stream, its connector starts (from
        the cursor the stream saved), then the actor carries out what was left undone (the
        backlog of a stop, or of another node that ran the channel before)."""
        with self._turns:
            if self._node is not None and not self._closing and name not in self.actors:
                self._start_channel(name)

    def _start_channel(self, name: str) -> None:
        node, io = self.node, self.node.io
        resumed = asyncio.Event()
        self._resumed[name] = resumed
        ref = ChannelActor.start(name, self.configs[name], node, self.journal, self)
        self.actors[name] = ref
        connector = self.connectors[name]
        try:
            if isinstance(connector, Resumable):
                cursor = ref.proxy().state.get(timeout=30).cursor
                connector.resume(cursor, self._cursor_saver(name))
            io.submit(connector.start(self._inbound)).result(timeout=30)
        except BaseException:
            self.actors.pop(name, None)
            with contextlib.suppress(pykka.ActorDeadError, pykka.Timeout):
                ref.stop(block=True, timeout=5)
            raise
        log.info("channel %s (%s) started", name, connector.kind)
        ref.tell(ResumeChannel())
        io.loop.call_soon_threadsafe(resumed.set)

    def running(self, name: str) -> bool:
        """Whether channel ``name`` runs on this node now."""
        return name in self.actors

    def stop(self, grace_s: float = FINISH_ANSWERS_S) -> None:
        """Let the answers of every channel's runs that have ended go out (at most ``grace_s``
        for all), stop every channel running here (:meth:`stop_channel`), then let go of the
        node."""
        if self._node is None:
            return
        self._closing = True  # a lease taken meanwhile starts nothing
        with contextlib.suppress(Exception):
            self._node.io.submit(self._finish_answers(None, grace_s)).result(timeout=grace_s + 5)
        for name in list(self.actors):
            self.stop_channel(name, 0.0)
        if self._unlisten is not None:
            self._unlisten()
            self._unlisten = None
        if self._views is not None:
            self._views.close()
        self._node = None

    def stop_channel(self, name: str, grace_s: float = FINISH_ANSWERS_S) -> None:
        """Let the answers of the channel's runs that have ended go out (at most ``grace_s``;
        0 when the channel moves to another node, which answers them), then stop its
        connector (no more messages in), its followers, then its actor. Runs still waiting
        (for an approval, say) are answered by whoever runs the channel next."""
        with self._turns:
            self._stop_channel(name, grace_s)

    def _stop_channel(self, name: str, grace_s: float) -> None:
        ref = self.actors.get(name)
        if ref is None or self._node is None:
            return
        io = self._node.io
        if grace_s > 0:
            with contextlib.suppress(Exception):
                io.submit(self._finish_answers(name, grace_s)).result(timeout=grace_s + 5)
        with contextlib.suppress(Exception):
            io.submit(self.connectors[name].stop()).result(timeout=10)

        async def cancel_tasks() -> None:
            for task, channel in list(self._tasks.items()):
                if channel == name:
                    task.cancel()

        with contextlib.suppress(Exception):
            io.submit(cancel_tasks()).result(timeout=5)
        del self.actors[name]
        with contextlib.suppress(pykka.ActorDeadError, pykka.Timeout):
            ref.stop(block=True, timeout=5)
        self._resumed.pop(name, None)
        log.info("channel %s stopped", name)

    # --- the entry point ---------------------------------------------------------------------

    def config(self, name: str) -> ChannelConfig:
        config = self.configs.get(name)
        if config is None:
            raise UnknownChannel.named(name)
        return config

    def connector(self, name: str) -> Connector:
        self.config(name)
        return self.connectors[name]

    def receive(self, message: InboundMessage, until_run: bool = True) -> Future[RouteResult]:
        """Hand ``message`` to its channel's router; the future holds the decision, with the
        run it started (``until_run``) or as soon as it is recorded. Raises
        :class:`UnknownChannel` or :class:`~actors.channels.message.InvalidMessage`
        (naming the field) at once for input no decision should see."""
        config = self.config(message.channel)
        principal = check_inbound(message, config.max_message_bytes)
        ref = self.actors.get(message.channel)
        if ref is None:
            return self._elsewhere(RouteInbound(message=message, until_run=until_run))
        reply: Future[RouteResult] = Future()
        ref.tell(Deliver(message=message, principal=principal, reply=reply, until_run=until_run))
        return reply

    async def route(self, message: InboundMessage) -> RouteResult:
        """:meth:`receive`, awaited (on the node's loop)."""
        return await asyncio.wrap_future(self.receive(message))

    async def _inbound(self, message: InboundMessage) -> RouteResult:
        """A connector's hand-in: done once the decision is durable (docs/channels.md,
        "Nothing lost across a stop"). Held until its channel was told to resume, so the
        backlog of the last stop is asked for before anything heard since."""
        resumed = self._resumed.get(message.channel)
        if resumed is not None:
            await resumed.wait()
        return await asyncio.wrap_future(self.receive(message, until_run=False))

    def mint_code(self, channel: str, ttl_ms: int, principal: str) -> Future[MintedCode]:
        """A new single-use pairing code for ``channel`` (recorded as minted by
        ``principal``; only its scrypt digest is stored)."""
        self.config(channel)
        ref = self.actors.get(channel)
        if ref is None:
            request = MintPairCode(channel=channel, ttl_ms=ttl_ms, principal=principal)
            return self._elsewhere(request)
        reply: Future[MintedCode] = Future()
        ref.tell(MintCode(ttl_ms=ttl_ms, principal=principal, reply=reply))
        return reply

    def run_here(self, request: RouteInbound | MintPairCode) -> Future[Any]:
        """Carry out ``request`` on this node, which runs its channel (the cluster's router
        and internal service call this): :class:`ShardNotOwned` when it does not (any more),
        so the sender looks for the channel's node again."""
        channel = channel_of(request)
        if channel not in self.actors:
            raise ShardNotOwned(f"channel {channel!r} does not run on this node now")
        if isinstance(request, RouteInbound):
            return self.receive(request.message, request.until_run)
        return self.mint_code(request.channel, request.ttl_ms, request.principal)

    def _elsewhere(self, request: RouteInbound | MintPairCode) -> Future[Any]:
        """``request``, for a channel not running here: to the node running it (a cluster),
        else refused."""
        channel = channel_of(request)
        if self.elsewhere is None:
            raise UnknownChannel(f"channel {channel!r} is not running")
        return self.elsewhere(request)

    def describe(self) -> list[ChannelInfo]:
        now = int(time.time() * 1000)
        out = []
        for name, config in sorted(self.configs.items()):
            state = None
            with contextlib.suppress(Exception):
                ref = self.actors.get(name)
                if ref is not None:
                    state = ref.proxy().state.get(timeout=2)
                else:  # runs on another node of a cluster: its stream tells the same
                    state = state_of(name, self.journal.read_stream(stream_of(name)))
            out.append(
                ChannelInfo(
                    name=name,
                    kind=config.kind,
                    enabled=config.enabled,
                    dm_policy=config.dm_policy,
                    group_policy=config.groups,
                    broadcast=config.broadcast,
                    require_mention=config.require_mention,
                    isolate_session_by_sender=config.isolate_session_by_sender,
                    coalesce_ms=config.coalesce_ms,
                    allow_from=len(config.allow_from),
                    deny_from=len(config.deny_from),
                    paired=sum(1 for u in state.paired.values() if u > now) if state else 0,
                    pending_pairings=len(state.pending) if state else 0,
                    connector=self.connectors[name].describe(),
                )
            )
        return out

    # --- called by the actors (any thread) -----------------------------------------------------

    async def _finish_answers(self, channel: str | None, grace_s: float) -> None:
        """Wait for the followers of ``channel``'s runs (every channel's: ``None``) the drain
        ended: their answers may not have gone out yet (a run leaves the registry just before
        its end is appended, and the views follow the journal). A run waiting for a human is
        not waited for."""
        waiting = self.node.services.registry.runs_awaiting_approval()
        ending = [
            task
            for task, run_id in self._answering.items()
            if run_id not in waiting and channel in (None, self._tasks.get(task))
        ]
        if ending:
            await asyncio.wait(ending, timeout=grace_s)

    def _spawn(self, channel: str, coro: Any, run_id: str = "") -> None:
        async def tracked() -> None:
            task = asyncio.current_task()
            if task is not None:
                self._tasks[task] = channel
                if run_id:
                    self._answering[task] = run_id
            try:
                await coro
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("channel work failed")
            finally:
                if task is not None:
                    self._tasks.pop(task, None)
                    self._answering.pop(task, None)

        self.node.io.submit(tracked())

    def _record(self, channel: str, event: Any, principal: str) -> None:
        ref = self.actors.get(channel)
        if ref is not None:
            with contextlib.suppress(pykka.ActorDeadError):
                ref.tell(Record(event, principal))

    def _cursor_saver(self, channel: str) -> Callable[[str], None]:
        def save(cursor: str) -> None:
            self._record(channel, ChannelCursorSaved(channel=channel, cursor=cursor), "node")

        return save

    def count_duplicate(self) -> None:
        """A delivery repeated a message id already routed."""
        self.duplicates += 1

    def notify(self, channel: str, message: InboundMessage, text: str) -> None:
        """Answer ``message`` in its conversation with ``text`` (a notice, not a run's answer)."""
        connector = self.connectors[channel]
        if not connector.can_reply:
            return
        self._spawn(
            channel,
            self._send(
                connector, message.conversation, message.thread, message.message_id, text, ""
            ),
        )

    def pairing_decided(
        self, channel: str, approval_id: str, conversation: str, decision: str, until_ms: int
    ) -> None:
        """Tell the sender how their pairing request ended."""
        connector = self.connectors[channel]
        if not connector.can_reply:
            return
        if decision == "allow":
            until = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(until_ms / 1000))
            text = f"Pairing approved: you can talk to the agent here until {until}."
        else:
            text = "Pairing was not approved."
        self._spawn(channel, self._send(connector, conversation, None, "", text, ""))

    def can_reply(self, channel: str) -> bool:
        """Whether ``channel``'s connector can send replies at all."""
        return self.connectors[channel].can_reply

    def follow(self, channel: str, started: ChannelRunStarted, ack: InboundMessage | None) -> None:
        """Follow a run an accepted message started and answer in its conversation;
        ``ack``: the message to acknowledge while it runs (None when resuming after a restart)."""
        self._spawn(
            channel, self._follow(channel, self.connectors[channel], started, ack), started.run_id
        )

    def run_command(
        self,
        channel: str,
        message: InboundMessage,
        principal: str,
        decision: Command,
        result: RouteResult,
        reply: Future[RouteResult],
    ) -> None:
        """Carry out a ``!reel`` command; ``reply`` gets the decision with the answer."""
        self._spawn(channel, self._command(channel, message, principal, decision, result, reply))

    # --- on the loop ---------------------------------------------------------------------------

    async def _send(
        self,
        connector: Connector,
        conversation: str,
        thread: str | None,
        in_reply_to: str,
        text: str,
        run_id: str,
    ) -> tuple[int, str]:
        """Send ``text`` in parts; ``(parts sent, error or "")``."""
        parts = split_text(text, connector.max_text_chars)
        for index, part in enumerate(parts, 1):
            try:
                await connector.send(
                    OutboundMessage(
                        channel=connector.name,
                        conversation=conversation,
                        thread=thread,
                        text=part,
                        in_reply_to=in_reply_to,
                        run_id=run_id,
                        part=index,
                        parts=len(parts),
                    )
                )
            except (ConnectorError, OSError, TimeoutError) as exc:
                log.warning("channel %s: delivery failed: %s", connector.name, exc)
                return index - 1, str(exc) or type(exc).__name__
        return len(parts), ""

    async def fresh(self, read: Callable[[], R | None]) -> R | None:
        """``read()``; on a miss while the views lag the journal, wait for them (at most
        :data:`FRESH_WAIT_S`) and read again."""
        row = read()
        target = self.journal.committed_position
        if row is None and self.projector.position < target:
            await asyncio.to_thread(self.projector.wait_for, target, FRESH_WAIT_S)
            row = read()
        return row

    async def _follow(
        self,
        channel: str,
        connector: Connector,
        started: ChannelRunStarted,
        ack: InboundMessage | None,
    ) -> None:
        config = self.configs[channel]
        run_id = started.run_id
        in_reply_to = started.in_reply_to[0] if started.in_reply_to else ""

        async def say(text: str) -> tuple[int, str]:
            return await self._send(
                connector, started.conversation, started.thread, in_reply_to, text, run_id
            )

        if ack is not None and config.ack != "none":
            text = config.ack_reaction if config.ack == "react" else config.ack_text
            try:
                await connector.acknowledge(ack, config.ack, text)
            except (ConnectorError, OSError, TimeoutError) as exc:
                log.warning("channel %s: acknowledgement failed: %s", channel, exc)
        assert self.signal is not None
        views = self.views
        async for entries in follow_tape(views, run_id, -1, self.signal, views.tape):
            for entry in entries:
                if entry.kind != REQUESTED or not config.approval_prompts:
                    continue
                event: Any = entry.event
                record = await self.fresh(functools.partial(views.approval, event.approval_id))
                if record is None or (ack is None and record.state != "pending"):
                    continue  # resumed: prompt again only for what still waits
                await say(self._approval_prompt(channel, record))
        run = await self.fresh(lambda: views.run(run_id))
        parts, error = await say(_answer_text(run.state if run else "", run))
        event_sent = record_reply(
            channel, run_id, started.conversation, started.in_reply_to, parts, error
        )
        self._record(channel, event_sent, "node")

    def _approval_prompt(self, channel: str, record: ApprovalRecord) -> str:
        """What the run's sender is told about a call waiting for approval: the commands the
        sender may use on it (decided by Cedar, nothing recorded), else who decides."""
        now = int(time.time() * 1000)
        who = Credentials(
            record.principal,
            self.authority.tokens.roles_of(record.principal, now),
            f"channel:{channel}",
        )
        may = [
            f"`!reel {verb} {record.approval_id}`"
            for verb, decision in (("approve", "allow"), ("deny", "deny"))
            if self.authority.may(
                who, "approval.resolve", self.authority.approval_scope(record, decision, "once")
            )
        ]
        head = (
            f"Waiting for approval {record.approval_id}: the agent wants to run "
            f"{record.tool} ({record.risk} risk)."
        )
        if may:
            return f"{head} Reply {' or '.join(may)}."
        return f"{head} An operator of this node decides it."

    async def _command(
        self,
        channel: str,
        message: InboundMessage,
        principal: str,
        decision: Command,
        result: RouteResult,
        reply: Future[RouteResult],
    ) -> None:
        name, target, outcome, answer = "help", "", "failed", "the command failed"
        try:
            name, target, outcome, answer = await commands.execute(
                self, channel, message, principal, decision
            )
        except Exception as exc:
            if not reply.done():
                reply.set_exception(exc)
            raise
        finally:
            self._record(
                channel,
                record_command(channel, principal, name, target, outcome, answer),
                principal,
            )
        if not reply.done():
            reply.set_result(msgspec.structs.replace(result, detail=answer))
        connector = self.connectors[channel]
        if decision.reply and connector.can_reply:
            await self._send(
                connector, message.conversation, message.thread, message.message_id, answer, ""
            )


def _answer_text(state: str, run: Any) -> str:
    """What the conversation is told when a run ends."""
    if run is None:
        return "The run ended; its record is not available yet."
    if state == "done":
        return str(run.answer or "(no answer)")
    if state == "cancelled":
        return "The run was cancelled."
    reason = run.termination_reason or "failed"
    detail = f": {run.message}" if run.message else ""
    return f"The run failed ({reason}){detail}."
