"""Finding sessions and runs over HTTP: ``?q=`` (text search), the ``principal`` filter and
``?order=newest`` on ``GET /v1/sessions`` and ``GET /v1/runs`` (``order`` on ``GET /v1/tasks``
too), bad values, and a search that says nothing about what the caller may not read.

One node (module scope) holds, made through the API:

- session S1 (admin): label ``Billing incident``, key ``ops:billing``; run R1 ``hello zebra``
  (done);
- session S2 (``user:op``, an operator): label ``deploy review``; run R2 fails with
  ``database on fire``;
- session S3 (``agent:app``): label ``agent notes``; run R3 answers ``the secret word is
  platypus`` (done).
"""

from __future__ import annotations

import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from tests.transports.http.httpkit import HttpNode, HttpReply, close_node, eventually, open_node
from tests.transports.http.test_http_openapi import check
from transports.http import listing
from transports.http.openapi import document


@dataclass(frozen=True)
class Found:
    node: HttpNode
    tokens: dict[str, str]
    sessions: dict[str, str]
    runs: dict[str, str]


def call(node: HttpNode, path: str, token: str | None = None) -> HttpReply:
    reply = node.call("GET", path, auth=f"Bearer {token or node.token}")
    check(document(), "GET", path, reply)
    return reply


def mint(node: HttpNode, principal: str, role: str) -> str:
    reply = node.call("POST", "/v1/tokens", {"principal": principal, "roles": [role]})
    assert reply.status == 201, reply
    token: str = reply.json()["token"]
    return token


def run_in(node: HttpNode, token: str, session: dict[str, Any], text: str) -> tuple[str, str]:
    """A session made by ``token``'s principal with one run of ``text``, ended."""
    made = node.call("POST", "/v1/sessions", session, auth=f"Bearer {token}")
    assert made.status == 201, made
    sid: str = made.json()["session_id"]
    started = node.call(
        "POST", f"/v1/sessions/{sid}/messages", {"text": text}, auth=f"Bearer {token}"
    )
    assert started.status == 202, started
    run_id: str = started.json()["run_id"]
    node.finish(run_id)
    ended = eventually(lambda: node.call("GET", f"/v1/runs/{run_id}").json()["ended_at_ms"])
    assert ended, run_id
    return sid, run_id


@pytest.fixture(scope="module")
def found(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Found]:
    node = open_node(tmp_path_factory.mktemp("search") / "data")
    try:
        tokens = {
            "admin": node.token,
            "op": mint(node, "user:op", "operator"),
            "agent": mint(node, "agent:app", "agent"),
            "other": mint(node, "agent:other", "agent"),
        }
        s1, r1 = run_in(
            node,
            node.token,
            {"label": "Billing incident", "session_key": "ops:billing"},
            "hello zebra",
        )
        s2, r2 = run_in(node, tokens["op"], {"label": "deploy review"}, "/fail database on fire")
        s3, r3 = run_in(
            node, tokens["agent"], {"label": "agent notes"}, "the secret word is platypus"
        )
        yield Found(node, tokens, {"S1": s1, "S2": s2, "S3": s3}, {"R1": r1, "R2": r2, "R3": r3})
    finally:
        close_node(node)


def every(found: Found, path: str, key: str, token: str | None = None) -> list[str]:
    """The ids of every page of ``path``, following ``next_after`` to the end."""
    out: list[str] = []
    after = None
    for _ in range(100):
        sep = "&" if "?" in path else "?"
        page = call(found.node, path + (f"{sep}after={after}" if after else ""), token).json()
        out += [item[key] for item in page["items"]]
        if page["next_after"] is None:
            return out
        after = page["next_after"]
    raise AssertionError("the pages never ended")


def q(text: str) -> str:
    return urllib.parse.quote(text)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("billing", ["S1"]),  # the label, any case
        ("OPS:BIL", ["S1"]),  # the key
        ("user:op", ["S2"]),  # the owner
        ("  review ", ["S2"]),  # surrounding blanks are not part of the text
        ("e", ["S1", "S2", "S3"]),
        ("no such session", []),
    ],
)
def test_sessions_are_found_by_label_key_and_owner(
    found: Found, text: str, expected: list[str]
) -> None:
    sessions = every(found, f"/v1/sessions?q={q(text)}", "session_id")
    assert sessions == [found.sessions[name] for name in expected]


