"""``reel status``: is the node up, and what is it doing: where it listens, its version and
uptime, the journal's head and last signed checkpoint, how far the views trail, live runs,
pending approvals, open incidents, the task queue and each model endpoint's circuit state.

Read from the node's own answers (``/healthz``, ``/v1/journal/head``,
``/v1/journal/checkpoints``, ``/metrics``; the token needs ``node.read`` and ``journal.read``),
never guessed from files. With no node on the data dir it says so, with the journal's head as
the file holds it, and exits 1.
"""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Any

import msgspec
import typer

from events.lifecycle import RunStatus
from events.task_lifecycle import TaskStatus
from transports.cli.node_api import api, call, online, refused, text
from transports.cli.options import DataOption, JsonOption, TokenFileOption

_SAMPLE = re.compile(r"^(?P<name>[a-z_]+)(?:\{(?P<labels>[^}]*)\})? (?P<value>\S+)$")
LIVE_STATES = tuple(state.value for state in RunStatus if not state.terminal)
QUEUE_STATES = tuple(state.value for state in TaskStatus if not state.terminal)


class Status(msgspec.Struct, kw_only=True):
    """What ``reel status --json`` prints."""

    running: bool
    data_dir: str
    http: str | None = None
    grpc: str | None = None
    version: str | None = None
    health: str | None = None
    uptime_s: float | None = None
    journal_position: int = 0
    journal_hash: str | None = None
    last_checkpoint: int | None = None
    last_checkpoint_age_s: float | None = None
    views_behind: int | None = None
    runs: dict[str, int] = msgspec.field(default_factory=dict)
    approvals_pending: int | None = None
    incidents_open: dict[str, int] = msgspec.field(default_factory=dict)
    tasks: dict[str, int] = msgspec.field(default_factory=dict)
    providers: dict[str, str] = msgspec.field(default_factory=dict)
    """Each model endpoint's circuit state (closed, open, half_open); none on a node with the
    deterministic provider alone."""


def status(
    data: DataOption = None, json: JsonOption = False, token_file: TokenFileOption = None
) -> None:
    """Whether a node runs on the data dir and what it is doing: address, version, uptime,
    journal head and last checkpoint, views lag, live runs, pending approvals, open incidents,
    the task queue, each model endpoint's circuit. Exit 1 when no node runs."""
    from transports.cli.data_dir import existing

    data_dir = existing(data)
    node = online(data_dir)
    found = _live(node, token_file) if node is not None else _stopped(data_dir)
    if json:
        print(msgspec.json.encode(found).decode())
    else:
        for name, value in _lines(found):
            print(f"{name:<11} {value}")
    if not found.running:
        raise typer.Exit(1)


def _live(node: Path, token_file: Path | None) -> Status:
    from transports.cli.node_address import grpc_address, http_base

    code, health = call(node, token_file, "GET", "/healthz")
    if code not in (200, 503):  # 503: draining, still an answer
        raise refused(health, code)
    head = api(node, token_file, "GET", "/v1/journal/head", None, 200)
    samples = _samples(text(node, token_file, "/metrics"))
    checkpoint = _last_checkpoint(node, token_file)
    started = _one(samples, "reel_process_start_time_seconds")
    return Status(
        running=True,
        data_dir=str(node),
        http=http_base(node),
        grpc=grpc_address(node),
        version=health.get("version"),
        health=health.get("status"),
        uptime_s=None if started is None else max(0.0, time.time() - started),
        journal_position=head["position"],
        journal_hash=head["hash"],
        last_checkpoint=None if checkpoint is None else checkpoint["position"],
        last_checkpoint_age_s=(
            None
            if checkpoint is None
            else max(0.0, time.time() - checkpoint["signed_at_ms"] / 1000)
        ),
        views_behind=max(0, head["position"] - head["views_position"]),
        runs=_by(samples, "reel_runs", "state"),
        approvals_pending=int(_one(samples, "reel_approvals_pending") or 0),
        incidents_open=_by(samples, "reel_incidents_open", "domain"),
        tasks=_by(samples, "reel_tasks", "state"),
        providers={
            labels["endpoint"]: labels["state"]
            for n, labels, value in samples
            if n == "reel_provider_circuit" and value == 1 and "endpoint" in labels
        },
    )


