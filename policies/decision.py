"""What the engine answers: a plain, immutable decision that an auditor can read."""

from __future__ import annotations

from typing import Literal

import cedarpy
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


# --- from a Cedar answer ----------------------------------------------------------------------


def ids_of(result: cedarpy.AuthzResult) -> tuple[str, ...]:
    return tuple(sorted(result.diagnostics.reasons))


def errors_of(result: cedarpy.AuthzResult) -> tuple[str, ...]:
    return tuple(str(error) for error in result.diagnostics.errors)


def allowed(result: cedarpy.AuthzResult) -> Decision:
    ids = ids_of(result)
    return Decision(
        outcome="allow",
        policy_ids=ids,
        reason=f"permitted by {', '.join(ids)}",
        errors=errors_of(result),
    )


def denied(result: cedarpy.AuthzResult, action: str) -> Decision:
    errors = errors_of(result)
    if result.decision is cedarpy.Decision.NoDecision:
        detail = "; ".join(errors) or "Cedar reached no decision"
        return Decision(outcome="deny", policy_ids=(), reason=f"denied: {detail}", errors=errors)
    ids = ids_of(result)
    if ids:
        reason = f"forbidden by {', '.join(ids)}"
    else:
        reason = f"denied by default: no policy permits {action}"
    return Decision(outcome="deny", policy_ids=ids, reason=reason, errors=errors)


def allow_or_deny(result: cedarpy.AuthzResult, action: str) -> Decision:
    return allowed(result) if result.allowed else denied(result, action)
