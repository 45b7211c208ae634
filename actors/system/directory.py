"""SessionDirectory: routes commands to session actors, creates, wakes and passivates them.

It is the only actor that knows every session (an index of ids and keys loaded from the
journal at start), so it enforces ``session_key`` uniqueness. A session with nothing live costs
no thread: it is stopped as soon as it reports itself idle (or, with ``idle_passivate_s`` > 0,
after that long without a command), and the directory keeps its folded state (the most recent
:data:`STATE_CACHE` of them) to hand to the actor that wakes it on the next message; a session
not in that cache folds its stream again. Messages for a session that is stopping are buffered
and delivered after it wakes. A session that fails is restarted by replay on its next message.
Cancels and approval decisions go straight to the live run or tool actor via the registry.
"""

from __future__ import annotations

import contextlib
import time
from collections import OrderedDict
from typing import Any

import msgspec
import pykka

from actors.actor_threads import PooledActor
from actors.approvals.always_grants import GRANTS_STREAM, revoke
from actors.errors import (
    ApprovalAlreadyResolved,
    InvalidCommand,
    NodeDraining,
    RunNotActive,
    SessionKeyTaken,
    UnknownApproval,
    UnknownRun,
    UnknownSession,
)
from actors.identifiers import check_identifiers
from actors.messages import (
    AdoptSessions,
    BranchSession,
    CancelRun,
    CompactSession,
    CreateSession,
    DropSessions,
    GetSessionState,
    Passivate,
    PassivationTick,
    ResetSession,
    ResolveApproval,
    ResolveSession,
    RestoreSession,
    RevokeGrant,
    SessionIdle,
    SessionStopped,
    SetSessionPosture,
    StallRun,
    StartRun,
    ToSession,
    reject,
    resolve,
)
from actors.services import Services
from actors.sessions.actor import PassivationRefused, SessionActor
from actors.sessions.state import SessionState
from events import is_ulid
from events.catalog import SessionCreated
from projections.approvals import load_approvals

PENDING_RETRIES = 100
"""How many times (50 ms apart) a decision for a pending but not yet routable approval is
redelivered before it is refused."""

STATE_CACHE = 10_000
"""How many passivated sessions' folded states the directory keeps (least recently used
dropped; a session without one folds its stream when it wakes)."""


SESSION_COMMANDS = (
    ResetSession,
    BranchSession,
    GetSessionState,
    SetSessionPosture,
    CompactSession,
    RestoreSession,
)
"""Commands naming an existing session, delivered to it as they are."""


