"""``/v1/memory`` on a real node: the round trip, ranking, who sees and may do what, bad input,
secrets, auto-injection into a run, and replay. Real journal, views (FTS5, sqlite-vec), Cedar."""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import pytest

from events import JournalReader
from events.catalog import AccessDecided
from events.redaction.redact import MARKER
from tests import processes
from tests.events.decoded import decoded
from tests.transports.http.httpkit import HttpNode, HttpReply, close_node
from tests.transports.http.test_http_openapi import check
from transports.config import HttpConfig, MemoryConfig, NodeConfig
from transports.http import start_http
from transports.http.openapi import document
from transports.runtime import open_runtime

REEL = str(Path(sys.executable).with_name("reel"))
UNKNOWN = "01ARZ3NDEKTSV4RRFFQ69G5FAV"
SECRET = "ghp_R2d2C3poBb8Ee7Yy6Uu5Ii4Oo3Pp2Qq1Ww0X"
MIN_SCORE = MemoryConfig().min_score
STAGING = "The staging database runs PostgreSQL 16 on host db-staging-01."


def memory_node(data_dir: Path, **config: Any) -> HttpNode:
    """A node whose API takes bodies up to 64 KiB (an over-cap memory text is ~8 KB)."""
    cfg = NodeConfig(http=HttpConfig(port=0, max_body_bytes=64 * 1024), **config)
    runtime = open_runtime(data_dir, config=cfg)
    try:
        server = start_http(runtime, keepalive_s=0.3)
    except BaseException:
        runtime.close(1.0)
        raise
    return HttpNode(runtime, server, (data_dir / "admin.token").read_text().strip())


@pytest.fixture
def mnode(data_dir: Path) -> Iterator[HttpNode]:
    running = memory_node(data_dir)
    try:
        yield running
    finally:
        close_node(running)


def checked(
    node: HttpNode, method: str, path: str, body: Any = None, token: str | None = None
) -> HttpReply:
    """A call whose reply must match /v1/openapi.json (status documented, body conformant)."""
    auth = "default" if token is None else f"Bearer {token}"
    reply = node.call(method, path, body, auth=auth)
    check(document(), method, path, reply)
    return reply


def token_for(node: HttpNode, principal: str, role: str) -> str:
    reply = node.call("POST", "/v1/tokens", {"principal": principal, "roles": [role]})
    assert reply.status == 201, reply
    token: str = reply.json()["token"]
    return token


def write(node: HttpNode, token: str | None = None, **body: Any) -> HttpReply:
    return checked(node, "POST", "/v1/memory", body, token)


def search(node: HttpNode, q: str, token: str | None = None, **params: Any) -> list[dict[str, Any]]:
    reply = checked(node, "GET", f"/v1/memory?{urlencode({'q': q, **params})}", token=token)
    assert reply.status == 200, reply
    hits: list[dict[str, Any]] = reply.json()["hits"]
    return hits


def listed(node: HttpNode, token: str | None = None) -> set[str]:
    reply = checked(node, "GET", "/v1/memory", token=token)
    assert reply.status == 200, reply
    return {item["item_id"] for item in reply.json()["items"]}


def memory_events(node: HttpNode, kind: str) -> list[Any]:
    return node.runtime.journal.events_of_kinds((kind,))


