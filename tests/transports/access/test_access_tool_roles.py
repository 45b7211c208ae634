"""Tool policies can name the run principal's roles: the tool calls of a run are decided with
``Principal::"<who started it>"`` in the ``Role``s of that principal's active tokens."""

from __future__ import annotations

from pathlib import Path

from tests.transports.http.httpkit import close_node, open_node

OPERATORS_RUN_ECHO = """
@id("shell")
permit (principal in Role::"operator", action == Action::"tool.execute",
        resource == Tool::"shell.run")
when { context.posture != "disabled" };
"""
SHELL = 'x\n/tool shell.run {"argv": ["echo", "hi"]}'


def test_a_tool_policy_on_a_role_takes_effect_for_runs_of_that_role(tmp_path: Path) -> None:
    (tmp_path / "policies").mkdir()
    (tmp_path / "policies" / "operators.cedar").write_text(OPERATORS_RUN_ECHO)
    node = open_node(tmp_path)
    try:
        made = {}
        for principal, role in (("user:olga", "operator"), ("agent:bot", "agent")):
            reply = node.call("POST", "/v1/tokens", {"principal": principal, "roles": [role]})
            made[role] = f"Bearer {reply.json()['token']}"

        def decision_of(auth: str) -> dict[str, object]:
            session = node.call("POST", "/v1/sessions", {}, auth=auth).json()["session_id"]
            # the operator's posture: shell.run need not ask, unless no policy permits it
            posture = {"tool": "shell.run", "posture": "always_allow"}
            assert node.call("POST", f"/v1/sessions/{session}/postures", posture).status == 200
            started = node.call(
                "POST", f"/v1/sessions/{session}/messages", {"text": SHELL}, auth=auth
            )
            run_id = started.json()["run_id"]
            stream, event = node.until(run_id, "tool.decided")
            stream.close()
            decided: dict[str, object] = event.entry["event"]
            return decided

        operator = decision_of(made["operator"])
        assert operator["outcome"] == "allow"
        assert operator["policy_ids"] == ["operators.shell"]
        agent = decision_of(made["agent"])
        assert agent["outcome"] == "approval_required"
        assert "operators.shell" not in agent["policy_ids"]  # type: ignore[operator]
    finally:
        close_node(node)
