"""``GET /metrics``: Prometheus text exposition (format 0.0.4), written by hand.

Families:

- ``reel_build_info{version}`` (gauge, always 1): the build serving
  (:func:`transports.build.version`);
- ``reel_runs{state}`` (gauge): runs by state, from the runs view; every state is listed;
- ``reel_events_appended_total`` (counter): events committed to the journal (its head position,
  so it survives restarts and never goes down);
- ``reel_append_latency_seconds`` (histogram): submit-to-commit time of journal appends since
  the node started, as the journal's writer measures it (``Journal.append_latency``);
- ``reel_approvals_pending`` (gauge): approvals waiting for a human;
- ``reel_incidents_open{domain}`` (gauge): incidents the watchdog opened and has not resolved,
  from the incidents view; every domain is listed (run, task, approval, projector, journal,
  budget);
- ``reel_tokens_total{model,kind}`` (counter): tokens by model as the usage view names it
  (docs/usage.md) and kind (``input``, ``output``, ``cached``: the part of input served from a
  prompt cache), since the journal began; ``reel_cost_total`` (counter): their cost by
  ``[usage.prices]`` (models with no price count 0);
- ``reel_tasks{state}`` (gauge): background tasks by state, from the tasks view; every state
  is listed (queued, running, retrying, succeeded, failed, expired, cancelled);
- ``reel_projection_lag_events`` (gauge): committed events the views have not applied yet;
- ``reel_http_sse_streams`` (gauge): open Server-Sent Events responses;
- ``reel_channel_webhook_bad_signatures_total``, ``reel_channel_duplicates_total``
  (counters): webhook requests refused for their signature, and channel messages dropped as
  repeats of a message id already routed, since the node started;
- ``reel_witness_appended_total``, ``reel_witness_failures_total`` (counters),
  ``reel_witness_pending`` (gauge): the checkpoint witness's appends since the node started,
  failed attempts, and checkpoints waiting to be written (only when a witness is configured);
- ``reel_process_threads``, ``reel_process_open_fds``, ``reel_views_connections{reader}``
  (gauges): the process's threads, its open file descriptors, and the connections each views
  reader holds; ``reel_process_start_time_seconds`` (gauge): when the process started
  (``reel status`` shows the uptime from it);
- ``reel_provider_circuit{endpoint,state}`` (gauge, 1 for the endpoint's state) and
  ``reel_provider_attempts_total{endpoint,outcome}`` (counter): each model endpoint's circuit
  breaker and its requests since the node started (only when the node fails over between
  endpoints: docs/providers.md, "Failover");
- ``reel_cluster_shards{state}`` (gauge: ``held``, ``serving``),
  ``reel_cluster_lease_renewals_total`` (counter), ``reel_cluster_lease_seconds_left``
  (gauge: until the node fences itself unless a renewal comes),
  ``reel_cluster_forwards_total{direction}`` (counter: ``sent`` to other nodes, ``served`` for
  them), ``reel_cluster_singletons{name}`` (gauge, 1 where this node holds it: ``watchdog``,
  ``schedules``, ``channel:<name>``), ``reel_cluster_horizon_lag_seconds`` (gauge: the age of
  the oldest write transaction open in the database), ``reel_cluster_follow_age_seconds``
  (gauge: since the node last read the database's head): a cluster node's shards, forwarding,
  singletons and lag (only with ``[cluster] node``; docs/scale-out.md).
"""

from __future__ import annotations

import math
import os
import threading
import time
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Protocol

from aiohttp import web

from events.lifecycle import RunStatus
from events.task_lifecycle import TaskStatus
from projections.usage import total_cost
from transports.build import version
from transports.cluster.singletons import SINGLETONS
from transports.http import tasks
from transports.http.context import CONTEXT, ApiContext, permit
from transports.http.providers import failover_of
from transports.models.circuit import CIRCUIT_STATES
from transports.models.failover import EndpointStatus

