"""``reel node``: the daemon in the foreground.

Starts the node over a data dir (recovering whatever a crash left in flight), logs one JSON line
per run state change on stderr, and on SIGTERM or SIGINT drains: stops accepting runs, lets live
runs finish for a grace period, cancels the rest, signs a final checkpoint and exits 0.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
from collections.abc import Callable
from pathlib import Path

import msgspec

from events import JournalTampered
from transports.auth import token_path
from transports.config import NodeConfig, load_config
from transports.grpc import start_grpc
from transports.http import start_http
from transports.runlog import RunStateLogger
from transports.runtime import open_runtime


def log_line(message: str, **fields: object) -> None:
    """A structured line on stderr."""
    sys.stderr.write(json.dumps({"msg": message, **fields}) + "\n")
    sys.stderr.flush()


def serve(
    data_dir: Path,
    *,
    config: NodeConfig | None = None,
    config_path: Path | None = None,
    ready: Callable[[], None] | None = None,
    drain_grace_s: float = 10.0,
) -> int:
    """Run until SIGTERM/SIGINT; returns the exit code (0 after a clean drain, 2 when the full
    verification of the journal, run while serving, found it tampered: the node stops serving
    at once and signs nothing)."""
    cfg = config or load_config(config_path or data_dir / "config.toml")
    stop = threading.Event()
    tampered: list[JournalTampered] = []

    def on_tampered(error: JournalTampered) -> None:
        tampered.append(error)
        stop.set()

    runtime = open_runtime(data_dir, config=cfg, on_tampered=on_tampered)
    try:
        http = start_http(runtime)
    except BaseException:
        runtime.close(0)
        raise
    try:
        grpc = start_grpc(runtime)
    except BaseException:
        http.close()
        runtime.close(0)
        raise
    recovery = runtime.node.recovery
    if recovery.interrupted_runs or recovery.closed_approvals or recovery.resumed:
        log_line(
            "recovered after an unclean stop",
            interrupted_runs=list(recovery.interrupted_runs),
            closed_approvals=list(recovery.closed_approvals),
            resumed_runs=[run.state.run_id for run in recovery.resumed],
        )
    witness = runtime.journal.witness
    if witness is None:
        log_line(
            "journal unwitnessed: set [journal] witness (REEL_JOURNAL_WITNESS) to a file outside "
            "the data dir, or whoever holds the data dir can rewrite the journal and sign it again"
        )
    elif witness.same_volume_as(data_dir):
        log_line(
            "journal witness is on the data dir's filesystem: put it on another volume",
            witness=str(witness.path),
        )
    logger = RunStateLogger(runtime.journal, lambda line: log_line_raw(line))
    logger.start()

    def on_signal(signum: int, _frame: object) -> None:
        log_line("draining", signal=signal.Signals(signum).name)
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    # A tool that cannot run here (shell.run without a working sandbox) says so at start.
    unavailable = runtime.node.services.catalog.unavailable()
    log_line(
        "reel node ready",
        pid=os.getpid(),
        data_dir=str(data_dir),
        console=http.url + "/",
        grpc=grpc.address,
        token_file=str(token_path(data_dir)),
        provider=cfg.provider.kind,
        unavailable_tools=unavailable,
        config=msgspec.to_builtins(cfg.runs),
        journal_head=runtime.journal.committed_position,
        public_key=runtime.journal.node_key.origin if runtime.journal.node_key else None,
        witness=str(witness.path) if witness is not None else None,
    )
    print(
        f"reel node ready: console {http.url}/  token file {token_path(data_dir)}  "
        f"gRPC {grpc.address}"
        + "".join(f"  ({name} disabled: {why})" for name, why in unavailable.items()),
        flush=True,
    )
    if ready is not None:
        ready()
    # A timed wait: Python runs a signal handler only when the main thread wakes, and a bare
    # ``wait()`` can sleep through a SIGTERM the kernel delivered to another thread.
    while not stop.wait(0.5):
        pass
    if tampered:
        log_line("journal tampered: not serving it", error=str(tampered[0]))
    try:
        grpc.close()  # before the node: the servers run on the node's I/O loop
        http.close()
        runtime.close(0 if tampered else drain_grace_s)
    finally:
        logger.stop()
    log_line("reel node stopped", head=runtime.journal.committed_position)
    if tampered:
        sys.stderr.write(f"reel: error: {tampered[0]}\n")
        return 2
    return 0


def log_line_raw(line: str) -> None:
    sys.stderr.write(line + "\n")
    sys.stderr.flush()
