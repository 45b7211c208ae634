"""Budgets as configuration and as pure decisions (docs/usage.md): each bad ``[budgets]`` or
``[usage.prices]`` entry refused naming its key (``reel config show`` and ``reel node`` stop
with it: exit 2); periods and limits measured to the boundary; the soft-limit finding's
subject."""

from __future__ import annotations

import calendar
import itertools
from pathlib import Path

import pytest
from typer.testing import CliRunner

from actors.budgets.config import Budget
from actors.budgets.decide import breach, counted, measured, period_key
from actors.budgets.guard import BudgetGuard
from actors.watchdog.checks import budget_subject, soft_budget
from projections.usage import Price, TokenCounts, UsageTotals, cost_of
from transports.cli.main import app
from transports.config import ConfigError, load_config, unpriced_warnings

# 2026-02-28T23:59:59.500Z and half a second later.
LAST_MS = calendar.timegm((2026, 2, 28, 23, 59, 59)) * 1000 + 500
NEXT_MS = LAST_MS + 500


def config(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "config.toml"
    path.write_text(text)
    return path


@pytest.mark.parametrize(
    ("toml", "key", "words"),
    [
        (
            '[budgets.b]\nscope = "role"\nsubject = "sales"\nmeasure = "tokens"\n'
            'period = "day"\nhard = 5',
            "budgets.b.subject",
            "unknown role 'sales'",
        ),
        (
            '[budgets.b]\nscope = "principal"\nsubject = "user:a"\nmeasure = "tokens"\n'
            'period = "day"\nhard = -1',
            "budgets.b.hard",
            "must be a number >= 0",
        ),
        (
            '[budgets.b]\nscope = "principal"\nsubject = "user:a"\nmeasure = "cost"\n'
            'period = "month"\nsoft = -0.5',
            "budgets.b.soft",
            "must be a number >= 0",
        ),
        (
            '[budgets.b]\nscope = "principal"\nsubject = "user:a"\nmeasure = "runs"\n'
            'period = "day"\nhard = 5',
            "budgets.b.period",
            "a runs budget counts per hour",
        ),
        (
            '[budgets.b]\nscope = "principal"\nsubject = "user:a"\nmeasure = "tokens"\n'
            'period = "day"',
            "budgets.b.hard",
            "needs a hard limit, a soft one or both",
        ),
        (
            '[budgets.b]\nscope = "principal"\nsubject = "user:a"\nmeasure = "tokens"\n'
            'period = "day"\nhard = 5\nsoft = 9',
            "budgets.b.soft",
            "above hard",
        ),
        (
            '[budgets.b]\nscope = "team"\nsubject = "x"\nmeasure = "tokens"\n'
            'period = "day"\nhard = 5',
            "budgets.b.scope",
            "",
        ),
        (
            '[budgets.b]\nscope = "principal"\nsubject = "user:a"\nmeasure = "tokens"\n'
            'period = "day"\nhard = 5\nhardd = 3',
            "budgets.b.hardd",
            "unknown key",
        ),
        (
            '[budgets."Bad Name"]\nscope = "principal"\nsubject = "user:a"\n'
            'measure = "tokens"\nperiod = "day"\nhard = 5',
            "budgets.Bad Name",
            "a name must match",
        ),
        (
            '[usage.prices."gpt-4o"]\ninput_per_mtok = -2.5\noutput_per_mtok = 10',
            "usage.prices.gpt-4o.input_per_mtok",
            "must be a number >= 0",
        ),
        (
            '[usage.prices."gpt-4o"]\ninput_per_mtok = 2.5',
            "usage.prices.gpt-4o",
            "output_per_mtok",
        ),
    ],
)
def test_bad_budgets_and_prices_name_the_key(
    tmp_path: Path, toml: str, key: str, words: str
) -> None:
    path = config(tmp_path, toml)
    with pytest.raises(ConfigError) as caught:
        load_config(path, environ={})
    message = str(caught.value)
    assert f"config key {key}" in message, message
    assert words in message
    shown = CliRunner().invoke(app, ["config", "show", "--data", str(tmp_path)])
    assert isinstance(shown.exception, ConfigError)  # the CLI's exit 2 (EXITS["unusable"])
    assert f"config key {key}" in str(shown.exception)


def test_a_price_for_an_unconfigured_model_is_warned_not_refused(tmp_path: Path) -> None:
    path = config(
        tmp_path,
        '[provider]\nkind = "openai"\nbase_url = "http://127.0.0.1:9/v1"\nmodel = "gpt-4o"\n'
        '[usage.prices."gpt-4o"]\ninput_per_mtok = 2.5\noutput_per_mtok = 10\n'
        '[usage.prices."gpt-4o-2024-08-06"]\ninput_per_mtok = 2.5\noutput_per_mtok = 10\n',
    )
    loaded = load_config(path, environ={})
    (line,) = unpriced_warnings(loaded)
    assert line.startswith('usage.prices."gpt-4o-2024-08-06": no provider is configured')


def test_periods_turn_at_utc_boundaries() -> None:
    assert period_key("day", LAST_MS) == "2026-02-28"
    assert period_key("day", NEXT_MS) == "2026-03-01"
    assert period_key("hour", LAST_MS) == "2026-02-28T23"
    assert period_key("month", LAST_MS) == "2026-02"
    assert period_key("month", NEXT_MS) == "2026-03"
    assert period_key("hour", NEXT_MS) == "2026-03-01T00"


def test_limits_are_reached_at_the_limit() -> None:
    budget = Budget(scope="principal", subject="user:a", measure="tokens", period="day", hard=10)
    assert breach("b", budget, "user:a", LAST_MS, 9, hard=True) is None
    found = breach("b", budget, "user:a", LAST_MS, 10, hard=True)
    assert found is not None and found.period_key == "2026-02-28"
    assert breach("b", budget, "user:a", LAST_MS, 10, hard=False) is None  # no soft limit
    assert found.describe() == (
        "budget b (principal user:a: tokens per day) reached its hard limit: 10 of 10 in 2026-02-28"
    )


def test_who_a_budget_counts() -> None:
    role = Budget(scope="role", subject="agent", measure="tokens", period="day", hard=1)
    assert counted(role, "user:a", ("agent",), "s1") == ("principal", "user:a")
    assert counted(role, "user:a", ("viewer",), "s1") is None
    session = Budget(scope="session", subject="s1", measure="cost", period="month", soft=1)
    assert counted(session, "user:a", (), "s1") == ("session_id", "s1")
    assert counted(session, "user:a", (), "s2") is None
    one = Budget(scope="principal", subject="user:b", measure="runs", period="hour", hard=1)
    assert counted(one, "user:a", (), "s1") is None


def test_cost_and_measures() -> None:
    price = Price(input_per_mtok=3.0, output_per_mtok=15.0, cached_input_per_mtok=0.3)
    tokens = TokenCounts(input_tokens=1_000_000, output_tokens=100_000, cached_tokens=400_000)
    # 600k uncached input at 3, 400k cached at 0.3, 100k output at 15
    assert cost_of("m", tokens, {"m": price}) == pytest.approx(1.8 + 0.12 + 1.5)
    no_cache = Price(input_per_mtok=3.0, output_per_mtok=15.0)
    assert cost_of("m", tokens, {"m": no_cache}) == pytest.approx(3.0 + 1.5)
    assert cost_of("other", tokens, {"m": price}) is None
    by_model = {"m": (1_000_000, 100_000, 400_000, 1), "other": (5, 5, 0, 1)}
    assert measured("tokens", by_model, 0, {"m": price}) == 1_100_010
    assert measured("cost", by_model, 0, {"m": price}) == pytest.approx(3.42)
    assert measured("runs", by_model, 7, {"m": price}) == 7


def test_a_check_names_the_first_budget_reached_in_config_order() -> None:
    """The guard finds a run's budgets by whom they count (its session, its principal, its
    principal's roles); whatever the kinds, the one named is the first reached in
    ``[budgets]``, and a budget of someone else never applies."""
    totals = UsageTotals()
    totals.add(
        {("2026-02-28", "user:a", "s1", "m"): [6, 4, 0, 1]},
        {("user:a", "2026-02-28T23", "s1"): 1},
    )
    budgets = {
        "session": Budget(scope="session", subject="s1", measure="tokens", period="day", hard=10),
        "role": Budget(scope="role", subject="agent", measure="tokens", period="month", hard=10),
        "runs": Budget(scope="principal", subject="user:a", measure="runs", period="hour", hard=1),
    }
    roles = {"user:a": ("agent",)}.get
    for order in itertools.permutations(budgets):
        guard = BudgetGuard({n: budgets[n] for n in order}, {}, totals, lambda p: roles(p, ()))
        refused = guard.refusal("user:a", "s1", LAST_MS)
        assert refused is not None and refused.budget == order[0], order
        crossed = guard.crossed("user:a", "s1", LAST_MS)  # a runs budget ends no run
        assert crossed is not None and crossed.budget == next(n for n in order if n != "runs")
        assert guard.refusal("user:b", "s2", LAST_MS) is None
        other = guard.refusal("user:b", "s1", LAST_MS)  # user:b holds no role: the session's
        assert other is not None and (other.budget, other.counted) == ("session", "s1")
        assert guard.refusal("user:a", "s1", NEXT_MS) is None  # a new hour, day and month


def test_a_soft_finding_names_budget_whom_and_period() -> None:
    budget = Budget(scope="principal", subject="user:a", measure="tokens", period="day", soft=5)
    found = breach("b", budget, "user:a", LAST_MS, 6, hard=False)
    assert found is not None
    finding = soft_budget(found)
    assert (finding.domain, finding.subject, finding.action) == (
        "budget",
        "b.2026-02-28.user:a",
        None,
    )
    assert finding.evidence.measure == "tokens_per_day" and finding.evidence.limit == 5
    odd = breach("b", budget, "channel:matrix:@a/b=c", LAST_MS, 6, hard=False)
    assert odd is not None
    subject = budget_subject(odd)
    assert subject.startswith("b.2026-02-28.") and len(subject) <= 64 and "/" not in subject
