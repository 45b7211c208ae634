"""Built-in tools that touch nothing outside the process: echo, time.now, sleep."""

from __future__ import annotations

import time
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Annotated

import msgspec

from tools.config import ToolsConfig
from tools.context import ExecutionContext
from tools.result import Output, ToolFault
from tools.runtime import ToolRuntime, wait
from tools.spec import ToolSpec

__all__ = ["BuiltinRuntime", "EchoArgs", "NoArgs", "SleepArgs"]


class EchoArgs(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    text: Annotated[str, msgspec.Meta(description="Text to return unchanged.")]


class NoArgs(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """No arguments."""


class SleepArgs(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    seconds: Annotated[float, msgspec.Meta(ge=0, description="How long to sleep.")]


class BuiltinRuntime(ToolRuntime):
    """echo / time.now / sleep; low risk, allowed without asking."""

    def __init__(self, config: ToolsConfig) -> None:
        self._config = config

    def specs(self) -> Sequence[ToolSpec]:
        cap = self._config.default_output_cap_bytes

        def spec(
            name: str, description: str, args: type[msgspec.Struct], timeout: float
        ) -> ToolSpec:
            return ToolSpec(
                name=name,
                description=description,
                args_type=args,
                capabilities=frozenset(),
                risk="low",
                default_posture="always_allow",
                timeout_s=timeout,
                output_cap_bytes=cap,
                runtime="builtin",
            )

        return (
            spec("echo", "Return the given text unchanged.", EchoArgs, 5.0),
            spec(
                "time.now", "The current time as ISO-8601 UTC and epoch milliseconds.", NoArgs, 5.0
            ),
            spec(
                "sleep",
                f"Wait for a number of seconds (at most {self._config.sleep_cap_s:g}).",
                SleepArgs,
                self._config.sleep_cap_s + 5.0,
            ),
        )

    def run(self, name: str, args: msgspec.Struct, ctx: ExecutionContext) -> Output:
        if isinstance(args, EchoArgs):
            return Output(text=msgspec.json.encode({"text": args.text}).decode())
        if isinstance(args, SleepArgs):
            if args.seconds > self._config.sleep_cap_s:
                raise ToolFault(
                    "limit",
                    f"seconds: {args.seconds:g} exceeds the cap of {self._config.sleep_cap_s:g}",
                )
            started = time.monotonic()
            wait(ctx, args.seconds)
            slept = round(time.monotonic() - started, 3)
            return Output(text=msgspec.json.encode({"slept_s": slept}).decode())
        if name == "time.now":
            ms = time.time_ns() // 1_000_000
            moment = datetime.fromtimestamp(ms // 1000, tz=UTC).replace(
                microsecond=(ms % 1000) * 1000
            )
            iso = moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")
            body = {"iso": iso, "epoch_ms": ms}
            return Output(text=msgspec.json.encode(body).decode())
        raise ValueError(f"builtin runtime has no tool {name!r}")
