"""``reel node`` serving before its views are current, on a journal big enough that folding it
takes a while: health says ``catching_up``, reads say how far behind they are and, once the
views caught up, answer what a node with current views answers; a token and a pending
approval from before the restart work right after the ready line; a SIGTERM while the full
verification still walks the journal stops it, signs nothing over rows it did not reach, and
leaves a journal that verifies. Real subprocesses on loopback ports, a real journal; nothing
here asserts a duration (a fast machine may have caught up before the first request: each
test accepts that, and still checks the answer)."""

from __future__ import annotations

import json
import shutil
import signal
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from events import Journal, JournalReader, NodeKey, verify
from events.catalog import RunOutput
from tests.transports.test_node_process import ServingNode
from transports.http.freshness import VIEWS_BEHIND

BULK_EVENTS = 150_000
"""Rows appended behind the node's back: seconds of folding and of verifying."""
BATCH = 4096
CONFIG = '[tools]\nshell_allowlist = ["echo"]\n'
APPROVAL_RUN = 'go\n/tool shell.run {"argv": ["echo", "x"]}'


class Before:
    """A data dir a node used (a token, a finished run, a run waiting for approval), then a
    big journal; and what a node with current views answered over it."""

    def __init__(self, data: Path) -> None:
        self.data = data
        self.token = ""
        self.approval_id = ""
        self.waiting_run = ""
        self.done_run = ""
        self.answers: dict[str, Any] = {}


def request(
    node: ServingNode, path: str, token: str, method: str = "GET", body: Any = None
) -> tuple[int, Any, dict[str, str]]:
    """Status, JSON body and headers of one request with ``token``."""
    sent = urllib.request.Request(
        node.base + path,
        data=None if body is None else json.dumps(body).encode(),
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
        method=method,
    )
    try:
        with urllib.request.urlopen(sent, timeout=120) as reply:
            return reply.status, json.loads(reply.read()), dict(reply.headers)
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read()), dict(error.headers)


def run_state(node: ServingNode, run_id: str) -> Any:
    return request(node, f"/v1/runs/{run_id}", node.token)[1].get("state")


def health(node: ServingNode) -> dict[str, Any]:
    with urllib.request.urlopen(node.base + "/healthz", timeout=30) as reply:
        return json.loads(reply.read())  # type: ignore[no-any-return]


def wait_caught_up(node: ServingNode, timeout: float = 300.0) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while (state := health(node))["status"] == "catching_up":
        assert time.monotonic() < deadline, state
        time.sleep(0.1)
    return state


def stop(node: ServingNode) -> dict[str, Any]:
    node.process.send_signal(signal.SIGTERM)
    assert node.finish(120) == 0, node.lines[-5:]
    return node.wait_for("reel node stopped")


READS = ("/v1/sessions", "/v1/runs/{done_run}", "/v1/runs/{waiting_run}", "/v1/approvals")


def answers(node: ServingNode, before: Before) -> dict[str, Any]:
    out = {}
    for path in READS:
        status, body, _headers = request(node, path.format(**vars(before)), node.token)
        assert status == 200, (path, body)
        out[path] = body
    return out


def bulk(data: Path, events: int) -> None:
    """``events`` run outputs appended straight to the journal (the node's key signs its
    checkpoints), as a busy node would have left them."""
    chunk = [RunOutput(run_id="bulk", turn=0, text="a line of output " * 6)] * BATCH
    with Journal(data / "journal.db", node_key=NodeKey.load(data / "node.key")) as journal:
        for seq in range(0, events, BATCH):
            journal.append("run/bulk", chunk, expected_seq=seq, correlation_id=None)


