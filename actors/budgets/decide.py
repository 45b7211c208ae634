"""What a budget says about what was used: pure functions, no clock and no I/O (the caller
passes ``now_ms`` and the folded usage)."""

from __future__ import annotations

from collections.abc import Mapping

import msgspec

from actors.budgets.config import Budget
from events.catalog import BudgetMeasure, BudgetPeriod, BudgetScope
from projections.usage import DAY, HOUR, MONTH, Column, Counted, Price, utc

FORMATS: dict[BudgetPeriod, str] = {"hour": HOUR, "day": DAY, "month": MONTH}


class Breach(msgspec.Struct, frozen=True, kw_only=True):
    """A limit of ``budget`` (on ``scope`` ``subject``) reached by ``counted``: the principal
    or session whose use was measured (a role's budget counts each member)."""

    budget: str
    scope: BudgetScope
    subject: str
    counted: str
    measure: BudgetMeasure
    period: BudgetPeriod
    period_key: str
    used: float
    limit: float
    hard: bool

    def describe(self) -> str:
        """One line naming the budget, what it counts and how far it got."""
        kind = "hard" if self.hard else "soft"
        used = f"{self.used:.6g}" if self.measure == "cost" else f"{self.used:.0f}"
        whom = f", for {self.counted}" if self.counted != self.subject else ""
        return (
            f"budget {self.budget} ({self.scope} {self.subject}{whom}: {self.measure} per "
            f"{self.period}) reached its {kind} limit: {used} of {self.limit:g} in "
            f"{self.period_key}"
        )


def period_key(period: BudgetPeriod, now_ms: int) -> str:
    """The UTC period ``now_ms`` is in: ``2026-11-27T16``, ``2026-11-27`` or ``2026-11``."""
    return utc(FORMATS[period], now_ms)


def counted(
    budget: Budget, principal: str, roles: tuple[str, ...], session_id: str
) -> tuple[Column, str] | None:
    """Where a run of ``principal`` in ``session_id`` counts against ``budget``: the column and
    value of the usage it is measured by, or None when the budget does not apply. A role's
    budget applies to each principal holding the role on its own (not to the role's sum)."""
    if budget.scope == "principal":
        return ("principal", principal) if budget.subject == principal else None
    if budget.scope == "role":
        return ("principal", principal) if budget.subject in roles else None
    return ("session_id", session_id) if budget.subject == session_id else None


def column_of(budget: Budget) -> Column:
    """The usage column ``budget`` is measured by: a session's for a session budget, else the
    principal's (a role's budget counts each principal holding it)."""
    return "session_id" if budget.scope == "session" else "principal"


def measured(
    measure: BudgetMeasure,
    by_model: Mapping[str, Counted],
    runs: int,
    prices: Mapping[str, Price],
) -> float:
    """The amount ``measure`` counts: input plus output tokens (``by_model``: each model's
    :meth:`UsageTotals.sums <projections.usage.UsageTotals.sums>`), their cost, or runs."""
    if measure == "runs":
        return float(runs)
    if measure == "cost":
        cost = 0.0
        for model, (input_tokens, output_tokens, cached_tokens, _) in by_model.items():
            price = prices.get(model)
            if price is not None:  # an unpriced model counts 0
                cost += price.cost(input_tokens, output_tokens, cached_tokens)
        return cost
    tokens = 0
    for input_tokens, output_tokens, _cached, _turns in by_model.values():
        tokens += input_tokens + output_tokens  # a loop, not sum(genexpr): a check's hot path
    return float(tokens)


def breach(
    name: str, budget: Budget, counted: str, now_ms: int, used: float, *, hard: bool
) -> Breach | None:
    """The breach of ``budget``'s hard (or soft) limit when ``counted``'s ``used`` reached
    it."""
    limit = budget.hard if hard else budget.soft
    if limit is None or used < limit:
        return None
    return Breach(
        budget=name,
        scope=budget.scope,
        subject=budget.subject,
        counted=counted,
        measure=budget.measure,
        period=budget.period,
        period_key=period_key(budget.period, now_ms),
        used=used,
        limit=limit,
        hard=hard,
    )
