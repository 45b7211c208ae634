"""The ``always`` grants aggregate (actors/approvals/always_grants.py) as a pure fold: what makes,
ends and ignores a grant, and that ``initial`` starts nothing from an unrelated record."""

from __future__ import annotations

from actors.approvals import always_grants
from actors.approvals.always_grants import GRANTS_STREAM, AlwaysGrants, apply, initial
from actors.stream import Recorded
from events.catalog import ApprovalResolved, GrantRevoked, SessionCreated

ID = "01ARZ3NDEKTSV4RRFFQ69G5FAV"


def decided(
    decision: str = "allow", scope: str = "always", principal: str = "ops", tool: str = "shell.run"
) -> Recorded:
    event = ApprovalResolved(
        approval_id=ID,
        invocation_id=ID,
        run_id=ID,
        decision=decision,  # type: ignore[arg-type]
        scope=scope,  # type: ignore[arg-type]
        tool=tool,
        grant_principal=principal,
    )
    return Recorded(event, f"invocation/{ID}", 1)


def revoked(principal: str = "ops", stream: str = GRANTS_STREAM) -> Recorded:
    return Recorded(GrantRevoked(principal=principal, tool="shell.run"), stream, 2)


def fold(*records: Recorded) -> AlwaysGrants | None:
    state: AlwaysGrants | None = None
    for rec in records:
        state = initial(rec) if state is None else apply(state, rec)
    return state


def test_an_allow_always_grants_and_a_revocation_ends_it() -> None:
    assert fold(decided()) == AlwaysGrants(active=frozenset({("ops", "shell.run")}))
    assert fold(decided(), revoked()) == AlwaysGrants(next_seq=1)
    again = fold(decided(), revoked(), decided())
    assert again == AlwaysGrants(active=frozenset({("ops", "shell.run")}), next_seq=1)


def test_only_an_allow_with_scope_always_grants() -> None:
    for rec in (decided(scope="session"), decided(scope="once"), decided(decision="deny")):
        assert fold(rec) == AlwaysGrants()
    assert fold(decided(principal="")) == AlwaysGrants()


def test_a_revocation_of_another_principal_leaves_the_grant() -> None:
    state = fold(decided(), revoked(principal="eve"))
    assert state == AlwaysGrants(active=frozenset({("ops", "shell.run")}), next_seq=1)


def test_next_seq_counts_the_grants_stream_only() -> None:
    assert fold(decided(), revoked(stream="elsewhere")) == AlwaysGrants()


def test_an_unrelated_record_starts_nothing_and_changes_nothing() -> None:
    other = Recorded(SessionCreated(session_id=ID), f"session/{ID}", 0)
    assert initial(other) is None
    state = AlwaysGrants(active=frozenset({("ops", "shell.run")}), next_seq=3)
    assert apply(state, other) is state
    assert always_grants.KINDS == ("tool.approval_resolved", "grant.revoked")
