"""Node: composes and supervises the actor system of one data dir.

``start()`` recovers what a crash left in flight, starts the I/O loop and the session directory;
``send()`` hands a command to the directory (or, in a cluster, to the ``router``: the node that
owns the session's shard) and returns its reply future; ``drain()`` stops
accepting work, lets live runs finish for a while, cancels the rest; ``stop()`` drains, stops
every actor and signs a final checkpoint. ``watch()`` starts the watchdog (incidents), which the
drain stops first.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Collection
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

import msgspec
import pykka

from actors.approvals.gate import ToolGate
from actors.config import ActorsConfig
from actors.io_loop import IoLoop
from actors.messages import AdoptSessions, CancelRun, DropSessions
from actors.provider import ModelProvider
from actors.services import MemoryPort, Services
from actors.system.recovery import RecoveryReport
from actors.system.recovery import recover as recover_runs
from actors.tasks.queue import TaskQueue, TasksConfig
from actors.tasks.store import load_open_tasks
from events import JournalPort
from tools import ToolCatalog

if TYPE_CHECKING:
    from actors.watchdog.actor import WatchdogPort
    from actors.watchdog.checks import WatchdogConfig

C = TypeVar("C", bound=msgspec.Struct)


class CommandRouter(Protocol):
    """Where a cluster node's commands go (:mod:`transports.cluster.router`)."""

    def send(self, command: Any) -> Future[Any]: ...


