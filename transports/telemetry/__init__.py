"""Traces of runs for an observability stack (docs/telemetry.md): ``[telemetry]``.

Nothing here is imported by a node without ``[telemetry] otlp_endpoint``: :func:`open_tracer`
returns None and the actors build no span. With it set, the OpenTelemetry SDK and its OTLP/HTTP
exporter (the ``telemetry`` extra) are imported then, in :mod:`transports.telemetry.otlp`; the
``OTEL_*`` variables alone never turn telemetry on.
"""

from __future__ import annotations

from typing import Protocol

from actors.tracing import Tracer
from transports.config import ConfigError, TelemetryConfig


class NodeTracer(Tracer, Protocol):
    """A tracer the node stops when it stops."""

    def close(self) -> None:
        """Send what is queued (within ``[telemetry] timeout_s``), then stop; never raises."""


def open_tracer(config: TelemetryConfig) -> NodeTracer | None:
    """The OTLP/HTTP tracer ``config`` asks for, or None when ``otlp_endpoint`` is unset.
    Raises ConfigError naming the extra to install when the SDK is not there."""
    if not config.otlp_endpoint:
        return None
    try:
        from transports.telemetry.otlp import OtlpTracer
    except ImportError as exc:
        raise ConfigError(
            "config key telemetry.otlp_endpoint: traces need the telemetry extra "
            f"(pip install 'reel[telemetry]'; {exc.name or exc} is missing)"
        ) from None
    return OtlpTracer(config)
