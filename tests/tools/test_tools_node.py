"""Confined tools through a real node: the journal never receives what the sandbox hides, a
result never exceeds the journal's payload limit, and ``reel node`` says when shell.run is off."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import msgspec
import pytest

from actors.invocations.actor import TOOL_OUTPUT_BUDGET
from actors.messages import ResolveApproval
from events import MAX_PAYLOAD_BYTES
from tests import processes
from tests.actors.nodekit import NodeKit
from tools import ToolsConfig

CANARY = "ADMIN-TOKEN-CANARY-node-91c2"
ALWAYS = {"shell.run": "always_allow", "fs.read": "always_allow"}


MakeNode = Callable[..., NodeKit]


@pytest.fixture
def make_node(tmp_path: Path) -> Iterator[MakeNode]:
    """Real nodes (journal, catalog, Cedar, deterministic provider) on tmp dirs."""
    kits: list[NodeKit] = []

    def make(**options: Any) -> NodeKit:
        kits.append(NodeKit(tmp_path / f"node{len(kits)}", **options))
        return kits[-1]

    yield make
    for kit in kits:
        kit.close()


def _journal_bytes(kit: NodeKit) -> bytes:
    files = [kit.root / "journal.db", kit.root / "journal.db-wal"]
    return b"".join(f.read_bytes() for f in files if f.exists())


def _completed(kit: NodeKit, text: str) -> tuple[object, object]:
    ticket, end = kit.run(text)
    (done,) = kit.events(ticket.run_id, "tool.completed")
    return done, end


@pytest.mark.usefixtures("sandbox_required")
def test_an_approved_cat_of_the_admin_token_reaches_neither_model_nor_journal(
    make_node: MakeNode,
) -> None:
    kit = make_node(tools=ToolsConfig(shell_allowlist=("cat",)), postures=ALWAYS)
    (kit.root / "admin.token").write_text(CANARY)
    for argv in (["cat", "../admin.token"], ["cat", str(kit.root / "admin.token")]):
        call = json.dumps({"argv": argv})
        ticket = kit.start_run(f"read it\n/tool shell.run {call}")
        request = kit.wait_for_approval(ticket.run_id)  # critical: a human approves it
        kit.ask(ResolveApproval(approval_id=request.approval_id, decision="allow"))
        end = kit.wait_for_end(ticket.run_id)
        (done,) = kit.events(ticket.run_id, "tool.completed")
        assert not done.ok and done.error_kind == "failed"
        assert "or directory" in done.output
        assert type(end).__name__ == "RunCompleted"
    kit.close()
    assert CANARY.encode() not in _journal_bytes(kit)


def test_fs_read_of_a_file_just_under_its_cap_is_cut_to_the_journal_limit(
    make_node: MakeNode,
) -> None:
    assert TOOL_OUTPUT_BUDGET < MAX_PAYLOAD_BYTES  # derived from the journal's limit
    kit = make_node(postures=ALWAYS)
    size = ToolsConfig().fs_read_cap_bytes - 10
    (kit.workspace / "big.txt").write_bytes(b"a" * size)
    done, end = _completed(kit, '/tool fs.read {"path": "big.txt"}')
    assert done.ok and done.truncated, done.error  # type: ignore[attr-defined]
    body = msgspec.json.decode(done.output)  # type: ignore[attr-defined]
    assert body["size"] == size and body["truncated"] is True
    assert body["note"] == f"content cut to fit the result size limit of {TOOL_OUTPUT_BUDGET} bytes"
    assert len(done.output.encode()) <= TOOL_OUTPUT_BUDGET  # type: ignore[attr-defined]
    assert type(end).__name__ == "RunCompleted"


def test_a_result_that_redaction_grows_past_the_limit_is_a_clean_failure(
    make_node: MakeNode,
) -> None:
    """Redaction replaces short secrets by a longer marker, so a result that fits the budget
    before redaction may not after it: the call ends as a ``limit`` failure, the run goes on."""
    kit = make_node(postures=ALWAYS)
    pairs = b"password=x; " * (ToolsConfig().fs_read_cap_bytes // 12)
    (kit.workspace / "pairs.txt").write_bytes(pairs)
    done, end = _completed(kit, '/tool fs.read {"path": "pairs.txt"}')
    assert done.error_kind != "internal_error", done.error  # type: ignore[attr-defined]
    if not done.ok:  # type: ignore[attr-defined]
        assert done.error_kind == "limit"  # type: ignore[attr-defined]
        assert "could not be recorded" in done.error  # type: ignore[attr-defined]
    assert type(end).__name__ == "RunCompleted"


def test_reel_node_says_at_start_that_shell_run_is_disabled_and_why(data_dir: Path) -> None:
    env = {
        **os.environ,
        "REEL_TOOLS_SHELL_BWRAP": "/nonexistent/bwrap",
        "REEL_HTTP_PORT": "0",
        "REEL_GRPC_PORT": "0",
    }
    with processes.node(
        "--data",
        data_dir,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    ) as node:
        assert node.stdout is not None and node.stderr is not None
        line = node.stdout.readline()
        reason = (
            "bubblewrap ('/nonexistent/bwrap') was not found; install the Debian package "
            "`bubblewrap` (shell.run never runs unconfined)"
        )
        assert line.startswith("reel node ready: "), line
        assert f"  (shell.run disabled: {reason})" in line
        node.send_signal(signal.SIGTERM)
        _, err = node.communicate(timeout=30)
    ready = [json.loads(x) for x in err.splitlines() if '"reel node ready"' in x]
    assert ready and ready[0]["unavailable_tools"] == {"shell.run": reason}
