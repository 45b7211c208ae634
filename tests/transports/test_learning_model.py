"""Reflection with a real model: the node's OpenAI-compatible provider against a local server
speaking the real wire protocol. Runs are answered by echo; reflection requests (recognised by
their instructions) get the answer each test scripts: schema-valid JSON, text that is not, or
nothing in time."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from actors.learning.rules import MODEL_INSTRUCTIONS
from tests.transports.http.httpkit import MAX_BODY, HttpNode, close_node
from tests.transports.models.conftest import FakeOpenAI, ScriptedReply, text_stream
from tests.transports.test_learning_node import FAST_TASKS, Learner, RecordingProvider
from transports.config import (
    HttpConfig,
    LearningSection,
    NodeConfig,
    ProviderConfig,
    ToolsSection,
)
from transports.http import start_http
from transports.runtime import open_runtime


class ReflectingModel(FakeOpenAI):
    """Echoes runs; answers reflections with ``reflection`` (a fresh copy each time)."""

    def __init__(self) -> None:
        super().__init__()
        self.reflection: ScriptedReply = ScriptedReply(pieces=text_stream(['{"candidates": []}']))
        self.reflections = 0

    def _echo(self, body: dict[str, Any]) -> ScriptedReply:
        messages = body.get("messages", [])
        if messages and str(messages[0].get("content", "")).startswith(MODEL_INSTRUCTIONS[:40]):
            self.reflections += 1
            return ScriptedReply(**vars(self.reflection))
        return super()._echo(body)


@pytest.fixture
def model() -> Iterator[ReflectingModel]:
    server = ReflectingModel()
    server.start()
    try:
        yield server
    finally:
        server.stop()


def open_model_learner(data_dir: Path, model: ReflectingModel, **learning: Any) -> Learner:
    config = NodeConfig(
        http=HttpConfig(port=0, max_body_bytes=MAX_BODY),
        tools=ToolsSection(shell_allowlist=("echo",)),
        provider=ProviderConfig(
            kind="openai", base_url=model.base_url, model="gpt-test", timeout_s=5, max_retries=0
        ),
        learning=LearningSection(**learning),
        tasks=FAST_TASKS,
    )
    runtime = open_runtime(data_dir, config=config)
    server = start_http(runtime, keepalive_s=0.3)
    token = (data_dir / "admin.token").read_text().strip()
    return Learner(HttpNode(runtime=runtime, server=server, token=token), RecordingProvider())


def answer(*candidates: dict[str, Any]) -> ScriptedReply:
    text = json.dumps({"candidates": list(candidates)})
    return ScriptedReply(pieces=text_stream([text[i : i + 16] for i in range(0, len(text), 16)]))


def test_the_models_structured_answer_becomes_candidates(
    data_dir: Path, model: ReflectingModel
) -> None:
    model.reflection = answer(
        {"kind": "fact", "text": "Staging is db-2.", "confidence_bps": 9100},
        {"kind": "preference", "text": "Answer in French", "confidence_bps": 7000},
    )
    learner = open_model_learner(data_dir, model)
    try:
        run_id = learner.run("user:alice", "staging moved to db-2; and French please")
        assert model.reflections == 1
        request = next(
            r.body for r in model.requests if r.body["messages"][0]["content"] == MODEL_INSTRUCTIONS
        )
        assert "tools" not in request or not request["tools"]
        assert '<reference source="the user\'s message">' in request["messages"][1]["content"]
        fact = learner.only(kind="fact")
        assert (fact["text"], fact["extractor"], fact["status"]) == (
            "Staging is db-2",
            "model",
            "applied",  # 9100 >= 8000
        )
        assert fact["evidence"][0]["run_id"] == run_id
        preference = learner.only(kind="preference")
        assert (preference["status"], preference["confidence_bps"]) == ("pending", 7000)
    finally:
        close_node(learner.node)


def test_an_answer_outside_the_schema_is_a_failed_attempt_retried_then_recorded(
    data_dir: Path, model: ReflectingModel
) -> None:
    model.reflection = answer({"kind": "opinion", "text": "x", "confidence_bps": 1})
    learner = open_model_learner(data_dir, model, max_attempts=3)
    try:
        run_id = learner.run("user:alice", "hello")
        assert learner.reflection_ended(run_id) == "task.failed"
        assert model.reflections == 3
        (stream,) = learner.reflection_tasks(run_id)
        errors = [
            s.decode().error
            for s in learner.runtime.journal.read_stream(stream)
            if s.kind == "task.failed"
        ]
        assert len(errors) == 3 and all("does not match the schema" in e for e in errors)
        assert learner.candidates() == []
        assert learner.call(None, "GET", f"/v1/runs/{run_id}").json()["state"] == "done"
    finally:
        close_node(learner.node)


def test_a_model_that_does_not_answer_in_time_fails_the_attempt_not_the_run(
    data_dir: Path, model: ReflectingModel
) -> None:
    model.reflection = ScriptedReply(
        pieces=text_stream(['{"candidates": []}']), delay_before_headers_s=3
    )
    learner = open_model_learner(data_dir, model, model_timeout_s=0.3, max_attempts=2)
    try:
        run_id = learner.run("user:alice", "hello")
        assert learner.reflection_ended(run_id) == "task.failed"
        (stream,) = learner.reflection_tasks(run_id)
        errors = [
            s.decode().error
            for s in learner.runtime.journal.read_stream(stream)
            if s.kind == "task.failed"
        ]
        assert len(errors) == 2 and all("0.3 s" in e for e in errors), errors
        assert learner.call(None, "GET", f"/v1/runs/{run_id}").json()["state"] == "done"
        # The next run is not held up by reflections in flight.
        nxt = learner.run("user:alice", "again")
        assert learner.call(None, "GET", f"/v1/runs/{nxt}").json()["state"] == "done"
    finally:
        close_node(learner.node)
