"""``/v1/workspace`` on a real node: every approved fs.write of a run is a checkpoint on the
journal (before and after hashes, the run's principal); a diff since one; a restore, decided
by Cedar and recorded, that is itself a checkpoint and can be restored; a restore whose blob is
gone refuses with nothing written; bad input names its field."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from events.catalog import WorkspaceBlobsPruned, WorkspaceCheckpointed, kind_of
from tests.transports.http.httpkit import HttpNode, HttpReply, close_node
from tests.transports.http.test_http_grants import token
from tests.transports.http.test_http_openapi import check
from transports.config import HttpConfig, NodeConfig, ToolsSection
from transports.http import start_http
from transports.http.openapi import document
from transports.runtime import open_runtime

UNKNOWN = "01ARZ3NDEKTSV4RRFFQ69G5FAV"


def sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def call(
    node: HttpNode, method: str, path: str, body: Any = None, auth: str = "default"
) -> HttpReply:
    reply = node.call(method, path, body, auth=auth)
    check(document(), method, path.partition("?")[0], reply)
    return reply


def write(node: HttpNode, path: str, content: str) -> None:
    """A run asks for fs.write; the admin approves it; the run ends."""
    arguments = json.dumps({"path": path, "content": content, "create_dirs": True})
    run_id = node.start(f"/tool fs.write {arguments}")
    approval_id = node.pending_approval(run_id)
    decided = node.call("POST", f"/v1/approvals/{approval_id}", {"decision": "allow"})
    assert decided.status == 200, decided
    node.finish(run_id)


def checkpoints(node: HttpNode, auth: str = "default") -> list[dict[str, Any]]:
    reply = call(node, "GET", "/v1/workspace/checkpoints", auth=auth)
    assert reply.status == 200, reply
    items: list[dict[str, Any]] = reply.json()["items"]
    return items


def restore(node: HttpNode, body: Any, auth: str = "default") -> HttpReply:
    return call(node, "POST", "/v1/workspace/restore", body, auth=auth)


def test_writes_are_checkpoints_and_a_restore_is_one_too(node: HttpNode) -> None:
    workspace = node.runtime.node.services.workspace
    assert checkpoints(node) == []  # first run: an empty list, not an error
    write(node, "notes/a.txt", "one\n")
    write(node, "notes/a.txt", "two\n")
    newest, oldest = checkpoints(node)
    assert oldest["tool"] == "fs.write" and oldest["principal"] == "admin"
    assert oldest["files"] == [{"path": "notes/a.txt", "before": None, "after": sha("one\n")}]
    assert newest["files"] == [
        {"path": "notes/a.txt", "before": sha("one\n"), "after": sha("two\n")}
    ]
    assert newest["run_id"] and newest["invocation_id"] and newest["session_id"]

    diff = call(node, "GET", f"/v1/workspace/diff?since={oldest['checkpoint_id']}")
    assert diff.status == 200, diff
    (entry,) = diff.json()["files"]
    assert (entry["path"], entry["at"], entry["now"]) == ("notes/a.txt", sha("one\n"), sha("two\n"))
    assert "-one\n+two\n" in entry["diff"]

    back = restore(node, {"checkpoint": oldest["checkpoint_id"]})
    assert back.status == 200, back
    made = back.json()
    assert made["restored"] == oldest["checkpoint_id"] and made["principal"] == "admin"
    assert made["files"] == [{"path": "notes/a.txt", "before": sha("two\n"), "after": sha("one\n")}]
    assert (workspace / "notes/a.txt").read_text() == "one\n"

    undo = restore(node, {"checkpoint": made["checkpoint_id"], "before": True})
    assert undo.status == 200, undo
    assert (workspace / "notes/a.txt").read_text() == "two\n"

    before_all = restore(node, {"checkpoint": oldest["checkpoint_id"], "before": True})
    assert before_all.status == 200, before_all
    assert not (workspace / "notes/a.txt").exists()
    stored = node.runtime.journal.events_of_kinds((kind_of(WorkspaceCheckpointed),))
    assert len(stored) == 5 and stored[-1].principal == "admin"


def test_a_restore_whose_version_is_gone_refuses_and_writes_nothing(node: HttpNode) -> None:
    workspace = node.runtime.node.services.workspace
    write(node, "a.txt", "kept\n")
    write(node, "a.txt", "later\n")
    oldest = checkpoints(node)[-1]
    store = node.runtime.node.services.catalog.checkpoints
    assert store is not None
    store.store.path_of(sha("kept\n")).unlink()
    reply = restore(node, {"checkpoint": oldest["checkpoint_id"]})
    assert reply.status == 409, reply
    gone = sha("kept\n")
    assert f"a.txt: blob {gone} is not in the checkpoint store" in reply.error["message"]
    assert (workspace / "a.txt").read_text() == "later\n"
    assert len(checkpoints(node)) == 2


def test_who_may_and_bad_input(node: HttpNode, data_dir: Path) -> None:
    write(node, "a.txt", "x\n")
    viewer = token(node, "user:vic", "viewer")
    operator = token(node, "user:olga", "operator")
    (only,) = checkpoints(node, auth=viewer)  # reading is read_only
    denied = restore(node, {"checkpoint": only["checkpoint_id"], "before": True}, auth=viewer)
    assert denied.status == 403, denied
    assert (node.runtime.node.services.workspace / "a.txt").exists()
    allowed = restore(node, {"checkpoint": only["checkpoint_id"], "before": True}, auth=operator)
    assert allowed.status == 200 and allowed.json()["principal"] == "user:olga"
    decided = [
        (row.principal, row.decode())
        for row in node.runtime.journal.events_of_kinds(("access.decided",))
    ]
    outcomes = [(p, e.outcome) for p, e in decided if e.action == "workspace.restore"]  # type: ignore[attr-defined]
    assert outcomes == [("user:vic", "deny"), ("user:olga", "allow")]

    assert restore(node, {"checkpoint": UNKNOWN}).status == 404
    bad = restore(node, {"checkpoint": "nope"})
    assert bad.status == 400 and bad.error["field"] == "$.checkpoint"
    extra = restore(node, {"checkpoint": UNKNOWN, "path": "/etc/passwd"})
    assert extra.status == 400
    since = call(node, "GET", "/v1/workspace/diff?since=x")
    assert since.status == 400 and since.error["field"] == "query.since"
    assert call(node, "GET", f"/v1/workspace/diff?since={UNKNOWN}").status == 404


def test_folder_and_diff_references_are_governed_reads(node: HttpNode) -> None:
    """``@folder:`` lists a directory through fs.list, ``@diff:`` shows what changed since a
    checkpoint through fs.diff: both are governed calls on the run's tape."""
    write(node, "notes/a.txt", "one\n")
    write(node, "notes/a.txt", "two\n")
    oldest = checkpoints(node)[-1]["checkpoint_id"]
    run_id = node.start(f"look at @folder:notes and @diff:{oldest} and @diff:{UNKNOWN}")
    node.finish(run_id)
    stored = node.runtime.journal.read_correlated(run_id)
    (assembled,) = [e.decode() for e in stored if e.kind == "run.context_assembled"]
    refs = assembled.references  # type: ignore[attr-defined]
    assert [(r["kind"], r["outcome"], r["call_id"]) for r in refs] == [
        ("folder", "included", "ref-1"),
        ("diff", "included", "ref-2"),
        ("diff", "failed", "ref-3"),
    ]
    assert f"no workspace checkpoint with id {UNKNOWN!r}" in refs[2]["note"]
    proposed = [e.decode() for e in stored if e.kind == "tool.proposed"]
    assert [(p.tool, p.call_id) for p in proposed] == [  # type: ignore[attr-defined]
        ("fs.list", "ref-1"),
        ("fs.diff", "ref-2"),
        ("fs.diff", "ref-3"),
    ]
    texts = [e.decode().output for e in stored if e.kind == "tool.completed"]  # type: ignore[attr-defined]
    assert any('"name":"a.txt"' in t for t in texts)
    assert any("-one\\n+two\\n" in t for t in texts)


