"""The budget guard: the node's budgets checked against the usage view's fold.

Budget state is never a journal scan nor a query per check: every number comes from
:class:`projections.usage.UsageTotals`, the current month's sums that the usage view's own fold
keeps in memory as the projector commits each batch (and rebuilds by the same fold when the
node starts). It trails the journal by the records not yet folded (usually milliseconds), so:

- before a run is accepted (:meth:`BudgetGuard.refusal`) the check counts what is folded;
  runs started together may each pass before any of them spent a token;
- at a turn boundary (:meth:`BudgetGuard.crossed`) what is folded plus everything the run itself
  used (part of which may be folded already: counted twice) bounds the use from above; only
  when that bound reaches a limit does the guard let the view catch up with the journal
  (``settle``, bounded) and measure again, so the run's own last turn is counted without a
  wait on every turn.

A hard limit therefore bounds use to the limit plus at most one turn per run in flight.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping

from actors.budgets.config import Budget
from actors.budgets.decide import Breach, breach, counted, measured, period_key
from policies import UsageToday
from projections.usage import Column, Price, TokenCounts, UsageTotals, cost_of, day_of

Roles = Callable[[str], tuple[str, ...]]


class BudgetGuard:
    """``[budgets]`` and ``[usage.prices]`` over the usage view's totals; safe to share
    between threads (it keeps no state of its own)."""

    def __init__(
        self,
        budgets: Mapping[str, Budget],
        prices: Mapping[str, Price],
        totals: UsageTotals,
        roles_of: Roles,
        settle: Callable[[], None] = lambda: None,
    ) -> None:
        self.budgets = dict(budgets)
        self.prices = dict(prices)
        self.totals = totals
        self.roles_of = roles_of
        self.settle = settle
        """Wait (bounded) until the view includes the journal's head."""
        self._role_budgets = any(b.scope == "role" for b in self.budgets.values())
        self._dearest = max(
            (
                max(p.input_per_mtok, p.output_per_mtok, p.cached_input_per_mtok or 0.0)
                for p in self.prices.values()
            ),
            default=0.0,
        )
        """The highest price per million tokens: what a token of unknown kind costs at most."""

    def _applying(
        self, principal: str, session_id: str
    ) -> Iterator[tuple[str, Budget, Column, str]]:
        """Each budget that counts a run of ``principal`` in ``session_id``, with the usage
        column and value it is measured by (no budget: nothing, and no read)."""
        if not self.budgets:
            return
        roles = self.roles_of(principal) if self._role_budgets else ()
        for name, budget in self.budgets.items():
            where = counted(budget, principal, roles, session_id)
            if where is not None:
                column, value = where
                yield name, budget, column, value

    def _used(self, budget: Budget, column: Column, value: str, now_ms: int) -> float:
        period = period_key(budget.period, now_ms)
        if budget.measure == "runs":
            return float(self.totals.runs(column, value, period))
        return measured(budget.measure, self.totals.tokens(column, value, period), 0, self.prices)

    def refusal(self, principal: str, session_id: str, now_ms: int) -> Breach | None:
        """The hard limit a new run of ``principal`` in ``session_id`` may not start past:
        tokens or cost already at the limit, or as many runs as the limit allows this hour."""
        for name, budget, column, value in self._applying(principal, session_id):
            if budget.hard is None:
                continue
            used = self._used(budget, column, value, now_ms)
            found = breach(name, budget, value, now_ms, used, hard=True)
            if found is not None:
                return found
        return None

    def crossed(
        self,
        principal: str,
        session_id: str,
        now_ms: int,
        *,
        run_tokens: int = 0,
        settle: bool = True,
    ) -> Breach | None:
        """The tokens or cost hard limit a run in progress has reached (checked at a turn
        boundary). ``run_tokens``: what the run itself used so far, by its own fold. With
        ``settle``, when the folded use plus ``run_tokens`` (at the dearest price, for cost)
        reaches a limit, the view is let catch up with the journal and measured again."""
        applying = [
            a
            for a in self._applying(principal, session_id)
            if a[1].hard is not None and a[1].measure != "runs"
        ]
        if not applying:
            return None
        own = {"tokens": float(run_tokens), "cost": run_tokens * self._dearest / 1_000_000}
        if not any(
            self._used(b, column, value, now_ms) + own[b.measure] >= (b.hard or 0)
            for _, b, column, value in applying
        ):
            return None  # not even counting the run's own use twice reaches a limit
        if settle:
            self.settle()
        for name, budget, column, value in applying:
            used = self._used(budget, column, value, now_ms)
            found = breach(name, budget, value, now_ms, used, hard=True)
            if found is not None:
                return found
        return None

    def soft_breaches(self, now_ms: int) -> list[Breach]:
        """Every soft limit reached in its current period (the watchdog's ``budget``
        findings): one per budget and principal or session counted."""
        out: list[Breach] = []
        for name, budget in self.budgets.items():
            if budget.soft is None:
                continue
            subjects: list[tuple[Column, str]]
            if budget.scope == "principal":
                subjects = [("principal", budget.subject)]
            elif budget.scope == "session":
                subjects = [("session_id", budget.subject)]
            else:
                subjects = [
                    ("principal", p)
                    for p in self.totals.principals(period_key(budget.period, now_ms))
                    if budget.subject in self.roles_of(p)
                ]
            for column, value in subjects:
                used = self._used(budget, column, value, now_ms)
                found = breach(name, budget, value, now_ms, used, hard=False)
                if found is not None:
                    out.append(found)
        return out

    def usage_today(self, principal: str, now_ms: int) -> UsageToday:
        """``context.usage_today`` for a tool call of ``principal``'s run."""
        day = day_of(now_ms)
        by_model = self.totals.tokens("principal", principal, day)
        summed = sum(by_model.values(), TokenCounts())
        cost = sum(cost_of(m, t, self.prices) or 0.0 for m, t in by_model.items())
        return UsageToday(
            tokens=summed.tokens,
            input_tokens=summed.input_tokens,
            output_tokens=summed.output_tokens,
            cached_tokens=summed.cached_tokens,
            cost_micros=round(cost * 1_000_000),
            runs=self.totals.runs("principal", principal, day),
        )
