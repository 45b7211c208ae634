"""Revoking an ``always`` grant on a running node (``RevokeGrant``, the session directory):
decided on the gate's grants by their aggregate (actors/approvals/always_grants.py), appended to
``grants``, and folded into the gate from the journal (the gate changes no other way: a
revocation the journal refuses changes nothing) before the reply; what the live gate holds is
what the journal folds to."""

from __future__ import annotations

import pytest

from actors import GrantNotActive, InvalidCommand
from actors.approvals.always_grants import GRANTS_STREAM, load
from actors.messages import ResolveApproval, RevokeGrant
from events.catalog import ApprovalRequested, GrantRevoked
from tests.actors.nodekit import NodeKit

SHELL = '/tool shell.run {"argv": ["echo", "granted"]}'


def grant_always(kit: NodeKit, principal: str) -> None:
    ticket = kit.start_run(f"once\n{SHELL}", principal=principal)
    request = kit.wait_for_approval(ticket.run_id)
    assert isinstance(request, ApprovalRequested)
    kit.ask(ResolveApproval(approval_id=request.approval_id, decision="allow", scope="always"))
    kit.wait_for_end(ticket.run_id)
    assert kit.gate.has_always(principal, "shell.run")


def test_a_revoked_grant_is_recorded_then_asked_for_again(kit: NodeKit) -> None:
    grant_always(kit, "carol")
    revoked = kit.ask(RevokeGrant(principal="carol", tool="shell.run", revoked_by="user:ops"))
    assert revoked == GrantRevoked(principal="carol", tool="shell.run")
    (row,) = kit.journal.read_stream(GRANTS_STREAM)
    assert (row.decode(), row.principal) == (revoked, "user:ops")
    assert not kit.gate.has_always("carol", "shell.run")
    assert load(kit.journal).active == frozenset()

    again = kit.start_run(f"again\n{SHELL}", principal="carol")
    assert isinstance(kit.wait_for_approval(again.run_id), ApprovalRequested)


def test_no_grant_to_revoke_changes_nothing(kit: NodeKit) -> None:
    grant_always(kit, "carol")
    with pytest.raises(GrantNotActive, match=r"dave has no always grant for shell\.run"):
        kit.ask(RevokeGrant(principal="dave", tool="shell.run"))
    with pytest.raises(GrantNotActive):
        kit.ask(RevokeGrant(principal="carol", tool="fs.read"))
    with pytest.raises(InvalidCommand) as bad:
        kit.ask(RevokeGrant(principal="carol", tool="Shell Run"))
    assert bad.value.field == "tool"
    assert kit.journal.read_stream(GRANTS_STREAM) == []
    assert kit.gate.has_always("carol", "shell.run")


def test_a_revocation_decides_on_what_the_journal_holds(kit: NodeKit) -> None:
    """Another writer (another node) appended to the grants stream: the directory decides on the
    journal as it is now. A grant it revoked is not active here (nothing appended); this node's
    revocation takes the stream's next seq (the directory used to count the seqs itself, and a
    revocation after another writer's conflicted)."""
    grant_always(kit, "carol")
    grant_always(kit, "dave")
    other = GrantRevoked(principal="dave", tool="shell.run")
    kit.journal.append(GRANTS_STREAM, [other], expected_seq=0, principal="node:other")
    with pytest.raises(GrantNotActive, match="dave has no always grant"):
        kit.ask(RevokeGrant(principal="dave", tool="shell.run"))
    kit.ask(RevokeGrant(principal="carol", tool="shell.run"))
    rows = kit.journal.read_stream(GRANTS_STREAM)
    assert [(r.stream_seq, r.principal) for r in rows] == [(0, "node:other"), (1, "operator")]
    assert kit.gate.always() == frozenset() == load(kit.journal).active
