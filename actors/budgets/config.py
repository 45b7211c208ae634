"""``[budgets.<name>]``: one budget each (docs/usage.md). Defaults live here (the node's config
embeds this Struct)."""

from __future__ import annotations

import msgspec

from events.catalog import BudgetMeasure, BudgetPeriod, BudgetScope

PERIODS: dict[str, tuple[BudgetPeriod, ...]] = {
    "tokens": ("day", "month"),
    "cost": ("day", "month"),
    "runs": ("hour",),
}
"""The periods each measure counts over."""


class Budget(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """A limit on what one principal, each principal of a role, or one session uses in a UTC
    period. ``hard``: a run is refused once the period's use reached it, and a run that reaches
    it ends at its next turn boundary (``budget_exceeded``). ``soft``: once reached, the
    watchdog opens one incident for the period. At least one of the two is set."""

    scope: BudgetScope
    subject: str
    """The principal (``user:alice``), the role (``agent``) or the session id."""
    measure: BudgetMeasure
    period: BudgetPeriod
    hard: float | None = None
    soft: float | None = None

    def __post_init__(self) -> None:
        if not self.subject:
            raise ValueError("subject: must not be empty")
        if self.scope == "role":
            from policies.access import ROLES  # Cedar loads only for a role's budget

            if self.subject not in ROLES:
                roles = ", ".join(ROLES)
                raise ValueError(f"subject: unknown role {self.subject!r}; roles: {roles}")
        periods = PERIODS[self.measure]
        if self.period not in periods:
            raise ValueError(
                f"period: a {self.measure} budget counts per {' or '.join(periods)}, "
                f"not per {self.period}"
            )
        for field in ("hard", "soft"):
            value = getattr(self, field)
            if value is not None and not value >= 0:  # NaN too
                raise ValueError(f"{field}: must be a number >= 0, not {value}")
        if self.hard is None and self.soft is None:
            raise ValueError("hard: a budget needs a hard limit, a soft one or both")
        if self.hard is not None and self.soft is not None and self.soft > self.hard:
            raise ValueError(f"soft: {self.soft:g} is above hard {self.hard:g}")
