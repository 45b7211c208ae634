"""A real node's tool loop against real model servers (opt-in: ``REEL_TEST_LLM=1``, after
tests/llm/prepare.sh; the servers are those of conftest.py).

The model must call ``echo`` (``tool_choice``; every other tool is disabled, so ``echo`` is the
one the model is offered): the run gets the call, runs it, feeds the result back and ends done.
With a tiny ``max_tokens`` the call is cut off: no call is made, nothing broken goes back to
the server, and the run fails ``provider_error`` saying why.

llama-server's ``required`` lets the model write text before its call (the grammar allows any
text up to ``<tool_call>``), and a 135M-parameter model left to itself never writes it: the
system prompt shows it one call. llama-cpp-python's named choice starts the call itself.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.llm.conftest import Server
from tests.transports.http.httpkit import MAX_BODY, HttpNode, close_node
from tests.transports.models.test_openai_runs import run
from tools import build_catalog
from transports.config import HttpConfig, NodeConfig, ProviderConfig, RunsConfig, ToolsSection
from transports.http import start_http
from transports.runtime import open_runtime

pytestmark = [
    pytest.mark.llm,
    pytest.mark.skipif(
        os.environ.get("REEL_TEST_LLM") != "1", reason="real-model check: set REEL_TEST_LLM=1"
    ),
]

FORCE_ECHO = {
    # chatml-function-calling forces a named tool with a grammar; it fails on "required"
    "llama-cpp-python": "echo",
    # llama-server reads a named tool_choice as "auto"; "required" with echo alone forces it
    "llama-server": "required",
}
CUT_AT = {
    # tokens into the call: its name is out, its arguments are not finished
    "llama-cpp-python": 3,
    "llama-server": 16,
}
ASK = "Call the echo tool with the text ping."
SYSTEM = (
    "You call tools. Example:\nUser: Call the echo tool with the text hi.\n"
    'Assistant: <tool_call>\n{"name": "echo", "arguments": {"text": "hi"}}\n</tool_call>'
)


@pytest.fixture
def node_for(data_dir: Path) -> Iterator[Any]:
    nodes: list[HttpNode] = []

    def start(server: Server, **provider: Any) -> HttpNode:
        base = NodeConfig()
        names = build_catalog(base.tools_config(data_dir)).names()
        config = NodeConfig(
            http=HttpConfig(port=0, max_body_bytes=MAX_BODY),
            runs=RunsConfig(max_turns=4, system_prompt=SYSTEM),
            tools=ToolsSection(postures={n: "disabled" for n in names if n != "echo"}),
            provider=ProviderConfig(
                kind="openai",
                base_url=server.base_url,
                model="smollm2",
                timeout_s=120,
                max_retries=0,
                temperature=0.0,
                tool_choice=FORCE_ECHO[server.name],
                **provider,
            ),
        )
        runtime = open_runtime(data_dir, config=config)
        http = start_http(runtime, keepalive_s=1.0)
        token = (data_dir / "admin.token").read_text().strip()
        nodes.append(HttpNode(runtime=runtime, server=http, token=token))
        return nodes[-1]

    try:
        yield start
    finally:
        for node in nodes:
            close_node(node)


def test_a_forced_echo_call_is_made_fed_back_and_the_run_ends_done(
    server: Server, node_for: Any
) -> None:
    node = node_for(server, max_tokens=64)

    events = run(node, ASK)

    assert "run.completed" in events, events.get("run.failed")
    proposed = events["tool.proposed"]
    assert proposed and all(p["tool"] == "echo" for p in proposed)
    completed = events["tool.completed"]
    assert [c["ok"] for c in completed] == [True] * len(proposed), completed
    for call, result in zip(proposed, completed, strict=True):
        assert json.loads(result["output"]) == call["arguments"]
    turns = events["run.turn_completed"]
    assert [t["tool_calls"] for t in turns] == [len(proposed), 0], turns
    (done,) = events["run.completed"]
    assert (done["turns"], done["tool_calls"]) == (2, len(proposed))


def test_a_call_cut_off_by_max_tokens_fails_the_run_cleanly(server: Server, node_for: Any) -> None:
    node = node_for(server, max_tokens=CUT_AT[server.name])

    events = run(node, ASK)

    assert "tool.proposed" not in events
    (turn,) = events["run.turn_completed"]
    assert turn["tool_calls"] == 0 and turn["calls"] == []
    (failed,) = events["run.failed"]
    assert failed["reason"] == "provider_error"
    assert "no call" in failed["message"] or "none was made" in failed["message"], failed