if TYPE_CHECKING:
    from transports.cluster.member import ClusterMember

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
RUN_STATES = tuple(RunStatus)

routes = web.RouteTableDef()


def _process_start() -> float:
    """When this process started (seconds since the epoch): its start in clock ticks after
    boot (``/proc/self/stat`` field 22) plus the boot time (``/proc/stat`` btime), as
    Prometheus' client libraries compute ``process_start_time_seconds``."""
    try:
        with open("/proc/self/stat") as stat:
            ticks = int(stat.read().rpartition(")")[2].split()[19])
        with open("/proc/stat") as boot:
            btime = next(int(line.split()[1]) for line in boot if line.startswith("btime "))
    except (OSError, ValueError, IndexError, StopIteration):
        return time.time()
    return btime + ticks / os.sysconf("SC_CLK_TCK")


STARTED = _process_start()


class HistogramFigures(Protocol):
    @property
    def buckets(self) -> Sequence[tuple[float, int]]: ...
    @property
    def sum_s(self) -> float: ...
    @property
    def count(self) -> int: ...


class LatencySource(Protocol):
    def snapshot(self) -> HistogramFigures: ...


def _number(value: float) -> str:
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    if float(value).is_integer():
        return str(int(value))
    return repr(float(value))


def _bound(value: float) -> str:
    """A bucket's ``le`` label as Prometheus clients write it (``1.0``, ``0.25``, ``+Inf``)."""
    return "+Inf" if math.isinf(value) else repr(float(value))


def _label(value: str) -> str:
    """A label value escaped as the exposition format asks (backslash, quote, newline)."""
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _family(name: str, kind: str, help_text: str, samples: Iterable[str]) -> list[str]:
    return [f"# HELP {name} {help_text}", f"# TYPE {name} {kind}", *samples]


def histogram_lines(name: str, help_text: str, snapshot: HistogramFigures) -> list[str]:
    """A histogram family from cumulative ``(upper bound, count)`` buckets (+Inf last)."""
    samples = [
        f'{name}_bucket{{le="{_bound(bound)}"}} {count}' for bound, count in snapshot.buckets
    ]
    if not snapshot.buckets or not math.isinf(snapshot.buckets[-1][0]):
        samples.append(f'{name}_bucket{{le="+Inf"}} {snapshot.count}')
    samples += [f"{name}_sum {_number(snapshot.sum_s)}", f"{name}_count {snapshot.count}"]
    return _family(name, "histogram", help_text, samples)