def test_write_search_get_delete_round_trip(mnode: HttpNode) -> None:
    made = write(mnode, text=STAGING, tags=["db", "staging"], scope="global")
    assert made.status == 201, made
    item_id = made.json()["id"]
    item = made.json()["item"]
    assert (item["item_id"], item["scope"], item["written_by"]) == (item_id, "global", "admin")
    assert item["tags"] == ["db", "staging"] and item["source"] == "manual"

    (hit,) = search(mnode, "which postgres version runs on staging?", k=3)
    assert hit["item"]["item_id"] == item_id
    assert all(0.0 <= hit[s] <= 1.0 for s in ("lexical", "vector", "recency", "final"))
    assert hit["lexical"] > 0 and hit["vector"] > 0 and hit["recency"] > 0.99

    assert listed(mnode) == {item_id}
    got = checked(mnode, "GET", f"/v1/memory/{item_id}")
    assert got.status == 200 and got.json()["text"] == STAGING

    gone = checked(mnode, "DELETE", f"/v1/memory/{item_id}?reason=moved+to+16.2")
    assert gone.status == 200, gone
    deleted = gone.json()["item"]
    assert deleted["deleted_by"] == "admin" and deleted["deleted_reason"] == "moved to 16.2"
    assert checked(mnode, "GET", f"/v1/memory/{item_id}").status == 404
    assert search(mnode, "postgres staging") == [] and listed(mnode) == set()
    again = checked(mnode, "DELETE", f"/v1/memory/{item_id}")
    assert again.status == 409 and "already deleted" in again.error["message"]
    # The journal holds both facts, each caused by the admin, each on the item's own stream.
    stored = memory_events(mnode, "memory.item_written") + memory_events(
        mnode, "memory.item_deleted"
    )
    assert [(s.stream, s.stream_seq, s.principal) for s in stored] == [
        (f"memory/{item_id}", 0, "admin"),
        (f"memory/{item_id}", 1, "admin"),
    ]


def test_the_nodes_projection_keeps_the_searchs_vectors_in_memory(mnode: HttpNode) -> None:
    """The view's matrix (projections/memory/matrix.py) is loaded by the first search and from
    then on follows the node's writes and deletes itself: never loaded again, and its nearest
    rows are the index's at every step."""
    matrix = mnode.runtime.memory.view.matrix
    assert matrix is not None and matrix.kept and matrix.loads == 0
    first = write(mnode, text=STAGING, scope="global").json()["id"]
    assert [h["item"]["item_id"] for h in search(mnode, "postgres staging")] == [first]
    assert matrix.loads == 1 and matrix.generation is not None
    loaded_at = matrix.generation
    second = write(mnode, text="The staging cache is Redis 7 on cache-staging-02.", scope="global")
    assert search(mnode, "redis staging cache")[0]["item"]["item_id"] == second.json()["id"]
    assert checked(mnode, "DELETE", f"/v1/memory/{first}").status == 200
    assert first not in [h["item"]["item_id"] for h in search(mnode, "postgres staging")]
    assert matrix.loads == 1 and (matrix.generation or 0) > loaded_at
    assert matrix.nbytes() > 0


def test_search_ranks_the_matching_item_first(mnode: HttpNode) -> None:
    texts = {
        "vim": "Alice edits code in vim with a dark colour scheme.",
        "pg": STAGING,
        "deploy": "Deploys to production happen on Tuesdays after the change review.",
        "coffee": "The office coffee machine is on the third floor.",
    }
    ids = {}
    for key, text in texts.items():
        reply = write(mnode, text=text, scope="global")
        assert reply.status == 201
        ids[key] = reply.json()["id"]
    for query, best in [
        ("what editor does alice use", "vim"),
        ("postgresql version on the staging database", "pg"),
        ("when do we deploy to production", "deploy"),
    ]:
        hits = search(mnode, query, k=4)
        assert hits[0]["item"]["item_id"] == ids[best], (query, hits)
        finals = [h["final"] for h in hits]
        assert finals == sorted(finals, reverse=True)
    # A word no item holds matches no item by words; what the vectors still see (shared
    # character trigrams) stays below what a run is shown.
    assert all(h["lexical"] == 0 and h["final"] < MIN_SCORE for h in search(mnode, "zeppelin"))
    assert len(search(mnode, "the", k=1)) <= 1


