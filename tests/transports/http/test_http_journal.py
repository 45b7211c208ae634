"""/v1/journal: the chain's head and a verification on demand."""

from __future__ import annotations

from tests.transports.http.httpkit import Node


def test_head_is_the_journal_head(node: Node) -> None:
    node.finish(node.start("something to hash"))
    head = node.call("GET", "/v1/journal/head").json()
    journal = node.runtime.journal
    assert head["position"] == journal.committed_position > 0
    assert head["hash"] == journal.head().hash.hex()
    assert head["views_position"] <= head["position"]


def test_verify_walks_the_chain_with_the_node_key(node: Node) -> None:
    node.finish(node.start("something to verify"))
    journal = node.runtime.journal
    journal.checkpoint()
    reply = node.call("POST", "/v1/journal/verify")
    assert reply.status == 200
    report = reply.json()
    assert report["ok"] is True and report["fault"] is None
    assert report["key_trusted"] is True
    assert report["events"] == report["head_position"] == journal.committed_position
    assert report["checkpoints"] >= 1
    assert node.call("POST", "/v1/journal/verify", {"deep": True}).error["field"] == "$.deep"