class SessionDirectory(PooledActor):
    """The front door of the actor system."""

    def __init__(self, services: Services) -> None:
        super().__init__()
        self.s = services
        self.index: set[str] = set()
        """Every session's id: all an idle session costs the directory, with its key in
        :attr:`keys` when it has one (the session folds everything else when it wakes)."""
        self.keys: dict[str, str] = {}
        self.live: dict[str, pykka.ActorRef[Any]] = {}
        self.stopping: dict[str, list[Any]] = {}
        self.last_active: dict[str, float] = {}
        self.states: OrderedDict[str, SessionState] = OrderedDict()
        """Folded states of passivated sessions, least recently stopped first."""
        self.forgotten: set[str] = set()
        """Actors of sessions this node stopped serving (a cluster's lost or re-acquired
        shard): what they report as they stop is not kept."""

    def on_start(self) -> None:
        self._learn(None)
        self._schedule_tick()

    def _learn(self, shards: frozenset[int] | None) -> None:
        """Read the sessions (in ``shards``; None: all) from the journal: at start, and when a
        cluster node acquires shards (their sessions were made by other nodes)."""
        for stored in self.s.journal.first_events("session/"):
            if shards is not None and stored.shard not in shards:
                continue
            event = stored.decode()
            if isinstance(event, SessionCreated):
                self._remember(event.session_id, event.session_key)
                if shards is not None:  # another node may have written it since we held it
                    self._forget_state(event.session_id)

    def _forget_state(self, session_id: str) -> None:
        """Drop what this directory holds of a session's state (its live actor, its cached
        fold): the next message folds its stream again."""
        self.states.pop(session_id, None)
        ref = self.live.pop(session_id, None)
        if ref is not None:
            self.forgotten.add(ref.actor_urn)  # its last state, told as it stops, is stale
            with contextlib.suppress(pykka.ActorDeadError, pykka.Timeout):
                ref.stop(block=True, timeout=5)

    def _drop(self, message: DropSessions) -> None:
        for session_id in [s for s in [*self.live, *self.states] if message.session(s)]:
            self._forget_state(session_id)
        for session_id in [s for s in self.stopping if message.session(s)]:
            for buffered in self.stopping.pop(session_id):
                reject(getattr(buffered, "reply", None), NodeDraining("the session moved"))

    def on_stop(self) -> None:
        for ref in list(self.live.values()):
            with contextlib.suppress(pykka.ActorDeadError, pykka.Timeout):
                ref.stop(block=True, timeout=5)

    # --- routing ---------------------------------------------------------------------------

    def on_receive(self, message: Any) -> Any:
        if isinstance(message, AdoptSessions):
            self._learn(message.shards)
            return None
        if isinstance(message, DropSessions):
            self._drop(message)
            return None
        # a session key or channel the journal would refuse (keys it already holds still work)
        invalid = check_identifiers(message, known_keys=self.keys)
        if invalid is not None:
            reject(getattr(message, "reply", None), invalid)
            return None
        if isinstance(message, StartRun):
            self._start_run(message)
        elif isinstance(message, CreateSession):
            self._create(message)
        elif isinstance(message, ResolveSession):
            self._resolve_session(message)
        elif isinstance(message, RevokeGrant):
            self._revoke(message)
        elif isinstance(message, SESSION_COMMANDS):
            if self._known(message.session_id, message.reply):
                self._deliver(message.session_id, message)
        elif isinstance(message, CancelRun):
            self._cancel(message)
        elif isinstance(message, StallRun):  # the watchdog of another node (a cluster's)
            ref = self.s.registry.live_run(message.run_id)
            if ref is None:
                reject(message.reply, RunNotActive(f"run {message.run_id} is not running here"))
            else:
                _told(ref, msgspec.structs.replace(message, reply=None))
                resolve(message.reply, True)
        elif isinstance(message, ResolveApproval):
            self._resolve_approval(message)
        elif isinstance(message, ToSession):  # handed back by a session that failed
            if message.session_id in self.index:
                self._deliver(message.session_id, message.message)
            else:  # it was never made (its creation refused)
                reject(
                    getattr(message.message, "reply", None),
                    UnknownSession(f"no session with id {message.session_id!r}"),
                )
        elif isinstance(message, SessionStopped):
            self._stopped(message)
        elif isinstance(message, SessionIdle):
            ref = self.live.get(message.session_id)
            at_once = self.s.config.passivates_at_once
            if at_once and ref is not None and ref.actor_urn == message.urn:
                self._passivate(message.session_id, ref)
        elif isinstance(message, PassivationRefused):
            for buffered in self.stopping.pop(message.session_id, []):
                self._deliver(message.session_id, buffered)
        elif isinstance(message, PassivationTick):
            self._passivate_idle()
            self._schedule_tick()
        return None

    def _deliver(self, session_id: str, message: Any) -> None:
        self.last_active[session_id] = time.monotonic()
        if session_id in self.stopping:
            self.stopping[session_id].append(message)
            return
        ref = self.live.get(session_id)
        if ref is None:
            ref = SessionActor.start(self.s, session_id, state=self.states.pop(session_id, None))
            self.live[session_id] = ref
        try:
            ref.tell(message)
        except pykka.ActorDeadError:  # died between our bookkeeping and the tell: restart
            self.live.pop(session_id, None)
            self._deliver(session_id, message)

    def _known(self, session_id: str, reply: Any) -> bool:
        if session_id in self.index:
            return True
        reject(reply, UnknownSession(f"no session with id {session_id!r}"))
        return False

    # --- sessions --------------------------------------------------------------------------

    def _remember(self, session_id: str, key: str | None) -> None:
        self.index.add(session_id)
        if key is not None:
            self.keys[key] = session_id

    def _create(self, message: CreateSession) -> None:
        key = message.session_key
        if key is not None and key in self.keys:
            reject(message.reply, SessionKeyTaken(f"session_key {key!r} is already in use"))
            return
        session_id = self.s.new_session_id(key)
        self._remember(session_id, key)
        self.last_active[session_id] = time.monotonic()
        self.live[session_id] = SessionActor.start(self.s, session_id, message)
        if message.then is not None:
            follow = msgspec.structs.replace(
                message.then, session_id=session_id, session_key=None, session_created=True
            )
            self._deliver(session_id, follow)
        # Otherwise the session answers the reply once session.created is durable.

    def _resolve_session(self, message: ResolveSession) -> None:
        session_id = message.session_id
        if session_id is None and message.session_key is not None:
            session_id = self.keys.get(message.session_key)
        if session_id is None or session_id not in self.index:
            if message.session_id is not None:
                reject(message.reply, UnknownSession(f"no session with id {message.session_id!r}"))
            elif not message.create:
                reject(
                    message.reply,
                    UnknownSession(f"no session with key {message.session_key!r}"),
                )
            elif self.s.draining:
                reject(message.reply, NodeDraining("the node is shutting down"))
            else:
                self._create(
                    CreateSession(
                        session_key=message.session_key,
                        label=message.label,
                        principal=message.principal,
                        reply=message.reply,
                    )
                )
            return
        self._deliver(session_id, message)

    def _start_run(self, message: StartRun) -> None:
        error = validate_text(message.text, self.s.config.max_message_bytes)
        if error is None and message.run_id is not None and not is_ulid(message.run_id):
            error = InvalidCommand("run_id", "must be a ULID")
        if error is not None:
            reject(message.reply, error)
            return
        if self.s.draining:
            reject(message.reply, NodeDraining("the node is shutting down; not accepting runs"))
            return
        if message.session_id is not None:
            if self._known(message.session_id, message.reply):
                self._deliver(message.session_id, message)
            return
        if message.session_key is not None and message.session_key in self.keys:
            self._deliver(self.keys[message.session_key], message)
            return
        if not message.create:
            what = (
                f"no session with key {message.session_key!r}"
                if message.session_key is not None
                else "give a session id or key, or ask for a new session"
            )
            reject(
                message.reply,
                UnknownSession(what) if message.session_key else InvalidCommand("session", what),
            )
            return
        self._create(
            CreateSession(
                session_key=message.session_key,
                label=message.label,
                principal=message.principal,
                then=message,
                reply=message.reply,
            )
        )

    def _stopped(self, message: SessionStopped) -> None:
        if message.urn in self.forgotten:
            self.forgotten.discard(message.urn)
            return
        live = self.live.get(message.session_id)
        if message.unmade:  # its key is free again; its id names nothing
            self.index.discard(message.session_id)
            for key in [k for k, s in self.keys.items() if s == message.session_id]:
                del self.keys[key]
        if live is not None and message.urn and live.actor_urn != message.urn:
            return  # an older actor of a session already restarted: the new one stays
        self.live.pop(message.session_id, None)
        self.last_active.pop(message.session_id, None)
        if message.state is not None:
            self.states[message.session_id] = message.state
            if len(self.states) > STATE_CACHE:
                self.states.popitem(last=False)
        buffered = self.stopping.pop(message.session_id, [])
        for item in buffered:
            self._deliver(message.session_id, item)

    def _passivate_idle(self) -> None:
        now = time.monotonic()
        idle_after = self.s.config.idle_passivate_s
        for session_id, ref in list(self.live.items()):
            if session_id in self.stopping:
                continue
            if now - self.last_active.get(session_id, now) < idle_after:
                continue
            if self.s.registry.live_runs_of(session_id):
                continue
            self._passivate(session_id, ref)

    def _passivate(self, session_id: str, ref: pykka.ActorRef[Any]) -> None:
        """Ask an idle session to stop; buffer what arrives for it meanwhile."""
        if session_id in self.stopping:
            return
        self.stopping[session_id] = []
        try:
            ref.tell(Passivate())
        except pykka.ActorDeadError:
            self._stopped(SessionStopped(session_id))

    def _schedule_tick(self) -> None:
        ref = self.actor_ref

        def tick() -> None:
            with contextlib.suppress(pykka.ActorDeadError):
                ref.tell(PassivationTick())

        self.s.io.call_later(self.s.config.passivate_check_s, tick)

    def _revoke(self, message: RevokeGrant) -> None:
        """Decide on the grants the journal holds now, append, and reply once the gate folded
        the revocation (the gate changes only from the journal): a revocation the journal did
        not take changes nothing (the caller hears why)."""
        gate = self.s.gate
        try:
            grants = gate.sync_grants()
            event = revoke(grants.active, message.principal, message.tool)
            self.s.journal.append(
                GRANTS_STREAM,
                [event],
                expected_seq=grants.next_seq,
                principal=message.revoked_by,
            )
            gate.sync_grants()
        except Exception as exc:
            reject(message.reply, exc)
            return
        resolve(message.reply, event)

    # --- runs and approvals ----------------------------------------------------------------

    def _cancel(self, message: CancelRun) -> None:
        if _told(self.s.registry.live_run(message.run_id), message):
            return
        session_id = self.s.registry.queued_session(message.run_id)
        if session_id is not None:
            self._deliver(session_id, message)
            return
        events = self.s.journal.read_correlated(message.run_id) if is_ulid(message.run_id) else []
        if not events:
            reject(message.reply, UnknownRun(f"no run with id {message.run_id!r}"))
        else:
            reject(message.reply, RunNotActive(f"run {message.run_id} has already ended"))

    def _resolve_approval(self, message: ResolveApproval) -> None:
        if _told(self.s.registry.approval(message.approval_id), message):
            return
        state = approval_state(self.s, message.approval_id)
        if state == "pending" and message.attempts < PENDING_RETRIES:
            # Pending on the journal but not routable yet: its actor is starting (a run being
            # resumed after a restart). Deliver again shortly instead of refusing.
            ref, retry = (
                self.actor_ref,
                msgspec.structs.replace(message, attempts=message.attempts + 1),
            )
            self.s.io.call_later(0.05, lambda: _told(ref, retry))
            return
        if state is None:
            reject(message.reply, UnknownApproval(f"no approval with id {message.approval_id!r}"))
        else:
            reject(
                message.reply,
                ApprovalAlreadyResolved(f"approval {message.approval_id} is already {state}"),
            )


def _told(ref: pykka.ActorRef[Any] | None, message: Any) -> bool:
    """Deliver to a live actor; False when there is none (or it just stopped)."""
    if ref is None:
        return False
    try:
        ref.tell(message)
    except pykka.ActorDeadError:
        return False
    return True


def validate_text(text: str, max_bytes: int) -> InvalidCommand | None:
    """The error for a message text that is empty or over the cap, else None."""
    if not text.strip():
        return InvalidCommand("text", "the message is empty")
    size = len(text.encode("utf-8"))
    if size > max_bytes:
        return InvalidCommand("text", f"the message is {size} bytes; the limit is {max_bytes}")
    return None


def approval_state(services: Services, approval_id: str) -> str | None:
    """``pending``/``resolved`` for an approval the journal knows, None when unknown.

    Folds every approval event: only used on the error path (unknown or stale ids)."""
    record = load_approvals(services.journal).get(approval_id)
    return record.state if record is not None else None
