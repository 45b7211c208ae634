"""ChannelActor: the one writer of ``channel/<name>``.

One pykka actor per configured channel. It folds its stream at start (pairing codes, pending
pairing requests, paired senders: :mod:`transports.channels.router`), then for each inbound
message asks the pure router, appends the decision, and acts on it: starts the run (or holds
the message for coalescing), records a pairing request, or hands a ``!reel`` command to the
hub. Pairing approvals are routed to it like tool approvals are routed to their invocation
(the node's registry), so ``POST /v1/approvals/{id}``, gRPC ``Approvals.Resolve``,
``reel approvals approve`` and ``!reel approve`` all decide them.

Idempotency: an accepted message is appended with the idempotency key of its platform message
id (``channel/<name>/message/<sha256>``); the journal returns ``duplicate`` for a key it has
committed, also after a restart, and nothing more happens; a refusal is keyed by the message id
and its reason. Because a duplicate append writes nothing, appends state no ``expected_seq``
(the port's "no competing writer" case): this actor is the stream's only writer, and the
journal's writer lock keeps other processes out.

From accepted message to run, every step is recorded before the next is taken, and what a
stopped node left undone is folded from the stream at start and carried out on ``Resume`` with
the same handlers (:mod:`transports.channels.dispatch`).

The actor never waits on another actor: run tickets and command outcomes come back as messages.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Sequence
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any

import msgspec
import pykka

from actors import Node
from actors.errors import ApprovalAlreadyResolved, InvalidCommand, NodeDraining, UnknownApproval
from actors.messages import ResolveApproval, RunTicket, StartRun, reject, resolve
from events import Event, JournalPort, new_id
from events.catalog import (
    ChannelCursorSaved,
    ChannelMessageRefused,
    ChannelMessageRouted,
    ChannelPairCodeMinted,
    ChannelPairingRequested,
    ChannelPairingResolved,
    ChannelRunNotStarted,
    ChannelRunStarted,
)
from transports.channels import pairing
from transports.channels.dispatch import Backlog, Batch, Waiting, backlog, regroup
from transports.channels.message import InboundMessage, run_input
from transports.channels.records import message_key, stream_of
from transports.channels.results import MintedCode, RouteResult
from transports.channels.router import (
    Accept,
    Bucket,
    ChannelState,
    Command,
    Pair,
    Refuse,
    apply,
    route,
)
from transports.config import ChannelConfig, duration_ms
from transports.logs import fields

if TYPE_CHECKING:
    from transports.channels.hub import ChannelHub

log = logging.getLogger("reel.channels")

STATE_KINDS = frozenset(
    {"channel.pair_code_minted", "channel.pairing_requested", "channel.pairing_resolved"}
)
"""The kinds of ``channel/<name>`` that the router's state folds (the others are records)."""
FLOOD_RECORD_EVERY_MS = 1000
"""A flooding sender's refusals are recorded at most once a second (the rest are counted)."""
BUCKETS_KEPT = 10_000
"""Senders whose rate buckets are remembered (least recently seen forgotten first)."""


def now_ms() -> int:
    return int(time.time() * 1000)


# --- messages ----------------------------------------------------------------------------------


class Deliver(msgspec.Struct, frozen=True, kw_only=True):
    message: InboundMessage
    principal: str
    reply: Future[RouteResult]
    until_run: bool = True
    """True: ``reply`` waits for the run (its id in the result; an API caller). False: it
    resolves as soon as the decision is recorded (a connector only needs the message durable,
    and must not wait out a coalescing window before handing in the next one)."""


class MintCode(msgspec.Struct, frozen=True, kw_only=True):
    ttl_ms: int
    principal: str
    reply: Future[MintedCode]


class Flush(msgspec.Struct, frozen=True):
    """Timer: the coalescing window that ``first`` opened closed."""

    key: tuple[str, str, str]
    first: str


class Dispatched(msgspec.Struct, frozen=True):
    """The node answered a StartRun."""

    batch: Batch
    ticket: Future[Any]


class PairingExpired(msgspec.Struct, frozen=True):
    approval_id: str


class Resume(msgspec.Struct, frozen=True):
    """The connector is up: carry out what a stopped node left undone (the backlog)."""


class Record(msgspec.Struct, frozen=True):
    """Append ``event`` on the actor's stream as ``principal`` (command and reply outcomes)."""

    event: Event
    principal: str


# --- the actor ---------------------------------------------------------------------------------


