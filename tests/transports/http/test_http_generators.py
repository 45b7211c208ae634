"""Clients generated from the served ``/v1/openapi.json`` work without hand edits.

The document is taken from a real node and handed to the tools people generate clients with:
swagger-parser validates it, openapi-typescript's types compile under ``tsc --strict`` with a
client written against them, openapi-python-client generates every operation (no warning, no
dropped response) and its package imports, datamodel-codegen names every class, and the
generated Python client starts a run, approves its call and waits for its end on the node.

The tools are pinned in ``tests/transports/http/generators/`` and installed by
``make .cache/openapi-tools/.installed`` (``make pytest`` does it first). Without them these
tests fail, never skip. Each tool runs once per test session on one document.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.transports.http.httpkit import HttpNode, close_node, open_node

REPO = Path(__file__).resolve().parents[3]
GENERATORS = Path(__file__).with_name("generators")
TOOLS = REPO / ".cache" / "openapi-tools"
BIN = TOOLS / "node_modules" / ".bin"
VENV = TOOLS / "venv" / "bin"
TIMEOUT_S = 300


@dataclass(frozen=True)
class Served:
    node: HttpNode
    path: Path
    """The document the node served, as a file."""
    doc: dict[str, Any]
    work: Path


def run(*argv: str | Path, cwd: Path, env: dict[str, str] | None = None) -> str:
    """Run a tool; its output (stdout and stderr), or a failure showing it."""
    done = subprocess.run(
        [str(arg) for arg in argv],
        cwd=cwd,
        env={**os.environ, "PATH": f"{VENV}:{os.environ['PATH']}", **(env or {})},
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        check=False,
    )
    output = done.stdout + done.stderr
    assert done.returncode == 0, f"{argv[0]} exited {done.returncode}:\n{output[-6000:]}"
    return output


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    if not (TOOLS / ".installed").exists():
        pytest.fail(f"the OpenAPI generators are not installed: run make {TOOLS}/.installed")
    data = tmp_path_factory.mktemp("data")
    data.chmod(0o700)
    node = open_node(data)
    try:
        reply = node.call("GET", "/v1/openapi.json")
        assert reply.status == 200
        work = tmp_path_factory.mktemp("generated")
        path = work / "openapi.json"
        path.write_bytes(reply.body)
        yield Served(node=node, path=path, doc=reply.json(), work=work)
    finally:
        close_node(node)


@pytest.fixture(scope="module")
def python_client(served: Served) -> tuple[Path, str]:
    """The package openapi-python-client generated (``reel_client``), and what it said."""
    out = served.work / "python"
    out.mkdir()
    said = run(
        VENV / "openapi-python-client",
        "generate",
        "--path",
        served.path,
        "--output-path",
        out / "reel_client",
        "--meta",
        "none",
        cwd=out,
    )
    return out, said


def operations(doc: dict[str, Any]) -> list[dict[str, Any]]:
    return [op for item in doc["paths"].values() for op in item.values()]


def snake(name: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


def test_swagger_parser_validates_the_served_document(served: Served) -> None:
    said = run(
        "node",
        GENERATORS / "validate.cjs",
        served.path,
        cwd=TOOLS,
        env={"NODE_PATH": str(TOOLS / "node_modules")},
    )
    assert said.strip() == "valid", said


def test_openapi_typescript_types_compile_with_a_client_of_them(served: Served) -> None:
    out = served.work / "typescript"
    out.mkdir()
    run(
        BIN / "openapi-typescript",
        served.path,
        "--output",
        out / "schema.d.ts",
        "--default-non-nullable",
        "false",
        cwd=out,
    )
    types = (out / "schema.d.ts").read_text()
    for op in operations(served.doc):
        assert f"    {op['operationId']}: {{" in types, op["operationId"]
    shutil.copy(GENERATORS / "usage.ts", out / "usage.ts")
    run(
        BIN / "tsc",
        "--noEmit",
        "--strict",
        "--target",
        "es2022",
        "--module",
        "nodenext",
        "--moduleResolution",
        "nodenext",
        "usage.ts",
        cwd=out,
    )


def test_openapi_python_client_generates_every_operation(
    served: Served, python_client: tuple[Path, str]
) -> None:
    out, said = python_client
    assert "Warning" not in said and "WARNING" not in said, said
    package = out / "reel_client"
    for op in operations(served.doc):
        module = package / "api" / op["tags"][0] / f"{snake(op['operationId'])}.py"
        assert module.exists(), module
    # the 202 that starts a run is parsed, not dropped (two schemas were both titled RunStarted)
    send = (package / "api" / "sessions" / "send_message.py").read_text()
    assert "if response.status_code == 202:\n        response_202 = RunStarted.from_dict" in send
    # every module of the package imports
    said = run(
        VENV / "python",
        "-c",
        "import importlib, pkgutil, reel_client\n"
        "names = [m.name for m in pkgutil.walk_packages(reel_client.__path__, 'reel_client.')]\n"
        "for name in names: importlib.import_module(name)\n"
        "print(len(names))",
        cwd=out,
    )
    assert int(said.split()[-1]) > len(operations(served.doc))


def test_datamodel_codegen_names_every_class(served: Served) -> None:
    out = served.work / "models.py"
    said = run(
        VENV / "datamodel-codegen",
        "--input",
        served.path,
        "--input-file-type",
        "openapi",
        "--output-model-type",
        "pydantic_v2.BaseModel",
        "--formatters",
        "ruff-format",
        "--output",
        out,
        cwd=served.work,
    )
    assert "numbered" not in said, said
    classes = re.findall(r"^class (\w+)\(", out.read_text(), re.MULTILINE)
    assert len(classes) >= len(served.doc["components"]["schemas"])
    assert [name for name in classes if re.search(r"\d$", name)] == []
    run(VENV / "python", "-c", "import models", cwd=served.work)


def test_the_generated_python_client_approves_a_call(
    served: Served, python_client: tuple[Path, str]
) -> None:
    """Start a run whose tool call waits for a human, approve it and wait for the end, all
    through the generated client; the node's own record agrees."""
    out, _ = python_client
    node = served.node
    said = run(
        VENV / "python",
        GENERATORS / "drive_client.py",
        node.server.url,
        node.token,
        cwd=out,
        env={"PYTHONPATH": str(out)},
    )
    seen = json.loads(said.strip().splitlines()[-1])
    assert seen["state"] == "done"
    assert (seen["tool"], seen["decision"], seen["missing"]) == ("shell.run", "allow", "not_found")
    admin = node.call("GET", "/v1/whoami").json()["principal"]
    assert seen["decided_by"] == admin
    run_record = node.call("GET", f"/v1/runs/{seen['run_id']}").json()
    assert run_record["state"] == "done"
    tape = node.call("GET", f"/v1/runs/{seen['run_id']}/tape").json()["items"]
    outputs = [e["event"] for e in tape if e["kind"] == "tool.completed"]
    assert outputs and "yo" in json.dumps(outputs[0])