def render(ctx: ApiContext, task_states: dict[str, int]) -> str:
    """The whole exposition for the node behind ``ctx`` (``task_states``: the tasks view's
    counts by state)."""
    runtime = ctx.runtime
    committed = runtime.journal.committed_position
    views_position = runtime.projector.position
    states = ctx.views.run_states()
    names = [*RUN_STATES, *sorted(set(states) - set(RUN_STATES))]
    lines = _family(
        "reel_build_info",
        "gauge",
        "The build serving: its version label (release, and +g<commit> from a checkout).",
        [f'reel_build_info{{version="{version()}"}} 1'],
    )
    lines += _family(
        "reel_runs",
        "gauge",
        "Runs by state (runs view).",
        (f'reel_runs{{state="{state}"}} {states.get(state, 0)}' for state in names),
    )
    lines += _family(
        "reel_events_appended_total",
        "counter",
        "Events committed to the journal.",
        [f"reel_events_appended_total {committed}"],
    )
    source: LatencySource | None = getattr(runtime.journal, "append_latency", None)
    if source is not None:
        lines += histogram_lines(
            "reel_append_latency_seconds",
            "Journal append latency, submit to commit, since the node started.",
            source.snapshot(),
        )
    lines += _family(
        "reel_approvals_pending",
        "gauge",
        "Approvals waiting for a human decision.",
        [f"reel_approvals_pending {ctx.views.pending_approvals()}"],
    )
    lines += _family(
        "reel_incidents_open",
        "gauge",
        "Open incidents by domain (incidents view; docs/operations.md, Watchdog).",
        (
            f'reel_incidents_open{{domain="{domain}"}} {n}'
            for domain, n in runtime.incidents.open_counts().items()
        ),
    )
    usage = runtime.usage.totals()
    lines += _family(
        "reel_tokens_total",
        "counter",
        "Tokens by model and kind (input, output, cached) since the journal began (usage view).",
        (
            f'reel_tokens_total{{model="{_label(model)}",kind="{kind}"}} {count}'
            for model, t in sorted(usage.items())
            for kind, count in (
                ("input", t.input_tokens),
                ("output", t.output_tokens),
                ("cached", t.cached_tokens),
            )
        ),
    )
    cost = total_cost(usage, runtime.config.usage.prices)
    lines += _family(
        "reel_cost_total",
        "counter",
        "Cost of those tokens by [usage.prices] (unpriced models count 0).",
        [f"reel_cost_total {_number(cost)}"],
    )
    lines += _family(
        "reel_tasks",
        "gauge",
        "Background tasks by state (tasks view; docs/tasks.md).",
        (f'reel_tasks{{state="{state}"}} {task_states.get(state, 0)}' for state in TaskStatus),
    )
    lines += _family(
        "reel_projection_lag_events",
        "gauge",
        "Committed events the views have not applied yet.",
        [f"reel_projection_lag_events {max(0, committed - views_position)}"],
    )
    lines += _family(
        "reel_http_sse_streams",
        "gauge",
        "Open Server-Sent Events responses.",
        [f"reel_http_sse_streams {ctx.streams}"],
    )
    channels = runtime.channels  # None: no channel configured, nothing counted
    lines += _family(
        "reel_channel_webhook_bad_signatures_total",
        "counter",
        "Webhook requests refused for a missing or wrong X-Reel-Signature since the node "
        "started (nothing else is recorded of them).",
        [f"reel_channel_webhook_bad_signatures_total {channels.bad_signatures if channels else 0}"],
    )
    lines += _family(
        "reel_channel_duplicates_total",
        "counter",
        "Channel messages delivered again with a message id already routed, since the node "
        "started (dropped: at most one run per message).",
        [f"reel_channel_duplicates_total {channels.duplicates if channels else 0}"],
    )
    lines += _family(
        "reel_process_threads",
        "gauge",
        "Threads of the node's process.",
        [f"reel_process_threads {threading.active_count()}"],
    )
    lines += _family(
        "reel_process_start_time_seconds",
        "gauge",
        "When the node's process started, in seconds since the epoch (uptime: now minus this).",
        [f"reel_process_start_time_seconds {STARTED:.3f}"],
    )
    lines += _family(
        "reel_process_open_fds",
        "gauge",
        "File descriptors the node's process holds open.",
        [f"reel_process_open_fds {open_fds()}"],
    )
    readers = {
        "views": runtime.views,
        "memory": runtime.memory.view,
        "incidents": runtime.incidents,
        "usage": runtime.usage,
        "learning": runtime.learning.view,
        "http": ctx.views,
    }
    lines += _family(
        "reel_views_connections",
        "gauge",
        "Read connections to views.db open now, by reader ([views] readers bounds each).",
        (
            f'reel_views_connections{{reader="{name}"}} {r.connections}'
            for name, r in readers.items()
        ),
    )
    failover = failover_of(runtime.node.services.provider)
    if failover is not None:
        lines += _provider_lines(failover.statuses())
    if runtime.cluster is not None:
        lines += _cluster_lines(runtime.cluster)
    witness = getattr(runtime.journal, "witness", None)
    if witness is not None:
        status = witness.status
        lines += _family(
            "reel_witness_appended_total",
            "counter",
            "Signed checkpoints appended to the witness since the node started.",
            [f"reel_witness_appended_total {status.appended}"],
        )
        lines += _family(
            "reel_witness_failures_total",
            "counter",
            "Failed witness appends since the node started (each is retried).",
            [f"reel_witness_failures_total {status.failures}"],
        )
        lines += _family(
            "reel_witness_pending",
            "gauge",
            "Signed checkpoints not yet written to the witness.",
            [f"reel_witness_pending {status.pending}"],
        )
    return "\n".join(lines) + "\n"


