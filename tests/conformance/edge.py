"""The edges' conformance suite: one table of what an API user sends (a command, its input, who
sends it) and the failure kind (:data:`transports.failures.Kind`) or success it must produce,
driven over HTTP and over gRPC against one real node.

Each edge answers a kind through its own table alone (:data:`transports.http.failures.STATUS`,
:data:`transports.grpc.status.STATUS`), so a case that passes on both edges proves they agree.
A subclass per edge (tests/conformance/test_edges.py) translates a case into its protocol and
checks the answer: the status its table gives the kind (HTTP also the JSON body's ``code``),
the request field the error names where the case names one, and, for a failure, that the
journal holds nothing new but the ``access.decided`` row the authority records for a
state-changing decision it made (``decided``: permitted, then refused by the state; or denied).

Only commands both edges offer are in the table. HTTP alone has sessions' read, branch,
compaction, checkpoints and restore, postures, run lists and tapes, single approvals, tokens,
memory, tasks, learning, incidents, journal checkpoints, whoami, channels' list, pair codes and
webhook, metrics, health, the console and the OpenAPI document; gRPC alone has Journal.Read,
Approvals.Watch and the approvals and cancels sent on a RunStream. So an unknown task or memory
item, and a session key already taken (only a branch can meet one), are HTTP's own cases.
Two inputs are answered differently on purpose, each as its protocol's documents say: an id
that is not a ULID (HTTP: a path naming nothing, 404; gRPC: INVALID_ARGUMENT naming the field)
and an unknown field (HTTP's bodies refuse it naming it; protobuf skips it, for forward
compatibility), so neither is in the table.
"""

from __future__ import annotations

import abc
import asyncio
import itertools
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any, ClassVar, Literal

import pytest

from actors.messages import ResolveApproval, StartRun
from events import new_id
from events.catalog import AccessDecided, ApprovalRequested, GrantScope
from events.lifecycle import TERMINAL_EVENTS
from projections.queries import RunFilter
from tests.transports.channels.kit import SECRET, SECRET_ENV, channel
from transports.access.tokens import create_token
from transports.config import (
    GrpcConfig,
    HttpConfig,
    JournalConfig,
    LearningSection,
    NodeConfig,
    SessionsConfig,
    ToolsSection,
)
from transports.failures import Kind
from transports.grpc import GrpcServer, start_grpc
from transports.http import HttpServer, start_http
from transports.runtime import Runtime, open_runtime

Command = Literal[
    "create_session",
    "reset_session",
    "list_sessions",
    "start_run",
    "get_run",
    "follow_run",
    "cancel_run",
    "list_approvals",
    "decide_approval",
    "revoke_grant",
    "route_message",
    "journal_head",
]
"""What an API user can ask of both edges."""

ACTION: Mapping[Command, str] = {
    "create_session": "session.create",
    "reset_session": "session.reset",
    "list_sessions": "session.list",
    "start_run": "run.start",
    "get_run": "run.read",
    "follow_run": "run.read",
    "cancel_run": "run.cancel",
    "list_approvals": "approval.list",
    "decide_approval": "approval.resolve",
    "revoke_grant": "grant.revoke",
    "route_message": "channel.route",
    "journal_head": "journal.read",
}
"""The Cedar action each command asks for."""

Caller = Literal["admin", "viewer", "anonymous", "forged"]
"""Who sends it: the admin token, a viewer's API token, no token, a token no node issued."""

Outcome = Kind | Literal["ok"]

SHELL = '/tool shell.run {"argv":["echo","yo"]}'
"""A run whose one tool call waits for a human (shell is ask-each-time)."""
CHANNEL = "hook"
MAX_TEXT = 1024
"""``[sessions] max_message_bytes`` of the node: well under both edges' body limits, so an
oversize text is the command's refusal, not the protocol's."""


