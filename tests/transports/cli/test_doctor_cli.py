"""``reel doctor`` finds what is wrong and says how to fix it: each check made to fail for real
(modes, an unknown config key, a taken port, a witness nowhere or beside the data dir, a clock
behind the journal) and passing on a healthy data dir and a running node; it changes nothing."""

from __future__ import annotations

import json
import socket
from pathlib import Path
from typing import Any

import pytest
from click.testing import Result
from typer.testing import CliRunner

from events import JournalReader
from tests.transports.http.httpkit import close_node, open_node
from transports.cli import doctor_cmd
from transports.cli.main import app


@pytest.fixture(autouse=True)
def free_ports(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("REEL_HTTP_PORT", "0")
    monkeypatch.setenv("REEL_GRPC_PORT", "0")
    monkeypatch.delenv("REEL_JOURNAL_WITNESS", raising=False)


def doctor(data: Path) -> tuple[Result, list[dict[str, Any]]]:
    result = CliRunner().invoke(app, ["doctor", "--json", "--data", str(data)])
    return result, json.loads(result.output)


def levels(findings: list[dict[str, Any]], check: str) -> list[str]:
    return [f["level"] for f in findings if f["check"] == check]


def test_a_fresh_data_dir_is_healthy_but_for_the_witness(data_dir: Path) -> None:
    result, findings = doctor(data_dir)
    assert result.exit_code == 0, result.output
    assert not [f for f in findings if f["level"] == "fail"]
    (witness,) = [f for f in findings if f["check"] == "witness"]
    assert witness["level"] == "warn" and "[journal] witness" in witness["fix"]
    assert levels(findings, "data dir") == ["ok"] and levels(findings, "disk") == ["ok"]
    text = CliRunner().invoke(app, ["doctor", "--data", str(data_dir)]).output
    assert "warn  witness   none: " in text and "fix: set [journal] witness" in text


def test_modes_open_to_others_are_named_and_left_alone(data_dir: Path) -> None:
    data_dir.chmod(0o755)
    token = data_dir / "admin.token"
    token.write_text("x")
    token.chmod(0o644)
    _, findings = doctor(data_dir)
    (found,) = [f for f in findings if f["check"] == "data dir"]
    assert found["level"] == "warn"
    assert f"{data_dir} (drwxr-xr-x)" in found["message"]
    assert "admin.token (-rw-r--r--)" in found["message"]
    assert data_dir.stat().st_mode & 0o777 == 0o755 and token.stat().st_mode & 0o777 == 0o644


def test_an_unknown_config_key_fails_naming_it(data_dir: Path) -> None:
    (data_dir / "config.toml").write_text("[runs]\nmax_turnz = 3\n")
    result, findings = doctor(data_dir)
    assert result.exit_code == 1
    (found,) = [f for f in findings if f["check"] == "config"]
    assert found["level"] == "fail" and "max_turnz" in found["message"]


def test_a_taken_port_fails(data_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        monkeypatch.setenv("REEL_HTTP_PORT", str(port))
        result, findings = doctor(data_dir)
    assert result.exit_code == 1
    (found,) = [f for f in findings if f["check"] == "ports"]
    assert found["level"] == "fail" and f"127.0.0.1:{port}: in use" in found["message"]
    assert "REEL_HTTP_PORT" in found["fix"]


def test_a_witness_nowhere_fails_and_one_beside_the_data_dir_warns(
    data_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("REEL_JOURNAL_WITNESS", str(tmp_path / "missing" / "witness"))
    result, findings = doctor(data_dir)
    assert result.exit_code == 1 and levels(findings, "witness") == ["fail"]
    monkeypatch.setenv("REEL_JOURNAL_WITNESS", str(tmp_path / "witness"))
    result, findings = doctor(data_dir)
    assert result.exit_code == 0
    (found,) = [f for f in findings if f["check"] == "witness"]
    assert found["level"] == "warn" and "data dir's volume" in found["message"]


def test_a_clock_behind_the_journal_fails_and_a_running_node_answers(
    data_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    node = open_node(data_dir)
    try:
        node.finish(node.start("hello"))
        monkeypatch.setenv("REEL_HTTP_PORT", str(node.server.port))
        result, findings = doctor(data_dir)
        assert result.exit_code == 0, result.output
        (running,) = [f for f in findings if f["check"] == "node"]
        assert running == {
            "check": "node",
            "level": "ok",
            "message": "running; this token is admin",
            "fix": "",
        }
    finally:
        close_node(node)
    reader = JournalReader.open(data_dir / "journal.db")
    try:
        last_ms = reader.read(reader.head().position - 1, 1)[0].recorded_at_ms
    finally:
        reader.close()
    monkeypatch.setattr(doctor_cmd, "_now", lambda: last_ms / 1000 - 30)
    result, findings = doctor(data_dir)
    assert result.exit_code == 1
    (clock,) = [f for f in findings if f["check"] == "clock"]
    assert clock["level"] == "fail" and "30.0 s behind" in clock["message"]
    monkeypatch.setattr(doctor_cmd, "_now", lambda: last_ms / 1000 + 5)
    assert levels(doctor(data_dir)[1], "clock") == ["ok"]
