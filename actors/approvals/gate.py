"""The decision pipeline for one tool call: posture -> Cedar -> cached grants -> ``vault.use``.

``policies`` decides from plain values; this module supplies them (the tool's capabilities,
risk and effective posture) and applies approval grants: a ``session`` grant that covers the
call (:func:`actors.approvals.grants.covers`: any arguments, these exact arguments, or a subject
prefix; until the session resets) or an ``always`` grant (principal + tool) turns
``approval_required`` into ``allow`` when Cedar also permits the call as approved. A call that
names vault secrets by handle (tools/handles.py) is then decided once more per secret
(``vault.use``: principal, tool, secret): one refused refuses the call, before any approval is
asked, and the secrets and their policies are recorded with the decision.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping

import msgspec

from actors.approvals import always_grants
from actors.approvals.always_grants import AlwaysGrants
from actors.approvals.grants import Grant, covers
from actors.stream import Recorded
from actors.tail import Tail
from events import JournalPort
from policies import Decision, PolicyEngine, SecretRequest, ToolRequest, UsageToday
from tools import Posture, ToolSpec
from tools.handles import handles_of


class GateDecision(msgspec.Struct, frozen=True, kw_only=True):
    """What the tool actor records as ``tool.decided``."""

    outcome: str
    reason: str
    policy_ids: tuple[str, ...]
    posture: str
    grant: str | None = None
    vault: tuple[str, ...] = ()
    """The secrets the call names by handle (all permitted by ``vault.use`` unless denied)."""


class ToolGate:
    """Posture configuration, the policy engine and the ``always`` grants of this node (folded
    from the journal, whoever appended them: :meth:`follow_grants`)."""

    def __init__(
        self,
        engine: PolicyEngine,
        postures: Mapping[str, Posture] | None = None,
        roles_of: Callable[[str], tuple[str, ...]] | None = None,
    ) -> None:
        self.engine = engine
        self._postures = dict(postures or {})
        self.roles_of = roles_of or (lambda _principal: ())
        """The roles a principal holds now (set by the node's composition from its tokens)."""
        self.usage_of: Callable[[str], UsageToday] = lambda _principal: UsageToday()
        """A principal's usage so far today, Cedar's ``context.usage_today`` (set by the
        node's composition from the usage view; docs/usage.md)."""
        self._grants = AlwaysGrants()
        self._lock = threading.Lock()
        self._tail: Tail | None = None

    def posture(self, spec: ToolSpec, overrides: Mapping[str, str] | None = None) -> Posture:
        """``disabled`` for a tool that cannot run here (`ToolSpec.unavailable`, which no
        override lifts), else the session override, the node's configured posture, the
        tool's default."""
        if spec.unavailable is not None:
            return "disabled"
        if overrides and spec.name in overrides:
            return overrides[spec.name]  # type: ignore[return-value]
        return self._postures.get(spec.name, spec.default_posture)

    # --- the ``always`` grants: folded from the journal, the one way they change -------------

    def fold(self, rec: Recorded) -> None:
        """Fold one record into the ``always`` grants (:func:`always_grants.apply`)."""
        with self._lock:
            self._grants = always_grants.apply(self._grants, rec)

    def follow_grants(self, journal: JournalPort) -> AlwaysGrants:
        """Load the ``always`` grants from ``journal`` and keep them current as it commits,
        whoever appends (:class:`actors.tail.Tail`); returns them as loaded. Again with the
        same journal (a node started again in one process) it only syncs; with another, the
        grants are loaded afresh and the first journal's follower folds into them no more."""
        if self._tail is not None and self._tail.reader is journal:
            return self.sync_grants()

        def fold(rec: Recorded) -> None:
            if self._tail is tail:
                self.fold(rec)

        tail = Tail(journal, always_grants.KINDS, fold, "always grants")
        with self._lock:
            self._grants, self._tail = AlwaysGrants(), tail
        tail.sync()
        tail.follow(journal)
        return self._grants

    def sync_grants(self) -> AlwaysGrants:
        """The ``always`` grants with every decision and revocation the journal committed by
        now folded in: what a command that appended one calls before it replies
        (read-your-writes), and what a revocation decides on. Without :meth:`follow_grants`
        the grants as folded."""
        if self._tail is not None:
            self._tail.sync()
        return self._grants

    def has_always(self, principal: str, tool: str) -> bool:
        return (principal, tool) in self._grants.active

    def always(self) -> frozenset[tuple[str, str]]:
        """The ``always`` grants in force now: (principal, tool) pairs."""
        return self._grants.active

    def decide(
        self,
        spec: ToolSpec,
        *,
        args: msgspec.Struct | None = None,
        principal: str,
        session_id: str,
        run_id: str,
        channel: str | None = None,
        session_grants: tuple[Grant, ...] = (),
        posture_overrides: Mapping[str, str] | None = None,
    ) -> GateDecision:
        """Decide one call; never raises for a well-formed spec. ``args``: the validated
        arguments, which ``session`` grants are matched against (None: none apply)."""
        posture = self.posture(spec, posture_overrides)
        request = ToolRequest(
            principal=principal,
            tool=spec.name,
            capabilities=tuple(sorted(spec.capabilities)),
            risk=spec.risk,
            posture=posture,
            channel=channel,
            session_id=session_id,
            run_id=run_id,
            roles=self.roles_of(principal),
            usage_today=self.usage_of(principal),
        )
        decision = self.engine.decide(request)
        grant: str | None = None
        if decision.outcome == "approval_required":
            if args is not None and any(covers(g, spec.name, args) for g in session_grants):
                grant = "session"
            elif self.has_always(principal, spec.name):
                grant = "always"
            if grant is not None:
                approved = self.engine.decide(msgspec.structs.replace(request, approved=True))
                if approved.outcome == "allow":
                    decision = Decision(
                        outcome="allow",
                        policy_ids=approved.policy_ids,
                        reason=f"allowed by a cached {grant} grant ({approved.reason})",
                    )
                else:
                    grant = None
        names = handles_of(args)
        if names and decision.outcome != "deny":
            decision = self._use_secrets(request, names, decision)
        return GateDecision(
            outcome=decision.outcome,
            reason=decision.reason,
            policy_ids=decision.policy_ids,
            posture=posture,
            grant=grant,
            vault=names,
        )

    def _use_secrets(
        self, request: ToolRequest, names: tuple[str, ...], decision: Decision
    ) -> Decision:
        """``decision`` with the ``vault.use`` decisions of ``names``: the first refused one
        denies the call, naming the secret and the policies; else their policies join."""
        ids = set(decision.policy_ids)
        for name in names:
            use = self.engine.decide_secret(
                SecretRequest(
                    principal=request.principal,
                    tool=request.tool,
                    secret=name,
                    roles=request.roles,
                    session_id=request.session_id,
                    run_id=request.run_id,
                )
            )
            if not use.allowed:
                return Decision(
                    outcome="deny",
                    policy_ids=use.policy_ids,
                    reason=f"vault.use of secret {name!r}: {use.reason}",
                    errors=use.errors,
                )
            ids.update(use.policy_ids)
        return msgspec.structs.replace(decision, policy_ids=tuple(sorted(ids)))
