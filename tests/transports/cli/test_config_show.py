"""``reel config show``: every key ``reel node`` would run with, where each value comes from,
which keys a running node takes up only at its next start (and that it really does not take
them up before), no secret printed, and a bad config refused with the node's own line."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.processes import REEL
from tests.transports.cli.nodekit import bare_environment, environment, reel, running_node
from transports.config import env_names

SECRETS = (
    "hunter2pw",
    "sk-proj-abcdefghijklmnopqrstuvwxyz0123456789ABCD",
    "pw12345",
    "XXXXXXXXXXXXXXXXXXXX",
)
CONFIG = f"""
[provider]
base_url = "http://bob:{SECRETS[0]}@llm.internal:8080/v1"
api_key_env = "MY_LLM_KEY"

[runs]
max_turns = 3
system_prompt = "call it with {SECRETS[1]} please"

[channels.ops]
kind = "webhook"
secret_env = "OPS_WEBHOOK_SECRET"
outbound_url = "https://hooks.slack.com/services/T000/B000/{SECRETS[3]}"

[channels."chat.x"]
kind = "matrix"
homeserver = "https://u:{SECRETS[2]}@matrix.example.org"
password_env = "MATRIX_PASSWORD"
"""


def show(data: Path, *args: str, env: dict[str, str] | None = None) -> Any:
    done = reel("config", "show", "--data", str(data), "--json", *args, env=env)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def by_key(shown: Any) -> dict[str, dict[str, Any]]:
    return {s["key"]: s for s in shown["settings"]}


def test_a_fresh_data_dir_shows_every_key_at_its_default(tmp_path: Path) -> None:
    data = tmp_path / "never-made"
    shown = show(data, env=bare_environment(REEL_HTTP_PORT="0"))
    settings = by_key(shown)
    assert shown["config_file"] is None and len(settings) == len(shown["settings"])
    # Exactly the keys the node's --help lists as variables, the channels and budgets (none
    # here: tables by name) and the provider list.
    listed = {
        name.removeprefix("REEL_").lower().replace("_", ".", 1)
        for names in env_names().values()
        for name in names
    }
    # [[providers]] is a list of tables: no variable sets it.
    assert set(settings) - listed == {"channels", "budgets", "providers"}
    assert listed <= set(settings)
    assert settings["http.port"] == {
        "key": "http.port", "value": 0, "source": "env", "origin": "REEL_HTTP_PORT",
        "restart": True,
    }  # fmt: skip
    others = [s for key, s in settings.items() if key != "http.port"]
    assert {(s["source"], s["origin"], s["restart"]) for s in others} == {("default", None, True)}
    assert settings["tools.shell_allowlist"]["value"] == []
    assert not data.exists()  # reading the config makes nothing
    text = reel("config", "show", "--data", str(data), env=bare_environment()).stdout.splitlines()
    assert text[0] == f"# no {data / 'config.toml'}: embedded defaults"
    lines = [line for line in text if not line.startswith("#")]
    assert len(lines) == len(settings)
    assert "tools.shell_allowlist = []  # default (restart)" in lines
    assert "tools.workspace_dir = (unset)  # default (restart)" in lines


def test_each_value_names_its_source_and_no_secret_is_printed(data_dir: Path) -> None:
    (data_dir / "config.toml").write_text(CONFIG)
    env = {"REEL_RUNS_MAX_TURNS": "5", "REEL_TOOLS_SHELL_ALLOWLIST": '["git"]'}
    shown = show(data_dir, env=bare_environment(**env))
    file = str(data_dir / "config.toml")
    assert shown["config_file"] == file
    settings = by_key(shown)

    def where(key: str) -> tuple[Any, str, str | None]:
        return settings[key]["value"], settings[key]["source"], settings[key]["origin"]

    assert where("runs.max_turns") == (5, "env", "REEL_RUNS_MAX_TURNS")  # the variable wins
    assert where("tools.shell_allowlist") == (["git"], "env", "REEL_TOOLS_SHELL_ALLOWLIST")
    assert where("provider.api_key_env") == ("MY_LLM_KEY", "file", file)  # a name, not a secret
    assert where("channels.ops.secret_env") == ("OPS_WEBHOOK_SECRET", "file", file)
    assert where('channels."chat.x".password_env') == ("MATRIX_PASSWORD", "file", file)
    assert where("channels.ops.dm_policy") == ("deny", "default", None)
    assert where("runs.max_tool_calls") == (8, "default", None)
    assert settings["provider.base_url"]["value"] == "http://bob:[REDACTED]@llm.internal:8080/v1"
    text = reel("config", "show", "--data", str(data_dir), env=bare_environment(**env))
    assert text.returncode == 0, text.stderr
    assert "runs.max_turns = 5  # REEL_RUNS_MAX_TURNS (restart)" in text.stdout
    assert f'provider.api_key_env = "MY_LLM_KEY"  # {file} (restart)' in text.stdout
    for secret in SECRETS:
        assert secret not in text.stdout + text.stderr
        assert secret not in json.dumps(shown)
    # --config (and REEL_CONFIG) name another file, as for reel node.
    other = data_dir / "other.toml"
    other.write_text("[runs]\nmax_turns = 2\n")
    assert by_key(show(data_dir, "--config", str(other)))["runs.max_turns"]["origin"] == str(other)
    assert show(data_dir, env=environment(REEL_CONFIG=str(other)))["config_file"] == str(other)


def test_a_bad_config_is_the_nodes_own_line_and_exit_2(data_dir: Path) -> None:
    secret = SECRETS[1]
    cases: list[tuple[str | None, dict[str, str], str]] = [
        ("[runs]\nmax_turnz = 1\n", {}, "config key runs.max_turnz: unknown key"),
        (None, {"REEL_RUNS_MAX_TURNS": "many"}, "REEL_RUNS_MAX_TURNS (config key runs.max_turns)"),
        (None, {"REEL_PROVIDER_KIND": secret}, "config key provider.kind"),
        (f'[journal]\nsynchronous = "{secret}"\n', {}, "config key journal.synchronous"),
        ('[runs\nmax_turns = 1\n', {}, "not valid TOML"),
        (None, {"REEL_CONFIG": str(data_dir / "gone.toml")}, "--config"),
    ]  # fmt: skip
    for text, extra, words in cases:
        config = data_dir / "config.toml"
        if text is None:
            config.unlink(missing_ok=True)
        else:
            config.write_text(text)
        env = environment(**extra)
        shown = reel("config", "show", "--data", str(data_dir), env=env)
        assert shown.returncode == 2 and shown.stdout == "", shown
        (line,) = shown.stderr.splitlines()
        assert line.startswith("reel: error: ") and words in line, line
        assert secret not in line
        node = reel("node", "--data", str(data_dir), env=env)
        assert node.returncode == 2
        assert node.stderr == shown.stderr.replace(
            "'reel config show --help'", "'reel node --help'"
        )


def test_a_running_node_takes_a_change_up_only_at_its_next_start(data_dir: Path) -> None:
    """The docs' claim, tried: the config says one turn per run, the running node still runs
    two, and only the node started after the change fails the run at max_turns."""
    before = reel("config", "show", "--data", str(data_dir))
    echo = ("chat", "--data", str(data_dir), '/tool echo {"text": "hi"}')
    with running_node([str(REEL), "node", "--data", str(data_dir)]):
        assert reel("config", "show", "--data", str(data_dir)).stdout == before.stdout
        (data_dir / "config.toml").write_text("[runs]\nmax_turns = 1\n")
        setting = by_key(show(data_dir))["runs.max_turns"]
        assert (setting["value"], setting["source"], setting["restart"]) == (1, "file", True)
        done = reel(*echo)
        assert done.returncode == 0 and "run done (final_answer; 2 turns" in done.stdout, done
    with running_node([str(REEL), "node", "--data", str(data_dir)]):
        failed = reel(*echo)
        assert failed.returncode == 1 and "max_turns" in failed.stdout, failed
