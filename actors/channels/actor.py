"""ChannelActor: the one writer of ``channel/<name>``.

One pykka actor per configured channel. It folds its stream at start (pairing codes, pending
pairing requests, paired senders: :mod:`actors.channels.router`), then for each inbound
message asks the pure router, appends the decision, and acts on it: starts the run (or holds
the message for coalescing), records a pairing request, or hands a ``!reel`` command to the
hub (through :class:`actors.channels.ports.ChannelEdge`). Pairing approvals are routed to it like
tool approvals are routed to their invocation (the node's registry), so ``POST
/v1/approvals/{id}``, gRPC ``Approvals.Resolve``, ``reel approvals approve`` and ``!reel approve``
all decide them.

Idempotency: an accepted message is appended with the idempotency key of its platform message
id (``channel/<name>/message/<sha256>``); the journal returns ``duplicate`` for a key it has
committed, also after a restart, and nothing more happens; a refusal is keyed by the message id
and its reason. Because a duplicate append writes nothing, appends state no ``expected_seq``
(the port's "no competing writer" case): this actor is the stream's only writer, and the
journal's writer lock keeps other processes out.

From accepted message to run, every step is recorded before the next is taken, and what a
stopped node left undone is folded from the stream at start and carried out on ``ResumeChannel``
with the same handlers (:mod:`actors.channels.dispatch`).

The actor never waits on another actor: run tickets and command outcomes come back as messages
(:mod:`actors.channels.messages`). Made elsewhere, appended or answered here: a
pairing's events (:mod:`actors.channels.pairing`), the callers' results
(:mod:`actors.channels.results`); what flood control remembers of senders is
:mod:`actors.channels.flood`.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Sequence
from concurrent.futures import Future
from typing import Any

import msgspec
import pykka

from actors import Node
from actors.actor_threads import PooledActor
from actors.aggregate import fold
from actors.channels import pairing, results, router
from actors.channels.config import ChannelConfig, duration_ms
from actors.channels.dispatch import (
    Backlog,
    Batch,
    Waiting,
    backlog,
    regroup,
    session_label,
)
from actors.channels.flood import Senders
from actors.channels.message import run_input
from actors.channels.messages import (
    Deliver,
    Dispatched,
    Flush,
    MintCode,
    PairingExpired,
    Record,
    ResumeChannel,
    replies_of,
)
from actors.channels.ports import ChannelEdge
from actors.channels.records import message_key, stream_of
from actors.channels.results import MintedCode, RouteResult
from actors.channels.router import (
    Accept,
    ChannelState,
    Command,
    Pair,
    Refuse,
    route,
)
from actors.errors import NodeDraining
from actors.log_fields import fields
from actors.messages import ResolveApproval, RunTicket, StartRun, reject, resolve
from actors.stream import Recorded, recorded
from events import Event, JournalPort, StoredEvent, new_id, redact_event
from events.catalog import (
    ChannelCursorSaved,
    ChannelMessageRefused,
    ChannelMessageRouted,
    ChannelPairCodeMinted,
    ChannelPairingRequested,
    ChannelPairingResolved,
    ChannelRunNotStarted,
    ChannelRunStarted,
    kind_of,
)

log = logging.getLogger("reel.channels")

STATE_KINDS = frozenset(
    kind_of(c)
    for c in (
        ChannelPairCodeMinted,
        ChannelPairingRequested,
        ChannelPairingResolved,
        ChannelCursorSaved,
    )
)
"""The kinds of ``channel/<name>`` that the channel's state folds (the others are records, left
undecoded at start: the fold would ignore them)."""


def now_ms() -> int:
    return int(time.time() * 1000)


def state_of(name: str, stream: Sequence[StoredEvent]) -> ChannelState:
    """Channel ``name``'s state, folded from its stream's rows (``channel/<name>``)."""
    own = recorded(row for row in stream if row.kind in STATE_KINDS)
    empty = ChannelState(channel=name)
    return fold(router, own, empty) or empty


# --- the actor ---------------------------------------------------------------------------------


class ChannelActor(PooledActor):
    def __init__(
        self, name: str, config: ChannelConfig, node: Node, journal: JournalPort, hub: ChannelEdge
    ) -> None:
        super().__init__()
        self.name = name
        self.config = config
        self.node = node
        self.journal = journal
        self.hub = hub
        self.state = ChannelState(channel=name)
        self.senders = Senders()
        self.windows: dict[tuple[str, str, str], Batch] = {}
        self.timers: dict[str, Any] = {}
        self.backlog = Backlog(unrequested=[], unstarted=[], unanswered=[])
        """What the stream shows a stopped node left undone; carried out on ``ResumeChannel``."""

    # --- life --------------------------------------------------------------------------------

    def on_start(self) -> None:
        stream = self.journal.read_stream(stream_of(self.name))
        self.state = state_of(self.name, stream)
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
            elif isinstance(message, ResumeChannel):
                self._resume()
            elif isinstance(message, Record):
                self._append(message.event, message.principal)
        except Exception as exc:  # contained: the caller hears it, the channel goes on
            log.exception("channel %s failed on %s", self.name, type(message).__name__)
            for reply in replies_of(message):
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
        stream = stream_of(self.name)
        events = [redact_event(e) for e in (event, *also)]
        result = self.journal.append(
            stream,
            events,
            expected_seq=None,
            principal=principal,
            idempotency_key=idempotency_key,
        )
        if not result.duplicate:
            records = [Recorded(e, stream, result.recorded_at_ms, principal) for e in events]
            self.state = fold(router, records, self.state) or self.state
        return result.duplicate, result.recorded_at_ms

    # --- messages ----------------------------------------------------------------------------

    def _deliver(self, command: Deliver) -> None:
        message, principal = command.message, command.principal
        now = now_ms()
        bucket = self.senders.buckets.get(principal)
        routed = route(self.config, self.state, message, principal, bucket, now)
        if routed.bucket is not None:
            self.senders.took(principal, routed.bucket)
        decision = routed.decision
        base = results.received(self.name, message.message_id, principal)
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
            since = self.senders.rate_limited(principal, now)
            if since is None:
                resolve(command.reply, results.refused(base, decision))
                return  # counted, not recorded, not answered
            suppressed = since
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
        resolve(command.reply, results.refused(base, decision))
        if duplicate:
            self.hub.count_duplicate()
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
            self.hub.count_duplicate()
            base = results.received(self.name, message.message_id, command.principal)
            detail = "this message id was routed before; nothing was started again"
            resolve(command.reply, results.duplicate(base, detail, session_key))
        return not duplicate

    def _pair(self, command: Deliver, decision: Pair, base: RouteResult, now: int) -> None:
        message, principal = command.message, command.principal
        code = pairing.match(self.state, decision.code, now)
        if code is None:
            self._refuse(command, pairing.INVALID_CODE, base, now)
            return
        event = pairing.requested(
            self.name,
            code,
            message,
            principal,
            approval_id=new_id(),
            expires_at_ms=now + duration_ms(self.config.pairing_pending),
        )
        duplicate, _ = self._append(
            event, principal, idempotency_key=message_key(self.name, message.message_id)
        )
        if duplicate:
            self.hub.count_duplicate()
            resolve(command.reply, results.duplicate(base))
            return
        self.node.services.registry.approval_pending(event.approval_id, "", self.actor_ref)
        self._expire_later(event.approval_id, event.expires_at_ms)
        detail = f"pairing request {event.approval_id} waits for an operator"
        resolve(command.reply, results.accepted(base, "pairing", reply=True, detail=detail))
        self.hub.notify(self.name, message, pairing.REQUESTED_REPLY)

    def _command(self, command: Deliver, decision: Command, base: RouteResult) -> None:
        if not self._routed(command, decision.session_key, "command", decision.reply, True):
            return
        result = results.accepted(
            base, "command", reply=decision.reply, session_key=decision.session_key
        )
        self.hub.run_command(
            self.name, command.message, command.principal, decision, result, command.reply
        )

    def _accept(self, command: Deliver, decision: Accept, base: RouteResult) -> None:
        message = command.message
        part = run_input([message])
        key = (message.conversation, message.thread or "", command.principal)
        window = self.windows.get(key) if decision.coalesce else None
        if window is not None and not window.takes(decision.session_key, part, self._max_input):
            del self.windows[key]  # it cannot take this message: its run starts now
            self._dispatch(window)
            window = None
        route_name = "coalesced" if window is not None else "run"
        waiting = Waiting(
            reply=command.reply,
            result=results.accepted(
                base, route_name, reply=decision.reply, session_key=decision.session_key
            ),
        )
        sender = (message.sender_name or message.sender) if message.is_direct else ""
        batch = Batch(
            principal=command.principal,
            session_key=decision.session_key,
            conversation=message.conversation,
            thread=message.thread,
            reply=decision.reply,
            label=session_label(self.name, sender, message.conversation),
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
            window.merge(batch)
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
        """Record the request (once: a batch from the backlog has its run id), then ask. When
        the request cannot be recorded, the batch's callers hear why (its messages are
        recorded: the next start asks for them)."""
        if batch.run_id is None:
            batch.run_id = new_id()
            try:
                self._append(batch.requested(self.name), batch.principal)
            except Exception as exc:
                for waiting in batch.waiting:
                    reject(waiting.reply, exc)
                raise
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
                reject(waiting.reply, error)
            return
        ticket: RunTicket = message.ticket.result()
        for waiting in batch.waiting:
            resolve(waiting.reply, results.started(waiting.result, ticket))
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
        salted = pairing.minted(code)
        event = pairing.code_minted(self.name, new_id(), salted, now_ms() + command.ttl_ms)
        self._append(event, command.principal)
        shown = MintedCode(
            channel=self.name, code=code, code_id=event.code_id, expires_at_ms=event.expires_at_ms
        )
        resolve(command.reply, shown)

    def _resolve(self, command: ResolveApproval) -> None:
        problem = pairing.undecidable(self.state, command)
        if problem is not None:
            reject(command.reply, problem)
            return
        self._decide(command.approval_id, command.decision, command.principal, command.reason)
        resolve(command.reply, True)

    def _expired(self, approval_id: str) -> None:
        if approval_id in self.state.pending:
            self._decide(approval_id, "deny", "node", "expired")

    def _decide(self, approval_id: str, decision: str, decided_by: str, reason: str) -> None:
        pending = self.state.pending[approval_id]
        grant_ms = duration_ms(self.config.pairing_grant) if decision == "allow" else 0
        event = pairing.resolution(
            self.name, pending, decision, decided_by, reason, now_ms=now_ms(), grant_ms=grant_ms
        )
        self._append(event, decided_by)
        self.node.services.registry.approval_closed(approval_id)
        timer = self.timers.pop(approval_id, None)
        if timer is not None:
            timer.cancel()
        self.hub.pairing_decided(
            self.name, approval_id, pending.conversation, decision, event.allowed_until_ms
        )

    def _expire_later(self, approval_id: str, expires_at_ms: int) -> None:
        ref = self.actor_ref
        delay = max(0.0, (expires_at_ms - now_ms()) / 1000)
        self.timers[approval_id] = self.node.io.call_later(
            delay, lambda: _tell(ref, PairingExpired(approval_id))
        )


# --- helpers -------------------------------------------------------------------------------------


def _tell(ref: pykka.ActorRef[Any], message: Any) -> None:
    with contextlib.suppress(pykka.ActorDeadError):
        ref.tell(message)
