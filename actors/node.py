"""Node: composes and supervises the actor system of one data dir.

``start()`` recovers what a crash left in flight, starts the I/O loop and the session directory;
``send()`` hands a command to the directory and returns its reply future; ``drain()`` stops
accepting work, lets live runs finish for a while, cancels the rest; ``stop()`` drains, stops
every actor and signs a final checkpoint.
"""

from __future__ import annotations

import contextlib
import time
from concurrent.futures import Future
from pathlib import Path
from typing import Any, TypeVar

import msgspec
import pykka

from actors.config import ActorsConfig
from actors.gate import ToolGate
from actors.io_loop import IoLoop
from actors.messages import CancelRun
from actors.provider import ModelProvider
from actors.recovery import RecoveryReport, recover
from actors.services import Services
from events import Journal
from tools import ToolCatalog

C = TypeVar("C", bound=msgspec.Struct)


class Node:
    """The running actor system. Not an actor itself: transports call it from any thread."""

    def __init__(
        self,
        *,
        journal: Journal,
        provider: ModelProvider,
        catalog: ToolCatalog,
        gate: ToolGate,
        workspace: Path,
        config: ActorsConfig | None = None,
    ) -> None:
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
        )
        self.recovery = RecoveryReport()
        self._started = False

    def start(self) -> RecoveryReport:
        """Recover, then start the directory. Returns what recovery resolved."""
        from actors.directory import SessionDirectory

        self.recovery = recover(self.journal, self.services.gate)
        self.services.offer_tools()
        self.services.directory = SessionDirectory.start(self.services)
        self._started = True
        return self.recovery

    def send(self, command: C) -> Future[Any]:
        """Deliver a command (``StartRun``, ``CancelRun``, ...) and return its reply future."""
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
        """Stop accepting runs; wait up to ``grace_s`` for live runs; cancel what is left."""
        self.services.draining = True
        registry = self.services.registry
        deadline = time.monotonic() + grace_s
        while registry.live_run_count() and time.monotonic() < deadline:
            if registry.pending_approvals():
                break  # a run waiting for a human will not finish by itself
            time.sleep(0.05)
        for ref in registry.all_live_runs():
            with contextlib.suppress(pykka.ActorDeadError):
                ref.tell(CancelRun(run_id="", principal="node:drain"))
        deadline = time.monotonic() + 5.0
        while registry.live_run_count() and time.monotonic() < deadline:
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
        pykka.ActorRegistry.stop_all(block=True, timeout=5)
        provider = self.services.provider
        with contextlib.suppress(Exception):
            self.io.submit(provider.aclose()).result(timeout=5)
        self.io.stop()
        self._started = False
