"""A loopback OTLP/HTTP trace receiver: what a collector would be sent, parsed as one parses it.

Each ``POST /v1/traces`` body is kept as received (gunzipped when the exporter compressed it)
and parsed with opentelemetry-proto's own ``ExportTraceServiceRequest``; the answer is the
protocol's ``ExportTraceServiceResponse``. ``hold()`` keeps every request waiting for an answer
until ``release()`` (a collector that has stopped answering).
"""

from __future__ import annotations

import asyncio
import gzip
import threading
from dataclasses import dataclass
from typing import Any

from aiohttp import web
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue

from tests.tools.conftest import LoopbackServer


@dataclass(frozen=True)
class Collected:
    """One span as the collector received it."""

    name: str
    trace_id: int
    span_id: int
    parent_id: int | None
    start_ns: int
    end_ns: int
    kind: int
    status_code: int
    """0 unset, 1 ok, 2 error (``Status.StatusCode``)."""
    status_message: str
    attributes: dict[str, Any]
    resource: dict[str, Any]
    scope: str


def value_of(value: AnyValue) -> Any:
    which = value.WhichOneof("value")
    if which == "array_value":
        return [value_of(v) for v in value.array_value.values]
    if which == "kvlist_value":
        return attributes_of(value.kvlist_value.values)
    return getattr(value, which) if which else None


def attributes_of(pairs: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for pair in pairs:
        assert isinstance(pair, KeyValue)
        out[pair.key] = value_of(pair.value)
    return out


class OtlpCollector(LoopbackServer):
    def __init__(self) -> None:
        super().__init__()
        self.lock = threading.Lock()
        self.bodies: list[bytes] = []
        """Every request body, as the exporter meant it (gunzipped), in arrival order."""
        self.content_types: list[str] = []
        self.other_paths: list[str] = []
        self._released: asyncio.Event | None = None

    async def _start(self) -> None:
        self._released = asyncio.Event()
        self._released.set()
        app = web.Application()
        app.router.add_post("/v1/traces", self._traces)
        app.router.add_route("*", "/{tail:.*}", self._other)
        self._runner = web.AppRunner(app, shutdown_timeout=0.5, handler_cancellation=True)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        server = site._server
        assert isinstance(server, asyncio.Server)
        self.port = server.sockets[0].getsockname()[1]

    async def _traces(self, request: web.Request) -> web.Response:
        raw = await request.read()
        if request.headers.get("Content-Encoding") == "gzip":
            raw = gzip.decompress(raw)
        with self.lock:
            self.bodies.append(raw)
            self.content_types.append(request.headers.get("Content-Type", ""))
        assert self._released is not None
        await self._released.wait()
        return web.Response(
            body=ExportTraceServiceResponse().SerializeToString(),
            content_type="application/x-protobuf",
        )

    async def _other(self, request: web.Request) -> web.Response:
        with self.lock:
            self.other_paths.append(f"{request.method} {request.path}")
        return web.Response(status=404)

    def hold(self) -> None:
        """Leave every request from now on without an answer until :meth:`release`."""
        self.loop.call_soon_threadsafe(self._event().clear)

    def release(self) -> None:
        self.loop.call_soon_threadsafe(self._event().set)

    def _event(self) -> asyncio.Event:
        assert self._released is not None
        return self._released

    def requests(self) -> int:
        with self.lock:
            return len(self.bodies)

    def spans(self) -> list[Collected]:
        """Every span of every request received so far, in order."""
        with self.lock:
            bodies = list(self.bodies)
        out: list[Collected] = []
        for body in bodies:
            message = ExportTraceServiceRequest()
            message.ParseFromString(body)
            for resource_spans in message.resource_spans:
                resource = attributes_of(resource_spans.resource.attributes)
                for scope_spans in resource_spans.scope_spans:
                    for span in scope_spans.spans:
                        out.append(
                            Collected(
                                name=span.name,
                                trace_id=int.from_bytes(span.trace_id, "big"),
                                span_id=int.from_bytes(span.span_id, "big"),
                                parent_id=(
                                    int.from_bytes(span.parent_span_id, "big")
                                    if span.parent_span_id
                                    else None
                                ),
                                start_ns=span.start_time_unix_nano,
                                end_ns=span.end_time_unix_nano,
                                kind=span.kind,
                                status_code=span.status.code,
                                status_message=span.status.message,
                                attributes=attributes_of(span.attributes),
                                resource=resource,
                                scope=scope_spans.scope.name,
                            )
                        )
        return out