class Node:
    """The running actor system. Not an actor itself: transports call it from any thread."""

    def __init__(
        self,
        *,
        journal: JournalPort,
        provider: ModelProvider,
        catalog: ToolCatalog,
        gate: ToolGate,
        workspace: Path,
        config: ActorsConfig | None = None,
        memory: MemoryPort | None = None,
        tasks: TasksConfig | None = None,
        task_clock: Callable[[], int] | None = None,
    ) -> None:
        """``memory``: the memory view runs search for auto-injection and ``@memory``
        references (None: runs are shown no memory). ``tasks``: the background task queue's
        pool and leases (``node.tasks``, docs/tasks.md); ``task_clock``: now in epoch ms, by which
        the queue sets and decides leases (a cluster: the database's; default the wall clock)."""
        self.journal = journal
        self.io = IoLoop()
        self.services = Services(
            journal=journal,
            io=self.io,
            provider=provider,
            catalog=catalog,
            gate=gate,
            workspace=workspace,
            config=config or ActorsConfig(),
            memory=memory,
        )
        self.recovery = RecoveryReport()
        self.tasks = (
            TaskQueue(journal, self.io, tasks)
            if task_clock is None
            else TaskQueue(journal, self.io, tasks, clock=task_clock)
        )
        """The background task queue: enqueue work, register handlers (actors.tasks.queue)."""
        self.services.tasks = self.tasks
        self.watchdog: pykka.ActorRef[Any] | None = None
        self.router: CommandRouter | None = None
        """In a cluster: sends each command to its session's owner (set by the composition)."""
        self._started = False

    def start(self, *, recover: bool = True) -> RecoveryReport:
        """Recover, then start the directory. Returns what recovery resolved. ``recover=False``
        (a cluster node, which owns no shard yet): only the ``always`` grants are loaded; each
        shard is recovered as it is acquired (:meth:`recover_shards`)."""
        from actors.system.directory import SessionDirectory

        services = self.services
        # The unfinished tasks are read on a thread while recovery reads the unfinished runs:
        # two indexed queries of tens of milliseconds at a million events, each in SQLite
        # (which lets go of the interpreter), side by side. Recovery appends to no task stream,
        # and nothing enqueues before the queue starts (the reflection feed starts after it).
        with ThreadPoolExecutor(1, thread_name_prefix="open-tasks") as reader:
            reading = reader.submit(load_open_tasks, self.journal, None if recover else ())
            self.recovery = recover_runs(
                self.journal,
                services.gate,
                services.turns,
                services.config,
                services.batching(),
                shards=None if recover else (),
            )
            open_tasks = reading.result()
        services.offer_tools()
        services.directory = SessionDirectory.start(services)
        self._resume(self.recovery)
        self.tasks.start(open_tasks)
        self._started = True
        return self.recovery

    def _resume(self, report: RecoveryReport) -> None:
        from actors.runs.actor import RunActor

        for run in report.resumed:
            RunActor.start(
                self.services,
                state=run.state,
                prior=run.prior,
                grants=run.grants,
                postures=dict(run.postures),
                invocations=run.invocations,
            )

    def recover_shards(self, shards: Collection[int]) -> RecoveryReport:
        """A cluster node acquired ``shards``: resolve what their runs left in flight exactly
        as a start does, resume the runs waiting for a human, let the directory learn their
        sessions, and take on their unfinished tasks. Call before routing any command to
        them."""
        services = self.services
        report = recover_runs(
            self.journal,
            services.gate,
            services.turns,
            services.config,
            services.batching(),
            shards=frozenset(shards),
            grants=False,
        )
        directory = services.directory
        if directory is not None:
            directory.ask(AdoptSessions(shards=frozenset(shards)))
        self._resume(report)
        self.tasks.adopt(load_open_tasks(self.journal, frozenset(shards)))
        return report

    def release_shards(self, session: Callable[[str], bool]) -> None:
        """A cluster node lost the shards whose sessions ``session(id)`` picks (handed over,
        or its lease could lapse): stop their runs and sessions where they stand. Their appends
        would be refused anyway; the new owner's recovery ends or resumes what they left."""
        directory = self.services.directory
        if directory is not None:
            with contextlib.suppress(pykka.ActorDeadError, pykka.Timeout):
                directory.ask(DropSessions(session=session), timeout=10)
        registry = self.services.registry
        runs = registry.live_runs_where(session)
        for run_id, ref in runs.items():
            with contextlib.suppress(pykka.ActorDeadError, pykka.Timeout):
                ref.stop(block=True, timeout=5)
            registry.run_dropped(run_id)  # not live here: the session must not wait on it
        for run_id in registry.queued_runs_where(session):  # their sessions stopped with them
            registry.run_dropped(run_id)
        for approval_id, ref in registry.approvals_of(runs.keys()).items():
            # the tool actor waiting for a human: the new owner's recovery waits again
            registry.approval_closed(approval_id)
            with contextlib.suppress(pykka.ActorDeadError, pykka.Timeout):
                ref.stop(block=True, timeout=5)

    def watch(self, port: WatchdogPort, config: WatchdogConfig, **options: Any) -> None:
        """Start the watchdog over ``port`` (call once the views follow the journal), in place
        of the one running, if any; options as :class:`~actors.watchdog.actor.WatchdogActor`.
        The drain stops it first."""
        from actors.watchdog.actor import WatchdogActor

        self.stop_watchdog()
        self.watchdog = WatchdogActor.start(self.services, port, config, **options)

    def stop_watchdog(self) -> None:
        """Stop the watchdog (after the look it is in, if any); idempotent."""
        watchdog, self.watchdog = self.watchdog, None
        if watchdog is not None:
            with contextlib.suppress(pykka.ActorDeadError, pykka.Timeout):
                watchdog.stop(block=True, timeout=10)

    def send(self, command: C) -> Future[Any]:
        """Deliver a command (``StartRun``, ``CancelRun``, ...) and return its reply future; in
        a cluster, to the node owning the session it names (:attr:`router`)."""
        if self.router is not None:
            return self.router.send(command)
        return self.send_here(command)

    def send_here(self, command: C) -> Future[Any]:
        """Deliver a command to this node's own directory (a cluster's router does, for the
        sessions this node owns)."""
        reply: Future[Any] = Future()
        directory = self.services.directory
        if directory is None:
            raise RuntimeError("node is not started")
        directory.tell(msgspec.structs.replace(command, reply=reply))
        return reply

    def ask(self, command: C, timeout: float | None = 30.0) -> Any:
        """``send`` and wait for the reply (for transports and tests, never for actors)."""
        return self.send(command).result(timeout)

    def drain(self, grace_s: float = 10.0) -> None:
        """Stop accepting runs; give live runs ``grace_s`` to finish; cancel the rest.

        Runs waiting for a human are left as they are: the journal shows them awaiting approval,
        and the next start resumes them (actors.system.recovery). The watchdog stops first: it never
        acts on runs the drain is ending."""
        self.services.draining = True
        self.tasks.drain()  # no new attempts; running ones get the same grace as runs
        self.stop_watchdog()
        registry = self.services.registry

        def working() -> dict[str, Any]:
            waiting = registry.runs_awaiting_approval()
            return {r: ref for r, ref in registry.live_runs().items() if r not in waiting}

        deadline = time.monotonic() + grace_s
        while (working() or self.tasks.running()) and time.monotonic() < deadline:
            time.sleep(0.05)
        for run_id, ref in working().items():
            with contextlib.suppress(pykka.ActorDeadError):
                ref.tell(CancelRun(run_id=run_id, principal="node:drain"))
        deadline = time.monotonic() + 5.0
        while working() and time.monotonic() < deadline:
            time.sleep(0.02)

    def stop(self, grace_s: float = 10.0) -> None:
        """Drain, stop every actor and the I/O loop. The journal stays open (its owner closes
        it, signing the final checkpoint)."""
        if not self._started:
            self.io.stop()
            return
        self.drain(grace_s)
        directory = self.services.directory
        if directory is not None:
            with contextlib.suppress(pykka.ActorDeadError, pykka.Timeout):
                directory.stop(block=True, timeout=10)
        self.tasks.stop(grace_s=1.0)  # attempts still running are left to lapse and be reclaimed
        registry = self.services.registry
        leftovers = list(registry.live_runs().values())
        leftovers += [ref for a in registry.pending_approvals() if (ref := registry.approval(a))]
        for ref in leftovers:  # runs and tools left waiting for a human: resumed on next start
            with contextlib.suppress(pykka.ActorDeadError, pykka.Timeout):
                ref.stop(block=True, timeout=5)
        provider = self.services.provider
        with contextlib.suppress(Exception):
            self.io.submit(provider.aclose()).result(timeout=5)
        self.io.stop()
        self._started = False