class Thing(Enum):
    """What a case's input names, made by the world (:meth:`World.resolve`)."""

    SESSION = "a session"
    UNKNOWN = "a well-formed id nothing has"
    FRESH_KEY = "a session key no session has"
    TAKEN_KEY = "a session key a session has"
    FINISHED_RUN = "a run that has ended"
    LIVE_RUN = "a run waiting for an approval (one per case)"
    PENDING_APPROVAL = "a pending approval (one per case)"
    DECIDED_APPROVAL = "an approval already decided"
    GRANTEE = "a principal holding an always grant of shell.run (one per case)"
    MESSAGE_ID = "a chat message id not seen before"


@dataclass(frozen=True)
class Case:
    """One command, its input and sender, and what it must produce."""

    name: str
    command: Command
    args: Mapping[str, object] = field(default_factory=dict)
    expect: Outcome = "ok"
    field: str | None = None
    """The request field a failure names (the last segment of the edge's path or prefix)."""
    who: Caller = "admin"
    decided: Literal["allow", "deny"] | None = None
    """The ``access.decided`` the authority records before a failure (its one row)."""


# fmt: off
CASES: tuple[Case, ...] = (
    # sessions
    Case("create a session", "create_session", {"session_key": Thing.FRESH_KEY}),
    Case("create a session with a taken key reads it", "create_session",
         {"session_key": Thing.TAKEN_KEY}),
    Case("a session key with a space", "create_session", {"session_key": "two words"},
         "invalid_argument", "session_key"),
    Case("a session key that looks like a secret", "create_session",
         {"session_key": "ghp_" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8"},
         "invalid_argument", "session_key"),
    Case("a viewer creates a session", "create_session", {"session_key": Thing.FRESH_KEY},
         "permission_denied", who="viewer", decided="deny"),
    Case("no token", "create_session", {}, "unauthenticated", who="anonymous"),
    Case("reset a session", "reset_session", {"session_id": Thing.SESSION}),
    Case("reset an unknown session", "reset_session", {"session_id": Thing.UNKNOWN}, "not_found"),
    Case("a viewer resets a session", "reset_session", {"session_id": Thing.SESSION},
         "permission_denied", who="viewer", decided="deny"),
    Case("list sessions", "list_sessions"),
    Case("a viewer lists sessions", "list_sessions", who="viewer"),
    Case("list sessions without a token", "list_sessions", expect="unauthenticated",
         who="anonymous"),
    Case("list sessions with a forged token", "list_sessions", expect="unauthenticated",
         who="forged"),
    # runs
    Case("start a run", "start_run", {"session_id": Thing.SESSION, "text": "hello"}),
    Case("a run in an unknown session", "start_run",
         {"session_id": Thing.UNKNOWN, "text": "hello"}, "not_found"),
    Case("an empty text", "start_run", {"session_id": Thing.SESSION, "text": "  "},
         "invalid_argument", "text"),
    Case("an oversize text", "start_run",
         {"session_id": Thing.SESSION, "text": "x" * (MAX_TEXT + 1)},
         "invalid_argument", "text", decided="allow"),
    Case("a viewer starts a run", "start_run", {"session_id": Thing.SESSION, "text": "hello"},
         "permission_denied", who="viewer", decided="deny"),
    Case("start a run with a forged token", "start_run",
         {"session_id": Thing.SESSION, "text": "hello"}, "unauthenticated", who="forged"),
    Case("read a run", "get_run", {"run_id": Thing.FINISHED_RUN}),
    Case("a viewer reads a run", "get_run", {"run_id": Thing.FINISHED_RUN}, who="viewer"),
    Case("read an unknown run", "get_run", {"run_id": Thing.UNKNOWN}, "not_found"),
    Case("follow a run", "follow_run", {"run_id": Thing.FINISHED_RUN}),
    Case("follow an unknown run", "follow_run", {"run_id": Thing.UNKNOWN}, "not_found"),
    Case("follow a run without a token", "follow_run", {"run_id": Thing.FINISHED_RUN},
         "unauthenticated", who="anonymous"),
    Case("cancel a run", "cancel_run", {"run_id": Thing.LIVE_RUN}),
    Case("cancel a run that has ended", "cancel_run", {"run_id": Thing.FINISHED_RUN},
         "conflict", decided="allow"),
    Case("cancel an unknown run", "cancel_run", {"run_id": Thing.UNKNOWN}, "not_found"),
    Case("a viewer cancels a run", "cancel_run", {"run_id": Thing.LIVE_RUN},
         "permission_denied", who="viewer", decided="deny"),
    # approvals
    Case("list approvals", "list_approvals", {"run_id": Thing.FINISHED_RUN}),
    Case("list approvals of a malformed run id", "list_approvals", {"run_id": "run-1"},
         "invalid_argument", "run_id"),
    Case("list approvals of a tool no tool can be", "list_approvals", {"tool": "Shell Run"},
         "invalid_argument", "tool"),
    Case("decide an approval", "decide_approval",
         {"approval_id": Thing.PENDING_APPROVAL, "decision": "allow"}),
    Case("decide an unknown approval", "decide_approval",
         {"approval_id": Thing.UNKNOWN, "decision": "allow"}, "not_found"),
    Case("decide an approval twice", "decide_approval",
         {"approval_id": Thing.DECIDED_APPROVAL, "decision": "allow"},
         "conflict", decided="allow"),
    Case("decide an approval without a decision", "decide_approval",
         {"approval_id": Thing.PENDING_APPROVAL, "decision": None},
         "invalid_argument", "decision"),
    Case("a viewer decides an approval", "decide_approval",
         {"approval_id": Thing.PENDING_APPROVAL, "decision": "allow"},
         "permission_denied", who="viewer", decided="deny"),
    Case("decide an approval without a token", "decide_approval",
         {"approval_id": Thing.PENDING_APPROVAL, "decision": "allow"},
         "unauthenticated", who="anonymous"),
    Case("revoke an always grant", "revoke_grant",
         {"principal": Thing.GRANTEE, "tool": "shell.run"}),
    Case("revoke an always grant nobody holds", "revoke_grant",
         {"principal": "user:nobody", "tool": "shell.run"}, "conflict", decided="allow"),
    Case("revoke a grant of a tool no tool can be", "revoke_grant",
         {"principal": "user:nobody", "tool": "Shell Run"}, "invalid_argument", "tool"),
    Case("revoke a grant of a malformed principal", "revoke_grant",
         {"principal": "user bob", "tool": "shell.run"}, "invalid_argument", "principal"),
    Case("a viewer revokes a grant", "revoke_grant",
         {"principal": Thing.GRANTEE, "tool": "shell.run"},
         "permission_denied", who="viewer", decided="deny"),
    # channels and the journal
    Case("route a chat message", "route_message",
         {"channel": CHANNEL, "sender": "@alice:localhost", "message_id": Thing.MESSAGE_ID}),
    Case("route into an unknown channel", "route_message",
         {"channel": "nope", "sender": "@alice:localhost", "message_id": Thing.MESSAGE_ID},
         "not_found"),
    Case("route a message from a malformed sender", "route_message",
         {"channel": CHANNEL, "sender": "bob smith", "message_id": Thing.MESSAGE_ID},
         "invalid_argument", "sender", decided="allow"),
    Case("a viewer routes a message", "route_message",
         {"channel": CHANNEL, "sender": "@alice:localhost", "message_id": Thing.MESSAGE_ID},
         "permission_denied", who="viewer", decided="deny"),
    Case("read the journal's head", "journal_head"),
    Case("a viewer reads the journal's head", "journal_head", who="viewer"),
    Case("read the journal's head with a forged token", "journal_head",
         expect="unauthenticated", who="forged"),
)
# fmt: on
"""Every case both edges must answer alike."""


@dataclass
class World:
    """One node serving HTTP and gRPC, its tokens, and the things the cases name."""

    runtime: Runtime
    http: HttpServer
    grpc: GrpcServer
    tokens: Mapping[Caller, str | None]
    session_id: str
    taken_key: str
    finished_run: str
    decided_approval: str
    waiting: dict[str, str] = field(default_factory=dict)
    """The run each waiting run or pending approval the world made belongs to."""
    _serial: Iterator[int] = field(default_factory=itertools.count)

    def resolve(self, args: Mapping[str, object]) -> dict[str, Any]:
        """The case's input with each :class:`Thing` made or looked up."""
        return {k: self._make(v) if isinstance(v, Thing) else v for k, v in args.items()}

    def _make(self, thing: Thing) -> object:
        n = next(self._serial)
        match thing:
            case Thing.SESSION:
                return self.session_id
            case Thing.UNKNOWN:
                return new_id()
            case Thing.FRESH_KEY:
                return f"edge-key-{n}"
            case Thing.TAKEN_KEY:
                return self.taken_key
            case Thing.FINISHED_RUN:
                return self.finished_run
            case Thing.LIVE_RUN | Thing.PENDING_APPROVAL:
                run_id, approval_id = waiting_run(self.runtime)
                self.waiting.update({run_id: run_id, approval_id: run_id})
                return run_id if thing is Thing.LIVE_RUN else approval_id
            case Thing.DECIDED_APPROVAL:
                return self.decided_approval
            case Thing.GRANTEE:
                return always_granted(self.runtime, f"user:grantee-{n}")
            case Thing.MESSAGE_ID:
                return f"edge-message-{n}"

    def ended(self, args: Mapping[str, object]) -> None:
        """Wait for the end of each waiting run ``args`` names, which a command that succeeded
        (a cancel, a decision) has set going again: its last events come after the answer."""
        for value in args.values():
            if isinstance(value, str) and value in self.waiting:
                run_until(self.runtime, self.waiting[value], *TERMINAL_EVENTS)

    def settle(self) -> None:
        """Wait until the views hold every committed row and no run is working (each is done
        or waiting for a human), so what a case appends is the case's own."""
        journal, projector, views = self.runtime.journal, self.runtime.projector, self.runtime.views
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            head = journal.committed_position
            projector.wait_for(head, 5)
            working = [
                run
                for state in ("accepted", "in_progress")
                for run in views.runs(RunFilter(state=state))
            ]
            if not working and journal.committed_position == head:
                return
            time.sleep(0.02)
        raise AssertionError("the node did not settle")


def send(runtime: Runtime, command: Any) -> Any:
    return runtime.node.send(command).result(timeout=30)


def run_until(runtime: Runtime, run_id: str, *kinds: type[Any]) -> Any:
    """The first event of the run of one of ``kinds`` (waiting for it)."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        for stored in runtime.journal.read_correlated(run_id):
            event = stored.decode()
            if isinstance(event, kinds):
                return event
        time.sleep(0.02)
    raise AssertionError(f"run {run_id} never reached {kinds}")


def waiting_run(runtime: Runtime, principal: str = "admin") -> tuple[str, str]:
    """A run of its own session waiting for an approval: (run id, approval id)."""
    ticket = send(runtime, StartRun(text=SHELL, create=True, principal=principal))
    asked: ApprovalRequested = run_until(runtime, ticket.run_id, ApprovalRequested)
    runtime.projector.wait_for(runtime.journal.committed_position, 5)
    return ticket.run_id, asked.approval_id


def decided(runtime: Runtime, principal: str = "admin", scope: GrantScope = "once") -> str:
    """An approval decided (allowed with ``scope``) and its run ended: the approval's id."""
    run_id, approval_id = waiting_run(runtime, principal)
    send(
        runtime,
        ResolveApproval(approval_id=approval_id, decision="allow", scope=scope, principal="admin"),
    )
    run_until(runtime, run_id, *TERMINAL_EVENTS)
    return approval_id


def always_granted(runtime: Runtime, principal: str) -> str:
    """``principal``, now holding an ``always`` grant of shell.run."""
    decided(runtime, principal, "always")
    assert runtime.node.services.gate.has_always(principal, "shell.run")
    return principal


def open_world(data_dir: Path) -> Iterator[World]:
    """The node of every case: HTTP and gRPC on loopback, a webhook channel, no reflection
    after runs and no timed checkpoint (nothing appended that no case asked for)."""
    config = NodeConfig(
        http=HttpConfig(port=0),
        grpc=GrpcConfig(port=0),
        sessions=SessionsConfig(max_message_bytes=MAX_TEXT),
        tools=ToolsSection(shell_allowlist=("echo",)),
        journal=JournalConfig(checkpoint_every_s=3600),
        learning=LearningSection(enabled=False),
        channels={CHANNEL: channel(dm_policy="allow")},
    )
    with pytest.MonkeyPatch.context() as env:
        env.setenv(SECRET_ENV, SECRET)
        runtime = open_runtime(data_dir, config=config)
        try:
            http = start_http(runtime)
            grpc = start_grpc(runtime, port=0)
            try:
                yield _populate(runtime, http, grpc, data_dir)
            finally:
                grpc.close()
                http.close()
        finally:
            runtime.close(grace_s=0)


def _populate(runtime: Runtime, http: HttpServer, grpc: GrpcServer, data_dir: Path) -> World:
    viewer, _ = create_token(
        runtime.journal,
        runtime.authority.tokens,
        principal="user:vera",
        roles=["viewer"],
        created_by="admin",
    )
    # its first use is recorded (token.used, at most hourly): before any case, not during one
    runtime.authority.authenticate(viewer)
    finished = send(runtime, StartRun(text="hello", create=True, principal="admin"))
    run_until(runtime, finished.run_id, *TERMINAL_EVENTS)
    session = send(runtime, StartRun(text="hello", create=True, principal="admin"))
    run_until(runtime, session.run_id, *TERMINAL_EVENTS)
    taken = send(
        runtime, StartRun(text="hello", session_key="edge-taken", create=True, principal="admin")
    )
    run_until(runtime, taken.run_id, *TERMINAL_EVENTS)
    world = World(
        runtime=runtime,
        http=http,
        grpc=grpc,
        tokens={
            "admin": (data_dir / "admin.token").read_text().strip(),
            "viewer": viewer,
            "anonymous": None,
            "forged": "reel_" + "0" * 43,
        },
        session_id=session.session_id,
        taken_key="edge-taken",
        finished_run=finished.run_id,
        decided_approval=decided(runtime),
    )
    world.settle()
    return world


class EdgeConformance(abc.ABC):
    """Subclass per edge: :meth:`send` a case over the edge's protocol, :meth:`check_ok` and
    :meth:`check_failure` its answer. The node is the module's ``world`` fixture."""

    edge: ClassVar[str]

    @abc.abstractmethod
    def send(self, world: World, case: Case, args: dict[str, Any]) -> Any:
        """Send the case's command with ``args`` as ``case.who``; the edge's answer."""

    @abc.abstractmethod
    def check_ok(self, case: Case, answer: Any) -> None:
        """The answer is the command's success."""

    @abc.abstractmethod
    def check_failure(self, case: Case, kind: Kind, answer: Any) -> None:
        """The answer is exactly the edge's answer for ``kind`` (naming ``case.field``)."""

    @pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
    def test_case(self, world: World, case: Case) -> None:
        args = world.resolve(case.args)
        world.settle()
        journal = world.runtime.journal
        before = journal.committed_position
        answer = self.send(world, case, args)
        if case.expect == "ok":
            self.check_ok(case, answer)
            world.ended(args)
            world.settle()
            return
        self.check_failure(case, case.expect, answer)
        world.settle()
        appended = [row.decode() for row in journal.read(before, 1000)]
        expected = [] if case.decided is None else [(ACTION[case.command], case.decided)]
        got = [
            (e.action, e.outcome) if isinstance(e, AccessDecided) else type(e).__name__
            for e in appended
        ]
        assert got == expected, f"{self.edge}: {case.name} appended {got}"


def run_async(coro: Any) -> Any:
    """Run a client coroutine on a fresh loop (the servers have the node's own loop)."""
    return asyncio.run(asyncio.wait_for(coro, 30))


def field_named(path: str) -> str:
    """The last segment of a field path (``$.session_key``, ``query.run_id``,
    ``start.text``)."""
    return path.rsplit(".", 1)[-1]