def test_a_session_is_found_by_its_id(found: Found) -> None:
    sid = found.sessions["S3"]
    assert every(found, f"/v1/sessions?q={sid.lower()}", "session_id") == [sid]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("ZEBRA", ["R1"]),  # the answer
        ("database on fire", ["R2"]),  # how it failed
        ("provider_error", ["R2"]),  # the termination reason
        ("agent:app", ["R3"]),  # who it acts for
        ("no such run", []),
    ],
)
def test_runs_are_found_by_answer_failure_and_principal(
    found: Found, text: str, expected: list[str]
) -> None:
    runs = every(found, f"/v1/runs?q={q(text)}", "run_id")
    assert runs == [found.runs[name] for name in expected]


def test_a_run_is_found_by_its_id_or_its_sessions(found: Found) -> None:
    assert every(found, f"/v1/runs?q={found.runs['R2']}", "run_id") == [found.runs["R2"]]
    assert every(found, f"/v1/runs?q={found.sessions['S1']}", "run_id") == [found.runs["R1"]]


def test_the_principal_filter_and_the_state_filter_together(found: Found) -> None:
    assert every(found, "/v1/runs?principal=user:op", "run_id") == [found.runs["R2"]]
    assert every(found, "/v1/runs?principal=user:op&state=failed", "run_id") == [found.runs["R2"]]
    assert every(found, "/v1/runs?principal=user:op&state=done", "run_id") == []
    assert every(found, "/v1/runs?state=done&q=platypus", "run_id") == [found.runs["R3"]]
    assert every(found, "/v1/sessions?principal=agent:app", "session_id") == [found.sessions["S3"]]
    assert every(found, "/v1/sessions?principal=user:nobody", "session_id") == []


@pytest.mark.parametrize(
    ("path", "key", "names"),
    [
        ("/v1/runs", "run_id", ["R1", "R2", "R3"]),
        ("/v1/sessions", "session_id", ["S1", "S2", "S3"]),
        ("/v1/runs?q=e", "run_id", ["R1", "R2", "R3"]),
    ],
)
def test_newest_first_pages_back_in_time(
    found: Found, path: str, key: str, names: list[str]
) -> None:
    table = found.runs if key == "run_id" else found.sessions
    sep = "&" if "?" in path else "?"
    oldest = every(found, f"{path}{sep}limit=1", key)
    newest = every(found, f"{path}{sep}order=newest&limit=1", key)
    assert oldest == [table[name] for name in names]
    assert newest == list(reversed(oldest))
    first = call(found.node, f"{path}{sep}order=newest&limit=1").json()
    assert [item[key] for item in first["items"]] == [table[names[-1]]]
    assert first["next_after"] == table[names[-1]]


def test_tasks_newest_first(found: Found) -> None:
    queue = found.node.runtime.node.tasks
    made = [queue.enqueue("noop", {"n": n}).task_id for n in range(3)]
    assert eventually(lambda: set(made) <= set(every(found, "/v1/tasks", "task_id")))
    # Only this test's tasks: the fixture's runs enqueue reflection tasks of their own, which
    # may appear between the two reads.
    oldest = [t for t in every(found, "/v1/tasks?limit=2", "task_id") if t in made]
    newest = [t for t in every(found, "/v1/tasks?order=newest&limit=2", "task_id") if t in made]
    assert newest == list(reversed(oldest)) == list(reversed(made))


def test_a_searched_page_is_full_and_its_cursor_is_an_item_it_returns(found: Found) -> None:
    page = call(found.node, "/v1/runs?q=e&limit=2").json()
    assert [r["run_id"] for r in page["items"]] == [found.runs["R1"], found.runs["R2"]]
    assert page["next_after"] == found.runs["R2"]
    last = call(found.node, f"/v1/runs?q=e&limit=2&after={page['next_after']}").json()
    assert [r["run_id"] for r in last["items"]] == [found.runs["R3"]]
    assert last["next_after"] is None