@pytest.fixture(scope="module")
def before(tmp_path_factory: pytest.TempPathFactory) -> Before:
    data = tmp_path_factory.mktemp("startup") / "data"
    data.mkdir(mode=0o700)
    (data / "config.toml").write_text(CONFIG)
    made = Before(data)
    node = ServingNode(data)
    try:
        status, created, _ = request(
            node, "/v1/tokens", node.token, "POST", {"principal": "user:ann", "roles": ["admin"]}
        )
        assert status == 201, created
        made.token = created["token"]
        made.done_run = node.start_run("hello")
        node.wait_until(lambda: run_state(node, made.done_run) == "done")
        made.waiting_run = node.start_run(APPROVAL_RUN)

        def pending() -> list[Any]:
            return request(node, "/v1/approvals?state=pending", node.token)[1]["items"]  # type: ignore[no-any-return]

        node.wait_until(lambda: bool(pending()))
        made.approval_id = pending()[0]["approval_id"]
    finally:
        stop(node)
    bulk(data, BULK_EVENTS)
    node = ServingNode(data)  # folds the bulk: the answers of a node whose views are current
    try:
        wait_caught_up(node)
        made.answers = answers(node, made)
    finally:
        stop(node)
    return made


@pytest.fixture
def copy(before: Before, tmp_path: Path) -> Iterator[Path]:
    data = tmp_path / "data"
    shutil.copytree(before.data, data)
    yield data


@pytest.fixture
def started() -> Iterator[list[ServingNode]]:
    nodes: list[ServingNode] = []
    yield nodes
    for node in nodes:
        node.kill()


def drop_views(data: Path) -> None:
    for suffix in ("", "-wal", "-shm"):
        (data / f"views.db{suffix}").unlink(missing_ok=True)


def test_without_views_the_node_serves_while_they_catch_up_then_answers_as_before(
    before: Before, copy: Path, started: list[ServingNode]
) -> None:
    drop_views(copy)
    node = ServingNode(copy)
    started.append(node)
    state = health(node)
    assert state["status"] in ("catching_up", "ok"), state
    if state["status"] == "catching_up":
        assert state["views_position"] < state["journal_position"], state
    status, _body, headers = request(node, "/v1/sessions", node.token)
    assert status == 200
    assert int(headers[VIEWS_BEHIND]) >= 0, headers
    if state["status"] == "catching_up":
        assert int(headers[VIEWS_BEHIND]) > 0 or health(node)["status"] == "ok", headers
    done = wait_caught_up(node)
    assert done == {"status": "ok", "version": state["version"]}, done
    assert answers(node, before) == before.answers
    _status, _body, headers = request(node, "/v1/approvals", node.token)
    assert headers[VIEWS_BEHIND].isdigit()
    stop(node)


def test_a_token_and_a_pending_approval_from_before_work_right_after_the_ready_line(
    before: Before, copy: Path, started: list[ServingNode]
) -> None:
    """Views missing, so nothing of the views can answer for them yet: the token book and
    recovery come from the journal, and the approval's lookup waits for the views."""
    drop_views(copy)
    node = ServingNode(copy)
    started.append(node)
    status, who, headers = request(node, "/v1/whoami", before.token)
    assert status == 200 and who["principal"] == "user:ann", who
    assert VIEWS_BEHIND in headers
    status, decided, _ = request(
        node, f"/v1/approvals/{before.approval_id}", before.token, "POST", {"decision": "allow"}
    )
    assert status == 200 and decided["state"] == "resolved", decided
    node.wait_until(lambda: run_state(node, before.waiting_run) == "done", timeout=120)
    status, refused, _ = request(node, "/v1/whoami", before.token + "x")
    assert status == 401, refused
    stop(node)


def test_sigterm_during_the_full_verification_stops_it_and_signs_nothing_unchecked(
    before: Before, copy: Path, started: list[ServingNode]
) -> None:
    reader = JournalReader.open(copy / "journal.db")
    head_before = reader.head()
    reader.close()
    node = ServingNode(copy)
    started.append(node)
    stopped = stop(node)  # right after the ready line
    reader = JournalReader.open(copy / "journal.db")
    try:
        since = reader.read(head_before.position, 100_000)
        report = verify(reader, trusted_public_key=NodeKey.load(copy / "node.key").public_key)
    finally:
        reader.close()
    signed = [e.position for e in since if e.kind == "journal.checkpoint"]
    if stopped["journal_verified"]:  # the walk had ended: the final checkpoint, last
        assert signed and signed[-1] == since[-1].position, since[-3:]
    else:  # stopped: nothing signed over rows it did not reach, not even at the end
        assert signed == [], signed
    assert report.ok and report.key_trusted, report
