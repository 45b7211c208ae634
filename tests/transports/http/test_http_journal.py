"""/v1/journal: the chain's head and a verification on demand."""

from __future__ import annotations

from pathlib import Path

from tests.transports.http.httpkit import HttpNode, close_node, open_node
from tests.transports.http.test_http_openapi import check
from transports.config import JournalConfig
from transports.http.openapi import document


def test_head_is_the_journal_head(node: HttpNode) -> None:
    node.finish(node.start("something to hash"))
    head = node.call("GET", "/v1/journal/head").json()
    journal = node.runtime.journal
    assert head["position"] == journal.committed_position > 0
    assert head["hash"] == journal.head().hash.hex()
    assert head["views_position"] <= head["position"]


def test_verify_walks_the_chain_with_the_node_key(node: HttpNode) -> None:
    node.finish(node.start("something to verify"))
    journal = node.runtime.journal
    journal.checkpoint()
    reply = node.call("POST", "/v1/journal/verify")
    assert reply.status == 200
    report = reply.json()
    assert report["ok"] is True and report["fault"] is None
    # checked against the node's own key, which lives in the data dir: nobody pinned it, and
    # without a witness nothing outside the data dir vouches for the journal
    assert (report["key_source"], report["key_trusted"]) == ("node", True)
    assert report["anchored"] is False and report["anchor"] == "unanchored"
    assert report["public_key"] == journal.node_key.public_key.hex() if journal.node_key else False
    assert report["events"] == report["head_position"] == journal.committed_position
    assert report["checkpoints"] >= 1
    assert node.call("POST", "/v1/journal/verify", {"deep": True}).error["field"] == "$.deep"


def test_checkpoints_for_a_monitor(data_dir: Path, tmp_path: Path) -> None:
    """A node with a witness: GET /v1/journal/checkpoints pages through the signed checkpoints,
    each with the note its witness holds; a monitor can append them to a witness of its own."""
    witness = tmp_path / "elsewhere" / "witness.notes"
    witness.parent.mkdir()
    node = open_node(data_dir, journal=JournalConfig(witness=str(witness)))
    try:
        journal = node.runtime.journal
        for text in ("one", "two", "three"):
            node.finish(node.start(text))
            assert journal.checkpoint() is not None
        assert journal.witness is not None and journal.witness.flush(10)
        doc = document()
        first = node.call("GET", "/v1/journal/checkpoints?limit=2")
        check(doc, "GET", "/v1/journal/checkpoints?limit=2", first)
        page = first.json()
        signed = journal.checkpoints()
        assert [c["position"] for c in page["items"]] == [c.position for c in signed[:2]]
        assert page["next_after"] == signed[1].position
        assert page["origin"] == journal.node_key.origin if journal.node_key else False
        rest = node.call("GET", f"/v1/journal/checkpoints?after={page['next_after']}").json()
        items = page["items"] + rest["items"]
        assert rest["next_after"] is None
        assert [c["row_position"] for c in items] == [c.row_position for c in signed]
        assert [c["hash"] for c in items] == [c.hash.hex() for c in signed]
        status = rest["witness"]
        assert (status["path"], status["appended"], status["failures"]) == (str(witness), 3, 0)
        assert status["pending"] == 0 and status["last_error"] is None
        # What the node's witness holds is exactly what the route hands a monitor.
        assert witness.read_text(encoding="utf-8") == "".join(c["note"] + "\n" for c in items)
        report = node.call("POST", "/v1/journal/verify").json()
        assert report["ok"] and (report["anchor"], report["key_source"]) == ("witness", "node")
        assert report["witness_checkpoints"] == 3
        for bad in ("after=x", "after=-2", "limit=0"):
            reply = node.call("GET", f"/v1/journal/checkpoints?{bad}")
            assert reply.status == 400, bad
            check(doc, "GET", f"/v1/journal/checkpoints?{bad}", reply)
        unauthenticated = node.call("GET", "/v1/journal/checkpoints", auth=None)
        assert unauthenticated.status == 401
        metrics = node.call("GET", "/metrics").body.decode()
        assert "reel_witness_appended_total 3\n" in metrics
        assert "reel_witness_failures_total 0\n" in metrics
        assert "reel_witness_pending 0\n" in metrics
    finally:
        close_node(node)


def test_checkpoints_of_a_fresh_node(node: HttpNode) -> None:
    page = node.call("GET", "/v1/journal/checkpoints").json()
    assert page["items"] == [] and page["next_after"] is None
    assert page["witness"] is None
    assert page["origin"].startswith("reel.journal/")