def _last_checkpoint(node: Path, token_file: Path | None) -> dict[str, Any] | None:
    """The newest signed checkpoint (the list is oldest first: follow it to its end)."""
    last: dict[str, Any] | None = None
    after = -1
    while True:
        path = f"/v1/journal/checkpoints?after={after}&limit=1000"
        page = api(node, token_file, "GET", path, None, 200)
        if page["items"]:
            last = page["items"][-1]
        if page.get("next_after") is None:
            return last
        after = page["next_after"]


def _stopped(data_dir: Path) -> Status:
    """What the files say when no node runs: the journal's head and last checkpoint."""
    from events import JournalReader
    from transports.cli.data_dir import journal_path

    path = journal_path(data_dir)
    if not path.exists():
        return Status(running=False, data_dir=str(data_dir))
    reader = JournalReader.open(path)
    try:
        head = reader.head()
        checkpoint = reader.last_checkpoint()
    finally:
        reader.close()
    return Status(
        running=False,
        data_dir=str(data_dir),
        journal_position=head.position,
        journal_hash=head.hash.hex() if head.position else None,
        last_checkpoint=None if checkpoint is None else checkpoint.position,
        last_checkpoint_age_s=None if checkpoint is None else _age(checkpoint.signed_at_ms),
    )


def _samples(exposition: str) -> list[tuple[str, dict[str, str], float]]:
    """The samples of a Prometheus text exposition: ``(name, labels, value)``."""
    out: list[tuple[str, dict[str, str], float]] = []
    for line in exposition.splitlines():
        match = _SAMPLE.match(line)
        if match is None:
            continue
        labels = dict(re.findall(r'(\w+)="([^"]*)"', match["labels"] or ""))
        try:
            out.append((match["name"], labels, float(match["value"])))
        except ValueError:
            continue
    return out


def _one(samples: list[tuple[str, dict[str, str], float]], name: str) -> float | None:
    return next((value for n, _, value in samples if n == name), None)


def _by(samples: list[tuple[str, dict[str, str], float]], name: str, label: str) -> dict[str, int]:
    return {
        labels[label]: int(value) for n, labels, value in samples if n == name and label in labels
    }


def _age(ms: int) -> float:
    """Seconds since ``ms`` (milliseconds since the epoch)."""
    return max(0.0, time.time() - ms / 1000)


def _ago(seconds: float) -> str:
    seconds = int(seconds)
    if seconds < 120:
        return f"{seconds} s"
    if seconds < 7200:
        return f"{seconds // 60} min"
    if seconds < 172_800:
        return f"{seconds // 3600} h {seconds % 3600 // 60} min"
    return f"{seconds // 86400} days"


def _lines(s: Status) -> list[tuple[str, str]]:
    checkpoint = (
        "none signed yet"
        if s.last_checkpoint is None
        else f"at {s.last_checkpoint}, {_ago(s.last_checkpoint_age_s or 0)} ago"
    )
    head = f"{s.journal_position}" + (f" ({s.journal_hash[:16]}...)" if s.journal_hash else "")
    if not s.running:
        return [
            ("node", f"not running on {s.data_dir}"),
            ("journal", f"head {head}"),
            ("checkpoint", checkpoint),
        ]
    live = {state: s.runs.get(state, 0) for state in LIVE_STATES}
    queue = {state: s.tasks.get(state, 0) for state in QUEUE_STATES}
    open_incidents = {domain: n for domain, n in s.incidents_open.items() if n}
    return [
        ("node", f"{s.health} at {s.http} (gRPC {s.grpc}), data dir {s.data_dir}"),
        ("version", s.version or "-"),
        ("uptime", _ago(s.uptime_s) if s.uptime_s is not None else "-"),
        ("journal", f"head {head}"),
        ("checkpoint", checkpoint),
        ("views", "current" if not s.views_behind else f"{s.views_behind} events behind"),
        ("runs", f"{sum(live.values())} live ({_counts(live)})"),
        ("approvals", f"{s.approvals_pending} pending"),
        (
            "incidents",
            f"{sum(open_incidents.values())} open"
            + (f" ({_counts(open_incidents)})" if open_incidents else ""),
        ),
        ("tasks", f"{sum(queue.values())} owed ({_counts(queue)})"),
        ("providers", ", ".join(f"{n} {state}" for n, state in s.providers.items()) or "-"),
    ]


def _counts(counts: dict[str, int]) -> str:
    return ", ".join(f"{name} {n}" for name, n in counts.items())