class ChannelActor(pykka.ThreadingActor):
    use_daemon_thread = True

    def __init__(
        self, name: str, config: ChannelConfig, node: Node, journal: JournalPort, hub: ChannelHub
    ) -> None:
        super().__init__()
        self.name = name
        self.config = config
        self.node = node
        self.journal = journal
        self.hub = hub
        self.state = ChannelState()
        self.buckets: dict[str, Bucket] = {}
        self.flood: dict[str, tuple[int, int]] = {}
        """Sender -> (when its last rate_limited refusal was recorded, refusals since)."""
        self.windows: dict[tuple[str, str, str], Batch] = {}
        self.timers: dict[str, Any] = {}
        self.backlog = Backlog(unrequested=[], unstarted=[], unanswered=[])
        """What the stream shows a stopped node left undone; carried out on ``Resume``."""
        self.resolved: set[str] = set()
        """Pairing approvals already decided (a second decision is a conflict, not unknown)."""
        self.cursor: str | None = None
        """The connector's last saved position (``channel.cursor_saved``): where it resumes."""

    # --- life --------------------------------------------------------------------------------

    def on_start(self) -> None:
        stream = self.journal.read_stream(stream_of(self.name))
        for stored in stream:
            if stored.kind in STATE_KINDS:
                event = stored.decode()
                self.state = apply(self.state, event, stored.recorded_at_ms)
                if isinstance(event, ChannelPairingResolved):
                    self.resolved.add(event.approval_id)
            elif stored.kind == "channel.cursor_saved":
                saved = stored.decode()
                assert isinstance(saved, ChannelCursorSaved)
                self.cursor = saved.cursor
        self.backlog = backlog(stream)
        registry = self.node.services.registry
        for pending in self.state.pending.values():
            registry.approval_pending(pending.approval_id, "", self.actor_ref)
            self._expire_later(pending.approval_id, pending.expires_at_ms)

    def on_stop(self) -> None:
        registry = self.node.services.registry
        for approval_id in self.state.pending:
            registry.approval_closed(approval_id)
        for timer in self.timers.values():
            timer.cancel()
        for batch in self.windows.values():  # recorded: they start their run at the next start
            for waiting in batch.waiting:
                resolve(
                    waiting.reply,
                    msgspec.structs.replace(
                        waiting.result,
                        detail="held for coalescing when the node stopped: "
                        "its run starts when the node starts again",
                    ),
                )

    def on_receive(self, message: Any) -> Any:
        try:
            if isinstance(message, Deliver):
                self._deliver(message)
            elif isinstance(message, Dispatched):
                self._dispatched(message)
            elif isinstance(message, Flush):
                batch = self.windows.get(message.key)
                if batch is not None and batch.message_ids[0] == message.first:
                    del self.windows[message.key]
                    self._dispatch(batch)
            elif isinstance(message, MintCode):
                self._mint(message)
            elif isinstance(message, ResolveApproval):
                self._resolve(message)
            elif isinstance(message, PairingExpired):
                self._expired(message.approval_id)
            elif isinstance(message, Resume):
                self._resume()
            elif isinstance(message, Record):
                self._append(message.event, message.principal)
                if isinstance(message.event, ChannelCursorSaved):
                    self.cursor = message.event.cursor
        except Exception as exc:  # contained: the caller hears it, the channel goes on
            log.exception("channel %s failed on %s", self.name, type(message).__name__)
            for reply in _replies_of(message):
                if not reply.done():
                    reply.set_exception(exc)
        return None

    # --- appending ---------------------------------------------------------------------------

    def _append(
        self,
        event: Event,
        principal: str,
        idempotency_key: str | None = None,
        also: Sequence[Event] = (),
    ) -> tuple[bool, int]:
        """Append ``event`` (and ``also``, in the same commit) and fold it;
        ``(duplicate, recorded_at_ms)``."""
        result = self.journal.append(
            stream_of(self.name),
            [event, *also],
            expected_seq=None,
            principal=principal,
            idempotency_key=idempotency_key,
        )
        if not result.duplicate:
            self.state = apply(self.state, event, result.recorded_at_ms)
        return result.duplicate, result.recorded_at_ms

    # --- messages ----------------------------------------------------------------------------

    def _deliver(self, command: Deliver) -> None:
        message, principal = command.message, command.principal
        now = now_ms()
        routed = route(
            self.config, self.state, message, principal, self.buckets.get(principal), now
        )
        if routed.bucket is not None:
            self.buckets.pop(principal, None)
            self.buckets[principal] = routed.bucket
            if len(self.buckets) > BUCKETS_KEPT:
                self.buckets.pop(next(iter(self.buckets)))
        decision = routed.decision
        base = RouteResult(
            channel=self.name,
            message_id=message.message_id,
            accepted=False,
            reason="",
            principal=principal,
        )
        if isinstance(decision, Refuse):
            self._refuse(command, decision, base, now)
        elif isinstance(decision, Pair):
            self._pair(command, decision, base, now)
        elif isinstance(decision, Command):
            self._command(command, decision, base)
        else:
            self._accept(command, decision, base)

    def _refuse(self, command: Deliver, decision: Refuse, base: RouteResult, now: int) -> None:
        message, principal = command.message, command.principal
        tell = decision.reply
        suppressed = 0
        if decision.reason == "rate_limited":
            last, count = self.flood.get(principal, (0, 0))
            if now - last < FLOOD_RECORD_EVERY_MS:
                self.flood[principal] = (last, count + 1)
                resolve(command.reply, _refused(base, decision))
                return  # counted, not recorded, not answered
            suppressed = count
            self.flood[principal] = (now, 0)
            if len(self.flood) > BUCKETS_KEPT:
                self.flood.pop(next(iter(self.flood)))
        duplicate, _ = self._append(
            ChannelMessageRefused(
                channel=self.name,
                message_id=message.message_id,
                conversation=message.conversation,
                principal=principal,
                reason=decision.reason,
                detail=decision.detail,
                suppressed=suppressed,
            ),
            principal,
            # a platform re-delivering a refused message is told nothing new; the same message
            # can still be refused for another reason, or accepted, later (after pairing)
            idempotency_key=f"{message_key(self.name, message.message_id)}/{decision.reason}",
        )
        resolve(command.reply, _refused(base, decision))
        if duplicate:
            self.hub.duplicates += 1
        elif tell is not None and message.is_direct:
            self.hub.notify(self.name, message, tell)

    def _routed(
        self,
        command: Deliver,
        session_key: str,
        route_name: str,
        reply: bool,
        mentioned: bool,
        input: str = "",
        batch: Batch | None = None,
    ) -> bool:
        """Record an accepted message (``input``: its part of a run's input), with the request
        for ``batch``'s run in the same commit when it starts one at once; False when it is a
        repeat (already answered)."""
        message = command.message
        duplicate, _ = self._append(
            ChannelMessageRouted(
                channel=self.name,
                message_id=message.message_id,
                conversation=message.conversation,
                thread=message.thread,
                principal=command.principal,
                session_key=session_key,
                is_direct=message.is_direct,
                mentioned=mentioned,
                route=route_name,  # type: ignore[arg-type]
                reply=reply,
                attachments=len(message.attachments),
                input=input,
            ),
            command.principal,
            idempotency_key=message_key(self.name, message.message_id),
            also=() if batch is None else (batch.requested(self.name),),
        )
        if duplicate:
            self.hub.duplicates += 1
            resolve(
                command.reply,
                RouteResult(
                    channel=self.name,
                    message_id=message.message_id,
                    accepted=False,
                    reason="duplicate",
                    detail="this message id was routed before; nothing was started again",
                    principal=command.principal,
                    session_key=session_key,
                    duplicate=True,
                ),
            )
        return not duplicate

    def _pair(self, command: Deliver, decision: Pair, base: RouteResult, now: int) -> None:
        message, principal = command.message, command.principal
        code = pairing.match(self.state, decision.code, now)
        if code is None:
            refusal = Refuse(
                reason="pairing_code_invalid",
                detail="the code is wrong, expired or used",
                reply=pairing.INVALID_REPLY,
            )
            self._refuse(command, refusal, base, now)
            return
        approval_id = new_id()
        expires = now + duration_ms(self.config.pairing_pending)
        event = ChannelPairingRequested(
            channel=self.name,
            approval_id=approval_id,
            code_id=code.code_id,
            principal=principal,
            conversation=message.conversation,
            display_name=message.sender_name,
            expires_at_ms=expires,
        )
        duplicate, _ = self._append(
            event, principal, idempotency_key=message_key(self.name, message.message_id)
        )
        if duplicate:
            self.hub.duplicates += 1
            resolve(
                command.reply, msgspec.structs.replace(base, reason="duplicate", duplicate=True)
            )
            return
        self.node.services.registry.approval_pending(approval_id, "", self.actor_ref)
        self._expire_later(approval_id, expires)
        resolve(
            command.reply,
            msgspec.structs.replace(
                base,
                accepted=True,
                reason="accepted",
                route="pairing",
                detail=f"pairing request {approval_id} waits for an operator",
                reply=True,
            ),
        )
        self.hub.notify(self.name, message, pairing.REQUESTED_REPLY)

    def _command(self, command: Deliver, decision: Command, base: RouteResult) -> None:
        if not self._routed(command, decision.session_key, "command", decision.reply, True):
            return
        result = msgspec.structs.replace(
            base,
            accepted=True,
            reason="accepted",
            route="command",
            session_key=decision.session_key,
            reply=decision.reply,
        )
        self.hub.run_command(
            self.name, command.message, command.principal, decision, result, command.reply
        )

    def _accept(self, command: Deliver, decision: Accept, base: RouteResult) -> None:
        message = command.message
        part = run_input([message])
        key = (message.conversation, message.thread or "", command.principal)
        window = self.windows.get(key) if decision.coalesce else None
        if window is not None and (
            window.session_key != decision.session_key
            or window.size + 1 + len(part.encode("utf-8", "surrogatepass")) > self._max_input
        ):
            del self.windows[key]  # it cannot take this message: its run starts now
            self._dispatch(window)
            window = None
        route_name = "coalesced" if window is not None else "run"
        waiting = Waiting(
            reply=command.reply,
            result=msgspec.structs.replace(
                base,
                accepted=True,
                reason="accepted",
                route=route_name,
                session_key=decision.session_key,
                reply=decision.reply,
            ),
        )
        sender = message.sender_name or message.sender
        batch = Batch(
            principal=command.principal,
            session_key=decision.session_key,
            conversation=message.conversation,
            thread=message.thread,
            reply=decision.reply,
            label=f"{self.name}: {sender if message.is_direct else message.conversation}"[:120],
            message_ids=[message.message_id],
            inputs=[part],
            waiting=[waiting] if command.until_run else [],
            ack=message,
            # a run asked for at once is requested in the message's own commit
            run_id=None if decision.coalesce else new_id(),
        )
        if not self._routed(
            command,
            decision.session_key,
            route_name,
            decision.reply,
            decision.mentioned,
            part,
            batch if batch.run_id is not None else None,
        ):
            return
        if not command.until_run:
            resolve(command.reply, waiting.result)
        if window is not None:
            window.message_ids.append(message.message_id)
            window.inputs.append(part)
            window.waiting.extend(batch.waiting)
            window.reply = window.reply or decision.reply
        elif batch.run_id is not None:
            self._ask(batch)
        else:
            self.windows[key] = batch
            ref, flush = self.actor_ref, Flush(key, message.message_id)
            self.node.io.call_later(self.config.coalesce_ms / 1000, lambda: _tell(ref, flush))

    @property
    def _max_input(self) -> int:
        """The largest run input the node accepts (a coalesced batch stays within it)."""
        return self.node.services.config.max_message_bytes

    def _dispatch(self, batch: Batch) -> None:
        """Record the request (once: a batch from the backlog has its run id), then ask."""
        if batch.run_id is None:
            batch.run_id = new_id()
            self._append(batch.requested(self.name), batch.principal)
        self._ask(batch)

    def _ask(self, batch: Batch) -> None:
        ticket = self.node.send(
            StartRun(
                text=batch.text,
                session_key=batch.session_key,
                create=True,
                label=batch.label,
                principal=batch.principal,
                channel=self.name,
                run_id=batch.run_id,
            )
        )
        ref = self.actor_ref
        ticket.add_done_callback(lambda done: _tell(ref, Dispatched(batch, done)))

    def _dispatched(self, message: Dispatched) -> None:
        batch = message.batch
        assert batch.run_id is not None
        error = message.ticket.exception()
        if error is not None:
            if not isinstance(error, NodeDraining):  # a draining node's are asked for again
                log.warning(
                    "channel run refused by the node",
                    extra=fields(channel=self.name, run_id=batch.run_id, error=str(error)),
                )
                self._append(
                    ChannelRunNotStarted(channel=self.name, run_id=batch.run_id, error=str(error)),
                    batch.principal,
                )
            for waiting in batch.waiting:
                reject_route(waiting.reply, error)
            return
        ticket: RunTicket = message.ticket.result()
        for waiting in batch.waiting:
            resolve(
                waiting.reply,
                msgspec.structs.replace(
                    waiting.result,
                    run_id=ticket.run_id,
                    session_id=ticket.session_id,
                    queued=ticket.queued,
                ),
            )
        started = ChannelRunStarted(
            channel=self.name,
            run_id=ticket.run_id,
            session_id=ticket.session_id,
            conversation=batch.conversation,
            thread=batch.thread,
            in_reply_to=tuple(batch.message_ids),
            reply=batch.reply and self.hub.can_reply(self.name),
        )
        # Not waited for: lost in a crash, the request is asked for again at the next start and
        # the session answers with this run. A reply_sent is submitted after it, so it never
        # commits without it.
        self.journal.submit(
            stream_of(self.name), [started], expected_seq=None, principal=batch.principal
        ).add_done_callback(self._submitted)
        if started.reply:
            self.hub.follow(self.name, started, batch.ack)

    def _submitted(self, done: Future[Any]) -> None:
        error = done.exception()
        if error is not None:
            log.error(
                "channel record not written",
                extra=fields(channel=self.name, error=type(error).__name__),
            )

    def _resume(self) -> None:
        """Carry out the backlog with the ordinary handlers: ask again for requests never
        answered (same run id), request messages never requested, follow runs never
        answered."""
        left, self.backlog = self.backlog, Backlog(unrequested=[], unstarted=[], unanswered=[])
        for started in left.unanswered:
            self.hub.follow(self.name, started, None)
        for batch in left.unstarted:
            self._ask(batch)
        for batch in regroup(self.name, left.unrequested, self._max_input):
            self._dispatch(batch)
        if left.unstarted or left.unrequested:
            log.info(
                "channel resumed messages a stopped node had not started runs for",
                extra=fields(
                    channel=self.name,
                    requests=len(left.unstarted),
                    messages=len(left.unrequested),
                ),
            )

    # --- pairing -----------------------------------------------------------------------------

    def _mint(self, command: MintCode) -> None:
        code = pairing.new_code()
        salt, digest = pairing.minted(code)
        code_id = new_id()
        expires = now_ms() + command.ttl_ms
        self._append(
            ChannelPairCodeMinted(
                channel=self.name,
                code_id=code_id,
                salt=salt,
                digest=digest,
                kdf=pairing.KDF,
                expires_at_ms=expires,
            ),
            command.principal,
        )
        resolve(
            command.reply,
            MintedCode(channel=self.name, code=code, code_id=code_id, expires_at_ms=expires),
        )

    def _resolve(self, command: ResolveApproval) -> None:
        pending = self.state.pending.get(command.approval_id)
        if pending is None:
            reject(
                command.reply,
                ApprovalAlreadyResolved(f"approval {command.approval_id} is already resolved")
                if command.approval_id in self.resolved
                else UnknownApproval(f"no approval with id {command.approval_id!r}"),
            )
            return
        if command.scope != "once" or command.match != "any" or command.prefix:
            reject(
                command.reply,
                InvalidCommand("scope", "a pairing approval is decided once (scope once)"),
            )
            return
        self._decide(command.approval_id, command.decision, command.principal, command.reason)
        resolve(command.reply, True)

    def _expired(self, approval_id: str) -> None:
        if approval_id in self.state.pending:
            self._decide(approval_id, "deny", "node", "expired")

    def _decide(self, approval_id: str, decision: str, decided_by: str, reason: str) -> None:
        pending = self.state.pending[approval_id]
        now = now_ms()
        until = now + duration_ms(self.config.pairing_grant) if decision == "allow" else 0
        self._append(
            ChannelPairingResolved(
                channel=self.name,
                approval_id=approval_id,
                principal=pending.principal,
                decision=decision,  # type: ignore[arg-type]
                decided_by=decided_by,
                reason=reason,
                allowed_until_ms=until,
                waited_ms=max(0, now - pending.requested_at_ms),
            ),
            decided_by,
        )
        self.resolved.add(approval_id)
        self.node.services.registry.approval_closed(approval_id)
        timer = self.timers.pop(approval_id, None)
        if timer is not None:
            timer.cancel()
        self.hub.pairing_decided(self.name, approval_id, pending.conversation, decision, until)

    def _expire_later(self, approval_id: str, expires_at_ms: int) -> None:
        ref = self.actor_ref
        delay = max(0.0, (expires_at_ms - now_ms()) / 1000)
        self.timers[approval_id] = self.node.io.call_later(
            delay, lambda: _tell(ref, PairingExpired(approval_id))
        )


# --- helpers -------------------------------------------------------------------------------------


def _refused(base: RouteResult, decision: Refuse) -> RouteResult:
    return msgspec.structs.replace(base, reason=decision.reason, detail=decision.detail)


def reject_route(reply: Future[RouteResult], error: BaseException) -> None:
    if not reply.done():
        reply.set_exception(error)


def _tell(ref: pykka.ActorRef[Any], message: Any) -> None:
    with contextlib.suppress(pykka.ActorDeadError):
        ref.tell(message)


def _replies_of(message: Any) -> Sequence[Future[Any]]:
    reply = getattr(message, "reply", None)
    if isinstance(reply, Future):
        return (reply,)
    if isinstance(message, Dispatched):
        return [w.reply for w in message.batch.waiting]
    return ()
