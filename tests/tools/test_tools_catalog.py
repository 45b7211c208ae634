from __future__ import annotations

from pathlib import Path

import msgspec
import pytest

import tools
from tools import (
    ExecutionContext,
    InvalidArguments,
    ToolsConfig,
    UnknownTool,
    build_catalog,
    decode_config,
)
from tools.plugins import EXAMPLES_DIR


@pytest.fixture
def catalog() -> tools.ToolCatalog:
    return build_catalog(ToolsConfig())


def test_public_all_is_complete() -> None:
    public = {n for n in dir(tools) if not n.startswith("_")}
    submodules = {
        "build",
        "builtins",
        "catalog",
        "checkpoints",
        "config",
        "context",
        "egress",
        "errors",
        "files",
        "handles",
        "http_fetch",
        "mcp",
        "memory_tools",
        "patch",
        "plugins",
        "result",
        "runtime",
        "sandbox",
        "sandbox_user",
        "search",
        "seccomp",
        "shell",
        "spec",
        "subjects",
        "wasm",
        "workspace",
        "wrappers",
        "write_bound",
    }
    assert set(tools.__all__) == public - submodules


def test_default_catalog_lists_the_builtin_tools(catalog: tools.ToolCatalog) -> None:
    assert catalog.names() == [
        "echo",
        "fs.apply_patch",
        "fs.diff",
        "fs.list",
        "fs.read",
        "fs.search",
        "fs.write",
        "http.fetch",
        "memory.search",
        "memory.write",
        "shell.run",
        "sleep",
        "time.now",
    ]


def test_declared_risk_posture_and_capabilities(catalog: tools.ToolCatalog) -> None:
    declared = {
        s.name: (s.risk, s.default_posture, sorted(s.capabilities)) for s in catalog.specs()
    }
    assert declared["echo"] == ("low", "always_allow", [])
    assert declared["fs.read"] == ("medium", "always_allow", ["fs.read"])
    assert declared["fs.write"] == ("high", "ask_each_time", ["fs.write"])
    assert declared["fs.search"] == ("medium", "always_allow", ["fs.read"])
    assert declared["fs.diff"] == ("medium", "always_allow", ["fs.read"])
    assert declared["fs.apply_patch"] == ("high", "ask_each_time", ["fs.write"])
    assert declared["http.fetch"] == ("high", "ask_each_time", ["net.egress"])
    assert declared["shell.run"] == ("critical", "ask_each_time", ["process.exec"])
    assert declared["memory.search"] == ("low", "always_allow", [])
    assert declared["memory.write"] == ("medium", "ask_each_time", ["memory.write"])


def test_plugins_join_the_catalog() -> None:
    catalog = build_catalog(ToolsConfig(plugin_dir=str(EXAMPLES_DIR)))
    assert "example.json_echo" in catalog
    assert catalog.spec("example.json_echo").runtime == "wasm"


def test_unknown_tool(catalog: tools.ToolCatalog) -> None:
    with pytest.raises(UnknownTool, match="'nope'"):
        catalog.validate("nope", "{}")
    with pytest.raises(UnknownTool):
        catalog.spec("nope")


@pytest.mark.parametrize(
    ("name", "arguments", "fragment"),
    [
        ("sleep", '{"seconds": "x"}', "Expected `float`, got `str` - at `$.seconds`"),
        ("echo", "{}", "Object missing required field `text`"),
        ("echo", '{"text": "a", "extra": 1}', "unknown field `extra`"),
        ("shell.run", {"argv": []}, "length >= 1 - at `$.argv`"),
        ("shell.run", {"argv": ["ls", 3]}, "Expected `str`, got `int` - at `$.argv[1]`"),
        ("http.fetch", {"url": "http://x", "method": "PUT"}, "at `$.method`"),
        ("fs.read", {"path": "a", "max_bytes": 0}, "at `$.max_bytes`"),
        ("echo", "[1]", "Expected `object`, got `array`"),
        ("echo", "{not json", "malformed JSON"),
    ],
)
def test_validation_errors_name_the_field(
    catalog: tools.ToolCatalog, name: str, arguments: str | dict[str, object], fragment: str
) -> None:
    with pytest.raises(InvalidArguments) as info:
        catalog.validate(name, arguments)
    assert fragment in str(info.value)
    assert info.value.tool == name


def test_validate_accepts_text_bytes_and_mappings(catalog: tools.ToolCatalog) -> None:
    a = catalog.validate("echo", '{"text": "x"}')
    assert a == catalog.validate("echo", b'{"text": "x"}')
    assert a == catalog.validate("echo", {"text": "x"})


def test_execute_refuses_unvalidated_arguments(catalog: tools.ToolCatalog, workspace: Path) -> None:
    with pytest.raises(TypeError, match="validate"):
        catalog.execute(
            "echo", catalog.validate("sleep", {"seconds": 0}), ExecutionContext.start(workspace, 5)
        )


def test_output_over_the_spec_cap_is_truncated_and_marked(workspace: Path) -> None:
    catalog = build_catalog(ToolsConfig(default_output_cap_bytes=64))
    result = catalog.execute(
        "echo", catalog.validate("echo", {"text": "é" * 100}), ExecutionContext.start(workspace, 5)
    )
    assert result.ok and result.truncated
    assert len(result.output.encode()) <= 64
    assert "\ufffd" not in result.output  # the cut does not split a character


def test_schema_is_inlined_json_schema(catalog: tools.ToolCatalog) -> None:
    schema = catalog.spec("shell.run").json_schema()
    assert schema["required"] == ["argv"]
    assert schema["properties"]["argv"]["type"] == "array"
    assert msgspec.json.decode(msgspec.json.encode(schema)) == schema


def test_config_errors_name_the_key() -> None:
    with pytest.raises(msgspec.ValidationError, match="unknown field `shell_allow`"):
        decode_config('{"shell_allow": ["ls"]}')
    with pytest.raises(msgspec.ValidationError, match=r"\$\.sleep_cap_s"):
        decode_config('{"sleep_cap_s": 0}')


def test_defaults_deny() -> None:
    config = ToolsConfig()
    assert config.shell_allowlist == ()
    assert config.http_allowlist == ()
    assert config.http_allow_private == ()
    assert config.plugin_dir is None


@pytest.mark.parametrize(
    ("name", "arguments", "expected"),
    [
        ("fs.read", '{"path": "a.txt"}', True),
        ("fs.list", '{"path": "."}', True),
        ("fs.search", '{"pattern": "x"}', True),
        ("memory.search", '{"query": "x"}', True),
        ("http.fetch", '{"url": "https://example.com/"}', True),
        ("http.fetch", '{"url": "https://example.com/", "method": "GET"}', True),
        ("http.fetch", '{"url": "https://example.com/", "method": "POST"}', False),
        ("fs.write", '{"path": "a.txt", "content": "x"}', False),
        ("fs.apply_patch", '{"patch": "x"}', False),
        ("memory.write", '{"text": "x"}', False),
        ("echo", '{"text": "x"}', False),
        ("fs.read", '{"path": 3}', False),  # arguments that do not validate run alone
        ("no.such.tool", "{}", False),
    ],
)
def test_read_only_is_a_field_of_the_catalog_entry(
    catalog: tools.ToolCatalog, name: str, arguments: str, expected: bool
) -> None:
    if name == "fs.search" and catalog.spec(name).unavailable:
        pytest.skip("no ripgrep")
    assert catalog.reads_only(name, arguments) is expected
