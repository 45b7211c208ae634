"""``reel node``: the daemon in the foreground.

Starts the node over a data dir (recovering whatever a crash left in flight) and logs JSON lines
on stderr (transports.logs): the ready line, one per run state change, the drain. On SIGTERM,
SIGINT or SIGHUP (its terminal went away; there is no reload: the config is read only at start)
it drains:

1. both listeners stay up; HTTP ``/healthz`` answers 503 ``{"status": "draining"}`` and gRPC
   health NOT_SERVING; new sessions and runs are refused (``NodeDraining``: HTTP 503
   ``unavailable``, gRPC UNAVAILABLE); streams of live runs go on;
2. live runs get the grace period to finish (a ``drain progress`` line each second says how many
   are still in flight), then the rest are cancelled; runs waiting for a human stay as they are
   and resume on the next start;
3. the listeners close, the final checkpoint is signed, exit 0.

A second such signal stops the process at once (exit 128 + the signal's number): no final
checkpoint, and the journal still verifies (every append is one SQLite transaction); the next
start resolves what was in flight, as after a crash.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
from collections.abc import Callable
from pathlib import Path

import msgspec

from actors.log_fields import fields
from events import JournalTampered
from events.redaction.redact import detectors
from transports.access.auth import is_recognisable, load_or_create_token, token_path
from transports.build import version
from transports.config import NodeConfig, env_overrides, load_config
from transports.grpc import GrpcServer, start_grpc
from transports.http import start_http
from transports.node.node_file import NodeAddresses, remove_addresses, write_addresses
from transports.node.runlog import RunStateLogger
from transports.node.stopper import Stopper
from transports.node.terminal import take_terminal
from transports.runtime import Runtime, open_runtime

log = logging.getLogger("reel.node")

DRAIN_PROGRESS_S = 1.0
"""How often a drain logs how many runs are still in flight."""


def serve(
    data_dir: Path,
    *,
    config: NodeConfig | None = None,
    config_path: Path | None = None,
    ready: Callable[[], None] | None = None,
) -> int:
    """Run until SIGTERM/SIGINT; returns the exit code (0 after a clean drain, 2 when the full
    verification of the journal, run while serving, found it tampered: the node stops serving
    at once and signs nothing).

    ``config_path`` is the file the config comes from (default ``<data>/config.toml``); with
    ``config`` it is only named on the ready line ("embedded defaults" when it does not exist).
    Raises ConfigError, HttpStartError, GrpcStartError, JournalError, ... when it cannot start.
    """
    config_file = config_path or data_dir / "config.toml"
    give_back_terminal = take_terminal()
    stopper = Stopper(give_back_terminal)
    stopper.install()
    # The first log line and the first append need the redaction detectors' index (a few
    # milliseconds: their expressions are compiled only when a text needs them): built on its
    # own thread while the node opens, whose SQLite reads release the GIL. It ends once done.
    threading.Thread(target=detectors, name="redaction-compile", daemon=True).start()
    try:
        cfg = config or load_config(config_file)
        return _serve(
            data_dir,
            cfg,
            config_file if config_file.is_file() else None,
            stopper,
            ready,
        )
    finally:
        stopper.close()
        give_back_terminal()


def _serve(
    data_dir: Path,
    cfg: NodeConfig,
    config_file: Path | None,
    stopper: Stopper,
    ready: Callable[[], None] | None,
) -> int:
    tampered: list[JournalTampered] = []

    def on_tampered(error: JournalTampered) -> None:
        tampered.append(error)
        stopper.request()

    runtime = open_runtime(data_dir, config=cfg, on_tampered=on_tampered)
    remove_addresses(data_dir)  # a killed node's: this one holds the data dir now
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
        log.warning(
            "recovered after an unclean stop",
            extra=fields(
                interrupted_runs=list(recovery.interrupted_runs),
                closed_approvals=list(recovery.closed_approvals),
                resumed_runs=[run.state.run_id for run in recovery.resumed],
            ),
        )
    witness = runtime.journal.witness
    if witness is None and runtime.config.journal.backend == "postgres":
        log.warning(
            "journal unwitnessed: set [journal] witness (REEL_JOURNAL_WITNESS) to a file outside "
            "the data dir, or whoever can write the database can rewrite a shard chain and "
            "remove the super-checkpoints that sign it"
        )
    elif witness is None:
        log.warning(
            "journal unwitnessed: set [journal] witness (REEL_JOURNAL_WITNESS) to a file outside "
            "the data dir, or whoever holds the data dir can rewrite the journal and sign it again"
        )
    elif witness.same_volume_as(data_dir):
        log.warning(
            "journal witness is on the data dir's filesystem: put it on another volume",
            extra=fields(witness=str(witness.path)),
        )
    if not is_recognisable(load_or_create_token(data_dir)):
        log.warning(
            "admin.token predates the reel_admin_ prefix, so redaction cannot recognise it if "
            "it is pasted into a message: delete the file and restart for a new one",
            extra=fields(token_file=str(token_path(data_dir))),
        )
    run_states = RunStateLogger(runtime.journal)
    run_states.start()
    # Before the ready line: whoever saw it finds the node.
    write_addresses(
        data_dir,
        NodeAddresses(
            pid=os.getpid(),
            http_host=http.host,
            http_port=http.port,
            grpc_host=grpc.host,
            grpc_port=grpc.port,
        ),
    )
    # A tool that cannot run here (shell.run without a working sandbox) says so at start.
    unavailable = runtime.node.services.catalog.unavailable()
    provider = cfg.provider.kind + (f" (model {cfg.provider.model})" if cfg.provider.model else "")
    if cfg.providers:  # [[providers]]: the endpoints in failover order
        provider = "failover " + ", ".join(f"{e.label} ({e.kind} {e.model})" for e in cfg.providers)
    log.info(
        "reel node ready",
        extra=fields(
            version=version(),
            pid=os.getpid(),
            data_dir=str(data_dir),
            console=http.url + "/",
            grpc=grpc.address,
            token_file=str(token_path(data_dir)),
            config_file=str(config_file) if config_file is not None else None,
            env_overrides=env_overrides(),
            provider="failover" if cfg.providers else cfg.provider.kind,
            model=cfg.primary_model() or None,
            unavailable_tools=unavailable,
            config=msgspec.to_builtins(cfg.runs),
            journal_head=runtime.journal.committed_position,
            public_key=runtime.journal.node_key.origin if runtime.journal.node_key else None,
            witness=str(witness.path) if witness is not None else None,
            cluster=(
                {"node": cfg.cluster.node, "internal": runtime.cluster.address}
                if runtime.cluster is not None
                else None
            ),
        ),
    )
    print(
        f"reel node ready: version {version()}  console {http.url}/  "
        f"token file {token_path(data_dir)}  "
        f"gRPC {grpc.address}  config {config_file or 'embedded defaults'}  provider {provider}"
        + "".join(f"  ({name} disabled: {why})" for name, why in unavailable.items())
        + "  (Ctrl-C drains and stops)",
        flush=True,
    )
    # The walk over every row holds the interpreter most of the time: begun with the journal,
    # it took half the start-up's turns. Nothing is signed until it passes, as before.
    runtime.journal.start_verifying()
    if ready is not None:
        ready()
    while not stopper.wait(0.5):
        pass
    if tampered:
        log.error("journal tampered: not serving it", extra=fields(error=str(tampered[0])))
    else:
        drain(runtime, grpc, cfg.runs.drain_grace_s, stopper.signal_name)
    remove_addresses(data_dir, os.getpid())  # clients stop finding this node
    try:
        grpc.close()  # before the node: the servers run on the node's I/O loop
        http.close()
        runtime.close(0)  # drained already (or tampered: nothing more may be signed)
    finally:
        run_states.stop()
    log.info(
        "reel node stopped",
        extra=fields(
            head=runtime.journal.committed_position,
            # false: the full verification was stopped before it ended, so nothing new was
            # signed (the next start verifies again)
            journal_verified=runtime.journal.verified,
        ),
    )
    if tampered:
        print(f"reel: error: {tampered[0]}", file=sys.stderr)
        return 2
    return 0


def drain(runtime: Runtime, grpc: GrpcServer, grace_s: float, signal_name: str | None) -> None:
    """Refuse new work, let live runs finish for ``grace_s``, cancel the rest; the listeners stay
    up throughout (health says draining). Logs ``draining``, a ``drain progress`` line every
    ``DRAIN_PROGRESS_S`` while runs remain, and ``drained``."""
    registry = runtime.node.services.registry

    def counts() -> dict[str, int]:
        waiting = registry.runs_awaiting_approval()
        live = registry.live_runs()
        return {
            "runs_in_flight": sum(1 for run_id in live if run_id not in waiting),
            "awaiting_approval": sum(1 for run_id in live if run_id in waiting),
        }

    # Before the line: whoever reads "draining" finds /healthz, gRPC health and new runs saying so.
    runtime.node.services.draining = True
    grpc.mark_draining()
    log.info("draining", extra=fields(signal=signal_name, grace_s=grace_s, **counts()))
    finished = threading.Event()

    def report() -> None:
        while not finished.wait(DRAIN_PROGRESS_S):
            log.info("drain progress", extra=fields(**counts()))

    reporter = threading.Thread(target=report, name="drain-progress", daemon=True)
    reporter.start()
    try:
        runtime.node.drain(grace_s)
    finally:
        finished.set()
        reporter.join()
    log.info("drained", extra=fields(**counts()))
