"""What the engine answers: a plain, immutable decision that an auditor can read."""

from __future__ import annotations

from typing import Literal

import msgspec

Outcome = Literal["allow", "deny", "approval_required"]


class Decision(msgspec.Struct, frozen=True, kw_only=True):
    """The outcome of one policy question and the policies that decided it.

    ``policy_ids`` are stable ids (``baseline.tool.low_risk``, ``<file>.<id>`` for an
    operator file), sorted: for ``allow`` the permitting policies; for ``deny`` the
    forbidding ones, or empty when nothing permits (deny by default); for
    ``approval_required`` the permits that would allow the call once approved.
    """

    outcome: Outcome
    """``allow``, ``deny`` or ``approval_required``."""
    policy_ids: tuple[str, ...]
    """The policies that decided, sorted."""
    reason: str
    """Human text saying why, e.g. ``forbidden by baseline.posture_disabled``."""
    errors: tuple[str, ...] = ()
    """Evaluation errors Cedar reported (a policy that errored is skipped, so it neither
    permits nor forbids); empty in a healthy deployment."""

    @property
    def allowed(self) -> bool:
        """True only for ``allow``."""
        return self.outcome == "allow"

    def describe(self) -> str:
        """Multi-line text for ``reel policy check``: outcome, policies, reason, errors."""
        lines = [
            self.outcome,
            f"policies: {', '.join(self.policy_ids) if self.policy_ids else '(none)'}",
            f"reason: {self.reason}",
        ]
        lines.extend(f"error: {error}" for error in self.errors)
        return "\n".join(lines)