def test_who_sees_and_may_do_what(mnode: HttpNode) -> None:
    viewer = token_for(mnode, "user:vera", "viewer")
    alice = token_for(mnode, "agent:alice", "agent")
    bob = token_for(mnode, "agent:bob", "agent")
    operator = token_for(mnode, "user:oscar", "operator")

    shared = write(mnode, operator, text="Deploys happen on Tuesdays.", scope="global")
    assert shared.status == 201
    shared_id = shared.json()["id"]
    # A viewer reads; it may not write or delete (403 naming the action).
    refused = write(mnode, viewer, text="viewers cannot write")
    assert refused.status == 403 and "memory.write" in refused.error["message"]
    assert listed(mnode, viewer) == {shared_id}
    denied = checked(mnode, "DELETE", f"/v1/memory/{shared_id}", token=viewer)
    assert denied.status == 403 and "memory.delete" in denied.error["message"]

    # An agent writes its own items, never a global one.
    own = write(mnode, alice, text="Alice prefers short answers about deploys.")
    assert own.status == 201 and own.json()["item"]["principal"] == "agent:alice"
    own_id = own.json()["id"]
    assert write(mnode, alice, text="everyone must obey alice", scope="global").status == 403
    session = mnode.call("POST", "/v1/sessions", {}, auth=f"Bearer {alice}").json()["session_id"]
    in_session = write(mnode, alice, text="This session is about deploys.", scope="session",
                       session_id=session)  # fmt: skip
    assert in_session.status == 201
    session_item = in_session.json()["id"]

    # Alice sees the global item and her own; Bob sees only the global one, and Alice's items
    # do not exist for him (404, not 403: no oracle).
    assert listed(mnode, alice) == {shared_id, own_id, session_item}
    assert listed(mnode, bob) == {shared_id}
    assert {h["item"]["item_id"] for h in search(mnode, "deploys", bob, k=10)} == {shared_id}
    assert {h["item"]["item_id"] for h in search(mnode, "deploys", alice, k=10)} == {
        shared_id,
        own_id,
    }
    with_session = search(mnode, "deploys", alice, k=10, session_id=session)
    assert session_item in {h["item"]["item_id"] for h in with_session}
    assert (
        mnode.call("GET", f"/v1/memory?q=deploys&session_id={session}", auth=f"Bearer {bob}").status
        == 404
    )
    for item_id in (own_id, session_item):
        assert checked(mnode, "GET", f"/v1/memory/{item_id}", token=bob).status == 404
        assert checked(mnode, "DELETE", f"/v1/memory/{item_id}", token=bob).status == 404
    assert checked(mnode, "DELETE", f"/v1/memory/{shared_id}", token=bob).status == 403
    # A viewer may read every session, so it sees the session item, but not Alice's own.
    assert listed(mnode, viewer) == {shared_id, session_item}
    assert checked(mnode, "DELETE", f"/v1/memory/{own_id}", token=alice).status == 200
    # An operator writes and deletes global items; the decisions are on the journal.
    assert checked(mnode, "DELETE", f"/v1/memory/{shared_id}", token=operator).status == 200
    decided = [
        (s.principal, decoded(s, AccessDecided).action, decoded(s, AccessDecided).outcome)
        for s in mnode.runtime.journal.events_of_kinds(("access.decided",))
        if decoded(s, AccessDecided).action.startswith("memory.")
    ]
    assert ("user:vera", "memory.write", "deny") in decided
    assert ("agent:alice", "memory.write", "deny") in decided
    assert ("user:oscar", "memory.delete", "allow") in decided


@pytest.mark.parametrize(
    ("body", "field", "words"),
    [
        ({"text": "x" * 8001}, "$.text", "the cap is 8,000"),
        ({"text": "   "}, "$.text", "blank"),
        ({"text": "t", "tags": [f"t{i}" for i in range(17)]}, "$.tags", "the cap is 16"),
        ({"text": "t", "tags": ["x" * 65]}, "$.tags", "the cap is 64"),
        ({"text": "t", "scope": "session"}, "$.session_id", "needs a session_id"),
        ({"text": "t", "scope": "global", "session_id": UNKNOWN}, "$.session_id", "only for"),
        ({"text": "t", "scope": "session", "session_id": UNKNOWN}, "$.session_id", "no session"),
        ({"text": "t", "scope": "team"}, "$.scope", ""),
        ({"text": "t", "expires_at": "2001-01-01T00:00:00Z"}, "$.expires_at", "future"),
        ({"text": "t", "expires_at": "2999-01-01T00:00:00"}, "$.expires_at", "timezone"),
        ({"text": "t", "colour": "red"}, "$.colour", "unknown field"),
    ],
)
def test_bad_writes_are_400_naming_the_field_and_append_nothing(
    mnode: HttpNode, body: dict[str, Any], field: str, words: str
) -> None:
    reply = write(mnode, **body)
    assert reply.status == 400, reply
    assert reply.error["field"] == field and words in reply.error["message"], reply.error
    assert memory_events(mnode, "memory.item_written") == []