def _cluster_lines(cluster: ClusterMember) -> list[str]:
    figures = cluster.figures()
    return [
        *_family(
            "reel_cluster_shards",
            "gauge",
            "Data shards this node holds a lease on, and those it serves (recovered).",
            (
                f'reel_cluster_shards{{state="held"}} {figures.held}',
                f'reel_cluster_shards{{state="serving"}} {figures.serving}',
            ),
        ),
        *_family(
            "reel_cluster_lease_renewals_total",
            "counter",
            "Successful renewals of this node's leases since it started.",
            [f"reel_cluster_lease_renewals_total {figures.renewals}"],
        ),
        *_family(
            "reel_cluster_lease_seconds_left",
            "gauge",
            "Seconds until this node fences itself unless a renewal comes first.",
            [f"reel_cluster_lease_seconds_left {_number(figures.seconds_left)}"],
        ),
        *_family(
            "reel_cluster_forwards_total",
            "counter",
            "Commands and appends forwarded since the node started: sent to other nodes, served "
            "for them.",
            (
                f'reel_cluster_forwards_total{{direction="sent"}} {figures.sent}',
                f'reel_cluster_forwards_total{{direction="served"}} {figures.served}',
            ),
        ),
        *_family(
            "reel_cluster_horizon_lag_seconds",
            "gauge",
            "The age of the oldest write transaction open in the journal's database: one left "
            "open stalls every node's readers and appends (alarm well above a second).",
            [f"reel_cluster_horizon_lag_seconds {_number(figures.horizon_lag_s)}"],
        ),
        *_family(
            "reel_cluster_follow_age_seconds",
            "gauge",
            "Seconds since this node last read the database's head: how stale its knowledge of "
            "other nodes' commits may be (the database away: it grows).",
            [f"reel_cluster_follow_age_seconds {_number(figures.follow_age_s)}"],
        ),
        *_family(
            "reel_cluster_singletons",
            "gauge",
            "The work one node does for the cluster (watchdog, schedules, each chat channel) "
            "this node holds.",
            (
                f'reel_cluster_singletons{{name="{name}"}} {int(name in figures.singletons)}'
                for name in sorted({*SINGLETONS, *figures.wanted})
            ),
        ),
    ]


def _provider_lines(statuses: Sequence[EndpointStatus]) -> list[str]:
    lines = _family(
        "reel_provider_circuit",
        "gauge",
        "Each model endpoint's circuit breaker: 1 for its state (closed, open, half_open), 0 for "
        "the others (docs/providers.md, Failover).",
        (
            f'reel_provider_circuit{{endpoint="{_label(s.name)}",state="{state}"}} '
            f"{int(s.state == state)}"
            for s in statuses
            for state in CIRCUIT_STATES
        ),
    )
    lines += _family(
        "reel_provider_attempts_total",
        "counter",
        "Requests to each model endpoint since the node started, by outcome (success, failure).",
        (
            f'reel_provider_attempts_total{{endpoint="{_label(s.name)}",outcome="{outcome}"}} {n}'
            for s in statuses
            for outcome, n in (("success", s.successes), ("failure", s.failures))
        ),
    )
    return lines


def open_fds() -> int:
    """How many descriptors this process holds (-1 where ``/proc/self/fd`` is not there)."""
    try:
        return len(os.listdir("/proc/self/fd"))
    except OSError:
        return -1


@routes.get("/metrics")
async def get_metrics(request: web.Request) -> web.Response:
    await permit(request, "node.read")
    body = render(request.app[CONTEXT], request.app[tasks.VIEW].counts()).encode()
    return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE})
