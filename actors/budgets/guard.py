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

from collections.abc import Callable, Mapping

from actors.budgets.config import Budget
from actors.budgets.decide import FORMATS, Breach, breach, counted, measured, period_key
from events.catalog import BudgetPeriod
from policies import UsageToday
from projections.usage import Column, Price, TokenCounts, UsageTotals, day_of, total_cost

Roles = Callable[[str], tuple[str, ...]]


Applying = tuple[int, str, Budget, Column, str]
"""A budget that counts a run: its place in ``[budgets]``, name, budget, and the usage column
and value it is measured by."""


class BudgetGuard:
    """``[budgets]`` and ``[usage.prices]`` over the usage view's totals; safe to share
    between threads (what it keeps is fixed at construction, but for the last second's period
    keys, replaced whole).

    The budgets are indexed once by whom they count and what they stop (:class:`_Index`): a
    check finds those of one principal and session in two lookups (none: nothing read),
    measures each with one read of the totals, and formats the UTC periods once a second."""

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
        numbered = list(enumerate(self.budgets.items()))
        self._refusing = _Index([(i, n, b) for i, (n, b) in numbered if b.hard is not None])
        """The hard limits: what a run may not start past."""
        self._ending = _Index(
            [(i, n, b) for i, (n, b) in numbered if b.hard is not None and b.measure != "runs"]
        )
        """The hard tokens and cost limits: what ends a run at a turn boundary."""
        self._periods: tuple[int, dict[BudgetPeriod, str]] = (-1, {})
        """The last second checked and its period keys."""
        self._dearest = max(
            (
                max(p.input_per_mtok, p.output_per_mtok, p.cached_input_per_mtok or 0.0)
                for p in self.prices.values()
            ),
            default=0.0,
        )
        """The highest price per million tokens: what a token of unknown kind costs at most."""

    def _keys(self, now_ms: int) -> dict[BudgetPeriod, str]:
        """The UTC hour, day and month ``now_ms`` is in (formatted once a second)."""
        second = now_ms // 1000
        at, keys = self._periods
        if at != second:
            keys = {period: period_key(period, now_ms) for period in FORMATS}
            self._periods = (second, keys)
        return keys

    def _used(
        self, budget: Budget, column: Column, value: str, keys: Mapping[BudgetPeriod, str]
    ) -> float:
        period = keys[budget.period]
        if budget.measure == "runs":
            return float(self.totals.runs(column, value, period))
        return measured(budget.measure, self.totals.sums(column, value, period), 0, self.prices)

    def refusal(self, principal: str, session_id: str, now_ms: int) -> Breach | None:
        """The hard limit a new run of ``principal`` in ``session_id`` may not start past:
        tokens or cost already at the limit, or as many runs as the limit allows this hour."""
        applying = self._refusing.applying(principal, session_id, self.roles_of)
        if not applying:
            return None
        keys = self._keys(now_ms)
        for _, name, budget, column, value in applying:
            used = self._used(budget, column, value, keys)
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
        applying = self._ending.applying(principal, session_id, self.roles_of)
        if not applying:
            return None
        keys = self._keys(now_ms)
        own_cost = run_tokens * self._dearest / 1_000_000
        for _, _, b, column, value in applying:  # a loop, not any(genexpr): every turn runs it
            own = own_cost if b.measure == "cost" else run_tokens
            if self._used(b, column, value, keys) + own >= (b.hard or 0):
                break
        else:
            return None  # not even counting the run's own use twice reaches a limit
        if settle:
            self.settle()
        for _, name, budget, column, value in applying:
            used = self._used(budget, column, value, keys)
            found = breach(name, budget, value, now_ms, used, hard=True)
            if found is not None:
                return found
        return None

    def soft_breaches(self, now_ms: int) -> list[Breach]:
        """Every soft limit reached in its current period (the watchdog's ``budget``
        findings): one per budget and principal or session counted."""
        out: list[Breach] = []
        keys = self._keys(now_ms)
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
                    for p in self.totals.principals(keys[budget.period])
                    if budget.subject in self.roles_of(p)
                ]
            for column, value in subjects:
                used = self._used(budget, column, value, keys)
                found = breach(name, budget, value, now_ms, used, hard=False)
                if found is not None:
                    out.append(found)
        return out

    def usage_today(self, principal: str, now_ms: int) -> UsageToday:
        """``context.usage_today`` for a tool call of ``principal``'s run."""
        day = day_of(now_ms)
        by_model = self.totals.tokens("principal", principal, day)
        summed = sum(by_model.values(), TokenCounts())
        cost = total_cost(by_model, self.prices)
        return UsageToday(
            tokens=summed.tokens,
            input_tokens=summed.input_tokens,
            output_tokens=summed.output_tokens,
            cached_tokens=summed.cached_tokens,
            cost_micros=round(cost * 1_000_000),
            runs=self.totals.runs("principal", principal, day),
        )


class _Index:
    """Budgets by whom they count, so a check finds those of one principal and session in two
    lookups (and the roles of the principal, when a role has a budget)."""

    def __init__(self, numbered: list[tuple[int, str, Budget]]) -> None:
        self.fixed: dict[tuple[Column, str], list[Applying]] = {}
        """The principal and session budgets, by the usage column and value they count."""
        self.roles: list[tuple[int, str, Budget]] = []
        """The role budgets: each counts every principal holding the role."""
        for index, name, budget in numbered:
            if budget.scope == "role":
                self.roles.append((index, name, budget))
                continue
            where = counted(budget, budget.subject, (), budget.subject)
            assert where is not None  # a budget counts its own subject
            self.fixed.setdefault(where, []).append((index, name, budget, *where))

    def applying(self, principal: str, session_id: str, roles_of: Roles) -> list[Applying]:
        """Each budget that counts a run of ``principal`` in ``session_id``, in ``[budgets]``'s
        order (the first reached is the one named); not to be changed by the caller."""
        mine = self.fixed.get(("principal", principal), [])
        theirs = self.fixed.get(("session_id", session_id), [])
        if not self.roles:
            if not (mine and theirs):
                return mine or theirs  # one list, already in order
            return sorted([*mine, *theirs], key=_first)
        roles = roles_of(principal)
        found = [*mine, *theirs]
        for index, name, budget in self.roles:
            if counted(budget, principal, roles, session_id) is not None:
                found.append((index, name, budget, "principal", principal))
        return sorted(found, key=_first)


def _first(applying: Applying) -> int:
    return applying[0]
