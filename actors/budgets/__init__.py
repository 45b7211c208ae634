"""Usage budgets (docs/usage.md): hard limits refuse a run before it starts or end it at a turn
boundary, soft limits raise a watchdog incident. The limits are configuration
(:mod:`actors.budgets.config`), the decisions pure (:mod:`actors.budgets.decide`), and what was
used comes from the usage view's fold (:mod:`actors.budgets.guard`), never from a scan of the
journal."""