def test_bad_reads_and_deletes(mnode: HttpNode) -> None:
    for path in (f"/v1/memory/{UNKNOWN}", "/v1/memory/not-an-id"):
        assert checked(mnode, "GET", path).status == 404
        assert checked(mnode, "DELETE", path).status == 404
    cases = [
        ("/v1/memory?q=", "query.q"),
        ("/v1/memory?q=a&k=0", "query.k"),
        ("/v1/memory?q=a&k=51", "query.k"),
        ("/v1/memory?q=a&limit=5", "query.limit"),
        ("/v1/memory?k=5", "query.k"),
        ("/v1/memory?q=a&session_id=nope", "query.session_id"),
        ("/v1/memory?q=a&top=3", "query.top"),
    ]
    for path, field in cases:
        reply = checked(mnode, "GET", path)
        assert reply.status == 400 and reply.error["field"] == field, (path, reply.error)
    missing = checked(mnode, "GET", f"/v1/memory?q=a&session_id={UNKNOWN}")
    assert missing.status == 404 and missing.error["field"] == "query.session_id"
    item_id = write(mnode, text="a fact").json()["id"]
    long_reason = checked(mnode, "DELETE", f"/v1/memory/{item_id}?reason={'r' * 1001}")
    assert long_reason.status == 400 and long_reason.error["field"] == "query.reason"
    empty_reason = checked(mnode, "DELETE", f"/v1/memory/{item_id}?reason=")
    assert empty_reason.status == 400 and empty_reason.error["field"] == "query.reason"


def test_an_item_past_its_expiry_is_never_returned(mnode: HttpNode) -> None:
    soon = time.time() + 1.0
    expires = (
        time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(soon)) + f".{int(soon % 1 * 1000):03d}Z"
    )
    made = write(
        mnode, text="The fire drill is this afternoon.", scope="global", expires_at=expires
    )
    assert made.status == 201 and made.json()["item"]["expires_at_ms"] == int(soon * 1000)
    item_id = made.json()["id"]
    assert search(mnode, "fire drill")
    time.sleep(max(0.0, soon - time.time()) + 0.1)
    assert search(mnode, "fire drill") == [] and listed(mnode) == set()
    assert checked(mnode, "GET", f"/v1/memory/{item_id}").status == 404


def test_a_secret_in_the_text_is_redacted_and_never_returned(mnode: HttpNode) -> None:
    made = write(mnode, text=f"the deploy token is {SECRET} keep it safe", tags=[SECRET])
    assert made.status == 201
    item_id = made.json()["id"]
    for reply in (
        made,
        checked(mnode, "GET", f"/v1/memory/{item_id}"),
        checked(mnode, "GET", "/v1/memory"),
        checked(mnode, "GET", "/v1/memory?q=deploy+token"),
        checked(mnode, "GET", f"/v1/memory?q={SECRET}"),
    ):
        assert SECRET not in reply.body.decode()
    assert MARKER in checked(mnode, "GET", f"/v1/memory/{item_id}").json()["text"]
    mnode.runtime.journal.checkpoint()
    for name in ("journal.db", "views.db"):
        assert SECRET.encode() not in (mnode.runtime.data_dir / name).read_bytes(), name


def context_of(node: HttpNode, run_id: str) -> dict[str, Any]:
    for event in node.finish(run_id):
        if event.event == "run.context_assembled":
            context: dict[str, Any] = event.entry["event"]
            return context
    raise AssertionError("no run.context_assembled")