def test_retention_is_recorded_and_a_pruned_version_cannot_be_restored(data_dir: Path) -> None:
    """With room for about two versions, the third write prunes the oldest blob: the journal
    says which (``workspace.blobs_pruned``), and restoring the version only it held refuses."""
    config = NodeConfig(http=HttpConfig(port=0), tools=ToolsSection(checkpoint_blob_max_bytes=2500))
    runtime = open_runtime(data_dir, config=config)
    node = HttpNode(runtime, start_http(runtime), (data_dir / "admin.token").read_text().strip())
    try:
        for letter in "abc":
            write(node, "f.txt", letter * 1000)
        pruned = [
            e.decode() for e in node.runtime.journal.events_of_kinds(("workspace.blobs_pruned",))
        ]
        assert len(pruned) == 1
        event = pruned[0]
        assert isinstance(event, WorkspaceBlobsPruned)
        assert event.blobs == (sha("a" * 1000),) and event.freed_bytes == 1000
        third, second, first = checkpoints(node)
        assert event.checkpoint_id == third["checkpoint_id"]
        refused = restore(node, {"checkpoint": first["checkpoint_id"]})
        assert refused.status == 409, refused
        assert (node.runtime.node.services.workspace / "f.txt").read_text() == "c" * 1000
        kept = restore(node, {"checkpoint": second["checkpoint_id"]})
        assert kept.status == 200, kept
        assert (node.runtime.node.services.workspace / "f.txt").read_text() == "b" * 1000
    finally:
        close_node(node)