def test_each_principal_finds_only_what_it_may_read(found: Found) -> None:
    agent = found.tokens["agent"]
    assert every(found, "/v1/runs?q=e", "run_id", agent) == [found.runs["R3"]]
    assert every(found, "/v1/sessions?q=e", "session_id", agent) == [found.sessions["S3"]]
    assert every(found, "/v1/runs?q=zebra", "run_id", agent) == []
    assert every(found, "/v1/runs?q=e", "run_id", found.tokens["op"]) == list(found.runs.values())


@pytest.mark.parametrize("limit", [1, 50])
@pytest.mark.parametrize("path", ["/v1/runs", "/v1/sessions"])
def test_a_search_says_nothing_of_what_the_caller_may_not_read(
    found: Found, path: str, limit: int
) -> None:
    """agent:other reads none of these: text in them and text in nothing answer alike."""
    other = found.tokens["other"]
    answers = {
        text: call(found.node, f"{path}?q={q(text)}&limit={limit}", other).json()
        for text in ("e", "platypus", "zebra", "agent notes", "billing", "no such text anywhere")
    }
    for answer in answers.values():
        assert answer["items"] == []
        assert answer["next_after"] is None


def test_a_search_that_stops_early_gives_a_cursor_that_tells_nothing(
    found: Found, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With a scan of two rows per page, a page stops after two rows read: its cursor is the
    second row, whatever the text and whoever asks; following the cursors finds every match."""
    monkeypatch.setattr(listing, "SCAN_ROWS", 2)
    other, admin = found.tokens["other"], found.node.token
    for path in ("/v1/runs", "/v1/sessions"):
        pages = {
            text: call(found.node, f"{path}?q={q(text)}", other).json()
            for text in ("platypus", "no such text anywhere")
        }
        assert pages["platypus"] == pages["no such text anywhere"]
        assert pages["platypus"]["items"] == []
        key = "run_id" if path == "/v1/runs" else "session_id"
        second = (found.runs if key == "run_id" else found.sessions).values()
        assert pages["platypus"]["next_after"] == list(second)[1]
        assert every(found, f"{path}?q=platypus", key, other) == []
    assert every(found, "/v1/runs?q=platypus", "run_id", admin) == [found.runs["R3"]]
    assert every(found, "/v1/runs?q=e&order=newest", "run_id", admin) == list(
        reversed(found.runs.values())
    )


@pytest.mark.parametrize(
    ("path", "field"),
    [
        ("/v1/runs?q=", "query.q"),
        ("/v1/runs?q=%20%20", "query.q"),
        ("/v1/sessions?q=" + "x" * 201, "query.q"),
        ("/v1/sessions?q=", "query.q"),
        ("/v1/runs?order=sideways", "query.order"),
        ("/v1/sessions?order=", "query.order"),
        ("/v1/tasks?order=NEWEST", "query.order"),
        ("/v1/runs?principal=not%20a%20principal", "query.principal"),
        ("/v1/sessions?principal=", "query.principal"),
        ("/v1/runs?q=a&q=b", "query.q"),
    ],
)
def test_bad_search_parameters_are_400_naming_them(found: Found, path: str, field: str) -> None:
    reply = call(found.node, path)
    assert reply.status == 400, reply
    assert reply.error["code"] == "invalid_argument"
    assert reply.error["field"] == field


def test_the_longest_search_is_taken(found: Found) -> None:
    reply = call(found.node, "/v1/sessions?q=" + "x" * 200)
    assert reply.status == 200, reply
    assert reply.json()["items"] == []


def test_a_search_on_an_empty_node(node: HttpNode) -> None:
    for path in ("/v1/runs?q=x", "/v1/sessions?q=x&order=newest", "/v1/tasks?order=newest"):
        reply = call(node, path)
        assert reply.status == 200, reply
        assert reply.json()["items"] == [] and reply.json()["next_after"] is None
