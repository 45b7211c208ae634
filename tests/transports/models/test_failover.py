"""Failover between endpoints, each a loopback server speaking the real wire protocol: retries
with back-off, a circuit breaker per endpoint, the next endpoint within the same turn, and the
number of requests dead endpoints receive (no retry storm)."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Iterator
from contextlib import aclosing
from typing import Any

import pytest

from actors.log_fields import FIELDS
from actors.provider import (
    ChatMessage,
    ProviderError,
    ProviderEvent,
    ProviderRequest,
    ProviderUnavailable,
    TextDelta,
    TurnEnd,
    Usage,
)
from tests.transports.models.conftest import FakeAnthropic, FakeOpenAI, ScriptedReply
from tools.handles import VaultHandle
from transports.models.endpoints import EndpointConfig
from transports.models.failover import FailoverProvider

HELLO = ProviderRequest(messages=(ChatMessage(role="user", content="hello there"),))
DOWN = ScriptedReply(status=503, body=b'{"error": {"message": "overloaded"}}')
SECRET = "sk-vaulted-" + "q7" * 16


@pytest.fixture
def servers() -> Iterator[list[FakeOpenAI]]:
    started = [FakeOpenAI(), FakeOpenAI()]
    for server in started:
        server.start()
    try:
        yield started
    finally:
        for server in started:
            server.stop()


def endpoint(name: str, server: FakeOpenAI, **options: Any) -> EndpointConfig:
    defaults: dict[str, Any] = {"model": "m-" + name, "backoff_base_s": 0.001, "timeout_s": 10}
    return EndpointConfig(
        kind="openai", name=name, base_url=server.base_url, **{**defaults, **options}
    )


class Harness:
    """A failover provider with a clock the test moves and the back-off waits recorded."""

    def __init__(self, *endpoints: EndpointConfig, **options: Any) -> None:
        self.now = 1000.0
        self.waits: list[float] = []
        self.provider = FailoverProvider(
            endpoints, clock=lambda: self.now, sleep=self._sleep, **options
        )

    async def _sleep(self, delay: float) -> None:
        self.waits.append(delay)
        await asyncio.sleep(0)

    def turn(self, request: ProviderRequest = HELLO) -> list[ProviderEvent]:
        async def main() -> list[ProviderEvent]:
            try:
                async with aclosing(self.provider.stream(request)) as events:
                    return [event async for event in events]
            finally:
                await self.provider.aclose()

        return asyncio.run(main())

    def fails(self, request: ProviderRequest = HELLO) -> ProviderError:
        with pytest.raises(ProviderError) as caught:
            self.turn(request)
        return caught.value

    def states(self) -> dict[str, str]:
        return {s.name: s.state for s in self.provider.statuses()}


def test_a_dead_first_endpoint_fails_over_within_the_turn(servers: list[FakeOpenAI]) -> None:
    primary, backup = servers
    primary.always = DOWN
    harness = Harness(endpoint("primary", primary), endpoint("backup", backup))

    events = harness.turn()

    assert "".join(e.text for e in events if isinstance(e, TextDelta)) == "hello there"
    (usage,) = [e for e in events if isinstance(e, Usage)]
    assert usage.endpoint == "backup" and usage.model == "gpt-test"  # the server's name for it
    assert events[-1] == TurnEnd("stop")
    assert len(primary.requests) == 3  # 1 + max_retries
    assert len(backup.requests) == 1
    assert len(harness.waits) == 2 and all(0 < w <= 0.002 for w in harness.waits)
    assert harness.states() == {"primary": "open", "backup": "closed"}


def test_every_endpoint_down_fails_unavailable_then_fast_until_a_probe_succeeds(
    servers: list[FakeOpenAI],
) -> None:
    a, b = servers
    a.always = b.always = DOWN
    harness = Harness(
        endpoint("a", a, failure_threshold=3, cooldown_s=30),
        endpoint("b", b, failure_threshold=3, cooldown_s=30),
    )

    first = harness.fails()
    assert isinstance(first, ProviderUnavailable)
    assert "a: provider returned 503: overloaded" in first.message
    assert "b: provider returned 503: overloaded" in first.message
    assert (len(a.requests), len(b.requests)) == (3, 3)
    assert harness.states() == {"a": "open", "b": "open"}

    for _ in range(5):  # the next runs fail fast: not one request reaches a dead endpoint
        again = harness.fails()
        assert isinstance(again, ProviderUnavailable)
        assert "a: circuit open (next probe in 30 s)" in again.message
    assert (len(a.requests), len(b.requests)) == (3, 3)

    harness.now += 30  # the cool-down is over: one probe each, no retries; both still down
    assert harness.states() == {"a": "half_open", "b": "half_open"}
    assert isinstance(harness.fails(), ProviderUnavailable)
    assert (len(a.requests), len(b.requests)) == (4, 4)
    assert harness.states() == {"a": "open", "b": "open"}
    harness.fails()
    assert (len(a.requests), len(b.requests)) == (4, 4)

    b.always = None  # b recovers; its next probe closes its circuit
    harness.now += 30
    events = harness.turn()
    assert next(e for e in events if isinstance(e, Usage)).endpoint == "b"
    assert (len(a.requests), len(b.requests)) == (5, 5)
    assert harness.states() == {"a": "open", "b": "closed"}
    harness.turn()
    assert (len(a.requests), len(b.requests)) == (5, 6)  # a stays out until its cool-down


def test_no_failover_once_output_was_passed_on(servers: list[FakeOpenAI]) -> None:
    primary, backup = servers
    primary.queue(
        primary.reply(
            pieces=[primary.chunk({"role": "assistant", "content": "Hel"})],
            abort_after_pieces=True,
        )
    )
    harness = Harness(endpoint("primary", primary), endpoint("backup", backup))

    async def main() -> tuple[list[ProviderEvent], ProviderError]:
        seen: list[ProviderEvent] = []
        try:
            async with aclosing(harness.provider.stream(HELLO)) as events:
                async for event in events:
                    seen.append(event)
        except ProviderError as error:
            return seen, error
        finally:
            await harness.provider.aclose()
        raise AssertionError("the turn did not fail")

    seen, error = asyncio.run(main())

    assert seen == [TextDelta("Hel")]
    assert not isinstance(error, ProviderUnavailable)
    assert "interrupted" in error.message or "ended before" in error.message
    assert len(primary.requests) == 1 and backup.requests == []  # never streamed twice


def test_a_request_the_endpoint_refuses_as_bad_neither_fails_over_nor_counts(
    servers: list[FakeOpenAI],
) -> None:
    primary, backup = servers
    primary.always = ScriptedReply(status=400, body=b'{"error": {"message": "context too long"}}')
    harness = Harness(endpoint("primary", primary, failure_threshold=1), endpoint("backup", backup))

    error = harness.fails()

    assert not isinstance(error, ProviderUnavailable) and error.status == 400
    assert len(primary.requests) == 1 and backup.requests == []
    assert harness.states() == {"primary": "closed", "backup": "closed"}


def test_a_wrong_key_fails_over_without_retrying(servers: list[FakeOpenAI]) -> None:
    primary, backup = servers
    primary.always = ScriptedReply(status=401, body=b'{"error": {"message": "invalid api key"}}')
    harness = Harness(endpoint("primary", primary), endpoint("backup", backup))

    harness.turn()

    assert len(primary.requests) == 1 and len(backup.requests) == 1


def test_a_retry_after_longer_than_the_back_off_limit_fails_over_at_once(
    servers: list[FakeOpenAI],
) -> None:
    primary, backup = servers
    primary.always = ScriptedReply(
        status=429, body=b'{"error": {"message": "slow down"}}', headers={"Retry-After": "120"}
    )
    harness = Harness(endpoint("primary", primary, backoff_max_s=5), endpoint("backup", backup))

    harness.turn()

    assert len(primary.requests) == 1 and len(backup.requests) == 1
    assert harness.waits == []


def test_a_short_retry_after_is_waited_out_on_the_same_endpoint(
    servers: list[FakeOpenAI],
) -> None:
    primary, backup = servers
    limited = ScriptedReply(
        status=429, body=b'{"error": {"message": "slow down"}}', headers={"Retry-After": "2"}
    )
    primary.queue(limited)
    harness = Harness(endpoint("primary", primary), endpoint("backup", backup))

    events = harness.turn()

    assert next(e for e in events if isinstance(e, Usage)).endpoint == "primary"
    assert harness.waits == [2.0]
    assert len(primary.requests) == 2 and backup.requests == []


def test_weights_share_the_first_try(servers: list[FakeOpenAI]) -> None:
    a, b = servers
    harness = Harness(endpoint("a", a, weight=1), endpoint("b", b, weight=3), rng=random.Random(7))
    for _ in range(40):
        harness.turn()
    assert len(a.requests) + len(b.requests) == 40
    assert 20 <= len(b.requests) <= 38 and len(a.requests) >= 2


def test_unweighted_endpoints_are_tried_in_list_order(servers: list[FakeOpenAI]) -> None:
    a, b = servers
    harness = Harness(endpoint("a", a), endpoint("b", b))
    for _ in range(5):
        harness.turn()
    assert (len(a.requests), len(b.requests)) == (5, 0)


def test_an_endpoint_without_usage_still_names_itself_and_its_model(
    servers: list[FakeOpenAI],
) -> None:
    primary, _ = servers
    primary.queue(primary.reply(pieces=primary.llama_cpp_python_tool_stream("echo", "c1", ["{}"])))
    harness = Harness(endpoint("local", primary, model="smollm2"))

    events = harness.turn()

    assert Usage(prompt_tokens=0, completion_tokens=0, model="smollm2", endpoint="local") in events


def test_a_vault_key_is_sent_and_a_missing_one_fails_over_without_its_value(
    servers: list[FakeOpenAI], fake_anthropic: FakeAnthropic
) -> None:
    primary = servers[0]
    vault = {"openai_key": SECRET}

    def secrets(name: str) -> str:
        from tools.handles import MissingSecret

        if name not in vault:
            raise MissingSecret(name)
        return vault[name]

    gone = endpoint("gone", primary, api_key=VaultHandle(vault="deleted_key"))
    claude = EndpointConfig(
        kind="anthropic",
        name="claude",
        base_url=fake_anthropic.base_url,
        model="claude-test",
        api_key="${vault:openai_key}",
    )
    events = asyncio.run(_turn(FailoverProvider([gone, claude], secrets)))

    assert primary.requests == []  # no key, no request
    assert fake_anthropic.requests[0].headers["x-api-key"] == SECRET
    assert next(e for e in events if isinstance(e, Usage)).endpoint == "claude"

    with pytest.raises(ProviderUnavailable) as caught:
        asyncio.run(_turn(FailoverProvider([gone], secrets)))
    assert "vault handle 'deleted_key' names no secret" in caught.value.message
    assert SECRET not in caught.value.message


async def _turn(provider: FailoverProvider) -> list[ProviderEvent]:
    try:
        async with aclosing(provider.stream(HELLO)) as events:
            return [event async for event in events]
    finally:
        await provider.aclose()


def test_cancelling_a_half_open_probe_lets_the_next_turn_probe(servers: list[FakeOpenAI]) -> None:
    primary, _ = servers
    primary.always = DOWN
    harness = Harness(endpoint("primary", primary, failure_threshold=1, cooldown_s=5))
    harness.fails()
    harness.now += 5
    primary.always = ScriptedReply(delay_before_headers_s=600, pieces=[])

    async def cancelled_probe() -> None:
        async def consume() -> None:
            async for _ in harness.provider.stream(HELLO):
                pass

        task = asyncio.create_task(consume())
        while not primary.requests[1:]:
            await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await harness.provider.aclose()

    asyncio.run(cancelled_probe())
    assert harness.states() == {"primary": "half_open"}
    primary.always = None
    harness.turn()
    assert harness.states() == {"primary": "closed"}


def test_the_log_says_when_a_circuit_opens_and_closes(
    servers: list[FakeOpenAI], caplog: pytest.LogCaptureFixture
) -> None:
    primary, _ = servers
    primary.always = DOWN
    harness = Harness(endpoint("primary", primary, failure_threshold=2, cooldown_s=1))
    with caplog.at_level("INFO", logger="reel.provider"):
        harness.fails()
        primary.always = None
        harness.now += 1
        harness.turn()
    circuit = [
        (r.getMessage(), getattr(r, FIELDS)["circuit"])
        for r in caplog.records
        if r.name == "reel.provider.circuit"
    ]
    assert [state for _, state in circuit] == ["open", "half_open", "closed"]
    assert "circuit open after 2 consecutive failures" in circuit[0][0]


def test_requests_to_a_dead_endpoint_stay_bounded_under_many_concurrent_turns(
    servers: list[FakeOpenAI],
) -> None:
    a, b = servers
    a.always = b.always = DOWN
    harness = Harness(
        endpoint("a", a, failure_threshold=3, max_retries=2),
        endpoint("b", b, failure_threshold=3, max_retries=2),
    )

    async def many() -> list[BaseException | list[ProviderEvent]]:
        async def one() -> list[ProviderEvent]:
            async with aclosing(harness.provider.stream(HELLO)) as events:
                return [event async for event in events]

        try:
            return await asyncio.gather(*(one() for _ in range(20)), return_exceptions=True)
        finally:
            await harness.provider.aclose()

    outcomes = asyncio.run(many())

    assert all(isinstance(o, ProviderUnavailable) for o in outcomes)
    # Turns already in flight when a circuit opened may finish their attempt, but none starts
    # another: far fewer than 20 turns x 3 attempts x 2 endpoints.
    assert len(a.requests) <= 20 + 2 and len(b.requests) <= 20 + 2
    before = (len(a.requests), len(b.requests))
    assert isinstance(harness.fails(), ProviderUnavailable)
    assert (len(a.requests), len(b.requests)) == before


def test_bad_endpoint_config_names_the_field() -> None:
    from transports.config import ConfigError, NodeConfig

    cases = {
        'kind = "openai"\nmodel = "m"': "providers[0].base_url: an openai endpoint needs one",
        'kind = "anthropic"\nmodel = "c"\napi_key = "sk-ant-literal"': (
            "providers[0].api_key: the key is never written in config"
        ),
        'kind = "anthropic"\nmodel = "c"\ntimeout_s = 0': "providers[0].timeout_s",
        'kind = "vertex"': "providers[0].kind",
        'kind = "deterministic"\nweight = -1': "providers[0].weight",
        'kind = "deterministic"\nretries = 3': "providers[0].retries: unknown key",
        'kind = "anthropic"\nmodel = "c"\nstream = false': "providers[0].stream: only an openai",
    }
    for body, problem in cases.items():
        with pytest.raises(ConfigError, match=problem.replace("[", r"\[").replace("]", r"\]")):
            _load(f"[[providers]]\n{body}\n")
    assert isinstance(_load('[[providers]]\nkind = "deterministic"\n'), NodeConfig)


def _load(text: str) -> Any:
    import tempfile
    from pathlib import Path

    from transports.config import load_config

    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "config.toml"
        path.write_text(text)
        return load_config(path, environ={})


def test_the_whole_list_is_checked_when_the_provider_is_made() -> None:
    from transports.config import ConfigError
    from transports.runtime import make_provider

    two = _load('[[providers]]\nkind = "deterministic"\n[[providers]]\nkind = "deterministic"\n')
    with pytest.raises(ConfigError, match=r"providers\[1\]\.name: 'deterministic' is also"):
        make_provider(two)
    unset = _load(
        '[[providers]]\nkind = "anthropic"\nmodel = "c"\napi_key_env = "NOT_SET_ANYWHERE"\n'
    )
    with pytest.raises(ConfigError, match=r"providers\[0\]\.api_key_env: the variable"):
        make_provider(unset, environ={})
    both = _load('[provider]\nkind = "openai"\n[[providers]]\nkind = "deterministic"\n')
    with pytest.raises(ConfigError, match=r"config key provider: .* both set"):
        make_provider(both)


def test_an_unnamed_endpoint_is_named_by_its_url_without_the_password(
    servers: list[FakeOpenAI],
) -> None:
    primary, _ = servers
    url = primary.base_url.replace("http://", "http://bob:hunter2-secret@")
    harness = Harness(EndpointConfig(kind="openai", base_url=url, model="m"))

    events = harness.turn()

    (usage,) = [e for e in events if isinstance(e, Usage)]
    assert usage.endpoint == primary.base_url
    assert "hunter2" not in repr(harness.provider.statuses())


def test_a_time_out_fails_over_at_once_without_a_retry(servers: list[FakeOpenAI]) -> None:
    primary, backup = servers
    primary.always = ScriptedReply(delay_before_headers_s=30, pieces=[])
    harness = Harness(endpoint("primary", primary, timeout_s=0.3), endpoint("backup", backup))

    events = harness.turn()

    assert next(e for e in events if isinstance(e, Usage)).endpoint == "backup"
    assert len(primary.requests) == 1 and harness.waits == []