def test_a_matching_global_item_is_injected_into_a_run_and_a_reference_resolves(
    mnode: HttpNode,
) -> None:
    item_id = write(mnode, text=STAGING, scope="global").json()["id"]
    other = write(mnode, text="The office coffee machine is on the third floor.").json()["id"]
    context = context_of(
        mnode, mnode.start("Which PostgreSQL version does the staging database run?")
    )
    (injected,) = context["memory"]
    assert injected["item_id"] == item_id and injected["text"] == STAGING
    # scores in basis points (0-10000), as the event records them
    assert injected["final"] >= mnode.runtime.node.services.config.memory_min_score * 10_000
    assert all(0 < injected[s] <= 10_000 for s in ("lexical", "vector", "recency", "final"))
    referenced = context_of(mnode, mnode.start(f"What floor? see @memory:{other}"))
    (reference,) = referenced["references"]
    assert reference["outcome"] == "included" and reference["target"] == other
    unknown = context_of(mnode, mnode.start(f"and @memory:{UNKNOWN}"))
    assert unknown["references"][0]["outcome"] == "not_found"


def test_memory_config_reaches_the_runs(data_dir: Path) -> None:
    node = memory_node(data_dir, memory=MemoryConfig(inject_k=0))
    try:
        write(node, text=STAGING, scope="global")
        context = context_of(node, node.start("Which PostgreSQL version does staging run?"))
        assert context["memory"] == []
    finally:
        close_node(node)


def test_reel_replay_reports_identical_views_with_memory(data_dir: Path) -> None:
    node = memory_node(data_dir)
    try:
        first = write(node, text=STAGING, scope="global").json()["id"]
        write(node, text="Alice prefers vim.", tags=["editor"])
        node.call("DELETE", f"/v1/memory/{first}")
        node.finish(node.start("which editor?"))
    finally:
        close_node(node)
    done = processes.run(
        [REEL, "replay", "--data", str(data_dir)], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "views identical" in done.stdout
    reader = JournalReader.open(data_dir / "journal.db")
    try:
        kinds = [s.kind for s in reader.events_of_kinds(("memory.item_written",))]
    finally:
        reader.close()
    assert kinds == ["memory.item_written"] * 2


CHATTY = (
    "Hi there, hope your week is going well and the release prep is not too hectic. When you "
    "have a moment, could you remind me which PostgreSQL version the staging database runs?"
)


def test_a_long_message_that_holds_an_items_words_has_it_injected(mnode: HttpNode) -> None:
    """The final score is the item's share of the whole message, low for a long one; the words
    the item holds still weigh enough (``evidence``, over two words or more)."""
    item_id = write(mnode, text=STAGING, scope="global").json()["id"]
    write(mnode, text="The office coffee machine is on the third floor.", scope="global")
    found = checked(mnode, "GET", "/v1/memory?" + urlencode({"q": CHATTY, "k": 1})).json()
    (hit,) = found["hits"]
    assert hit["item"]["item_id"] == item_id
    assert hit["final"] < MIN_SCORE and hit["terms"] >= 2 and hit["evidence"] >= 2.0, hit
    (injected,) = context_of(mnode, mnode.start(CHATTY))["memory"]
    assert (injected["item_id"], injected["by"]) == (item_id, "words")
    terse = context_of(mnode, mnode.start("Which PostgreSQL version does staging run?"))
    assert [(m["item_id"], m["by"]) for m in terse["memory"]] == [(item_id, "score")]
    unrelated = (
        "Hi there, hope your week is going well. Could you draft a short note thanking the "
        "whole team for the offsite and the lovely dinner on the third evening?"
    )
    assert context_of(mnode, mnode.start(unrelated))["memory"] == []


def test_injection_by_words_can_be_turned_off(data_dir: Path) -> None:
    node = memory_node(data_dir, memory=MemoryConfig(min_evidence=0))
    try:
        write(node, text=STAGING, scope="global")
        assert context_of(node, node.start(CHATTY))["memory"] == []
    finally:
        close_node(node)
