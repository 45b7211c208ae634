"""The OTLP/HTTP tracer: a run's spans (actors.tracing.Span) as OpenTelemetry spans, exported by
the SDK's batch processor to ``[telemetry] otlp_endpoint``.

Imported only when telemetry is on (transports.telemetry.open_tracer). The actors hand finished
spans over with their ids and times already chosen, so each becomes a ``ReadableSpan`` as it is
and goes to the :class:`BatchSpanProcessor`: a bounded queue (``max_queue_spans``; when it is
full the oldest span waiting is dropped) that one thread of its own drains in batches over HTTP
with protobuf bodies. A collector that is slow, down or unreachable costs that thread its
``timeout_s`` per batch and costs a run nothing: :meth:`OtlpTracer.record` only appends to the
queue. The node's stop waits for the last spans at most ``timeout_s``.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from importlib.metadata import PackageNotFoundError, version

from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import SpanContext, SpanKind, Status, StatusCode, TraceFlags

from actors.tracing import TURN, Span, trace_id
from transports.config import TelemetryConfig

log = logging.getLogger("reel.telemetry")

_SAMPLED = TraceFlags(TraceFlags.SAMPLED)


def _reel_version() -> str:
    try:
        return version("reel")
    except PackageNotFoundError:
        return "0"


class OtlpTracer:
    """Spans to an OTLP/HTTP collector, off the actors' threads."""

    def __init__(self, config: TelemetryConfig) -> None:
        reel = _reel_version()
        self.resource = Resource.create(
            {"service.name": config.service_name, "service.version": reel}
        )
        self.scope = InstrumentationScope("reel", reel)
        self.exporter = OTLPSpanExporter(endpoint=config.traces_url, timeout=config.timeout_s)
        self.processor = BatchSpanProcessor(
            self.exporter,
            max_queue_size=config.max_queue_spans,
            schedule_delay_millis=config.export_every_s * 1000,
            max_export_batch_size=config.max_batch_spans,
            export_timeout_millis=config.timeout_s * 1000,
        )
        self.timeout_s = config.timeout_s
        self._failed = False

    def record(self, span: Span) -> None:
        """Queue ``span`` for export; never blocks, never raises (a span that cannot be
        queued is dropped and logged once)."""
        try:
            self.processor.on_end(self.readable(span))
        except Exception:
            if not self._failed:
                self._failed = True
                log.warning("a span could not be queued for export; dropped", exc_info=True)

    def readable(self, span: Span) -> ReadableSpan:
        """``span`` as the SDK's finished span: ids, times and attributes as given."""
        trace = trace_id(span.run_id)
        parent = (
            None
            if span.parent_id is None
            else SpanContext(trace, span.parent_id, is_remote=False, trace_flags=_SAMPLED)
        )
        attributes = dict(span.attributes)
        status = Status(StatusCode.UNSET)
        if span.error is not None:
            attributes["error.type"] = span.error
            status = Status(StatusCode.ERROR, span.error)
        return ReadableSpan(
            name=span.name,
            context=SpanContext(trace, span.span_id, is_remote=False, trace_flags=_SAMPLED),
            parent=parent,
            resource=self.resource,
            attributes=attributes,
            kind=SpanKind.CLIENT if span.name == TURN else SpanKind.INTERNAL,
            status=status,
            start_time=span.start_ns,
            end_time=span.end_ns,
            instrumentation_scope=self.scope,
        )

    def close(self) -> None:
        """Export what is queued and stop, waiting at most ``timeout_s``: the SDK's own
        shutdown waits up to 30 s for an export in flight, so it runs on a thread of its own,
        and past the bound the exporter is shut down under it (its last exports give up; what
        they held is dropped)."""
        closer = threading.Thread(target=self._shutdown, name="reel-otlp-close", daemon=True)
        closer.start()
        closer.join(self.timeout_s)
        if closer.is_alive():
            log.warning(
                "the span exporter did not finish within %g s; queued spans dropped",
                self.timeout_s,
            )
            with contextlib.suppress(Exception):
                self.exporter.shutdown()  # type: ignore[no-untyped-call]  # (the SDK's is untyped)

    def _shutdown(self) -> None:
        try:
            self.processor.shutdown()  # type: ignore[no-untyped-call]
        except Exception:
            log.warning("stopping the span exporter failed", exc_info=True)
