"""The circuit breaker alone, on a clock the test moves."""

from __future__ import annotations

import pytest

from transports.models.circuit import Breaker


class BreakerClock:
    def __init__(self) -> None:
        self.now = 50.0

    def __call__(self) -> float:
        return self.now


def test_opens_after_the_threshold_of_consecutive_failures_and_a_success_resets() -> None:
    breaker = Breaker(3, 10, BreakerClock())
    assert [breaker.failure(), breaker.failure()] == [None, None]
    assert breaker.success() is None and breaker.failures == 0  # closed all along
    assert [breaker.failure(), breaker.failure(), breaker.failure()] == [None, None, "open"]
    assert breaker.state == "open" and breaker.acquire() == "skip"


def test_half_open_lets_one_probe_through_and_its_outcome_decides() -> None:
    clock = BreakerClock()
    breaker = Breaker(1, 10, clock)
    breaker.failure()
    clock.now += 9.9
    assert breaker.acquire() == "skip" and breaker.retry_in_s() == pytest.approx(0.1)
    clock.now += 0.1
    assert breaker.state == "half_open"
    assert breaker.acquire() == "probe"
    assert breaker.acquire() == "skip"  # one probe in flight at a time
    assert breaker.failure() == "open"  # the probe failed: a fresh cool-down
    assert breaker.acquire() == "skip" and breaker.retry_in_s() == 10
    clock.now += 10
    assert breaker.acquire() == "probe"
    assert breaker.success() == "closed"
    assert (breaker.state, breaker.acquire()) == ("closed", "go")


def test_a_probe_without_a_verdict_frees_the_slot() -> None:
    clock = BreakerClock()
    breaker = Breaker(1, 0, clock)
    breaker.failure()
    assert breaker.acquire() == "probe"
    breaker.release()
    assert breaker.state == "half_open" and breaker.acquire() == "probe"


@pytest.mark.parametrize(("threshold", "cooldown"), [(0, 1.0), (1, -1.0)])
def test_bad_settings_name_the_field(threshold: int, cooldown: float) -> None:
    with pytest.raises(ValueError, match=r"failure_threshold|cooldown_s"):
        Breaker(threshold, cooldown)
