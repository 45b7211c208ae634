"""``[mcp.servers.NAME]``: bad config is one error naming the key, before anything starts."""

from __future__ import annotations

from pathlib import Path

import pytest

from transports.config import ConfigError, load_config


@pytest.mark.parametrize(
    ("body", "problem"),
    [
        ('command = "a"\nurl = "http://h/mcp"', "set exactly one of `command`"),
        ("args = []", "set exactly one of `command`"),
        ('url = "http://h/mcp"\nnetwork = true', "are for stdio servers"),
        ('url = "http://h/mcp"\nhttp_egress = true', "are for stdio servers"),
        ('command = "a"\nnetwork = true\nhttp_egress = true', "at most one of `network`"),
        ('command = "a"\nbogus = 1', "mcp.servers[...].bogus: unknown key"),
        ('command = "a"\nstart_timeout_s = 0', "start_timeout_s"),
        ('command = "a"\n[mcp.servers.x.tools."a.b"]', "in `$.mcp.servers[...].tools`"),
        ('command = "a"\n[mcp.servers.x.tools.t]\nposture = "sometimes"', "posture"),
    ],
)
def test_a_bad_server_is_a_config_error_naming_the_key(
    tmp_path: Path, body: str, problem: str
) -> None:
    path = tmp_path / "config.toml"
    path.write_text(f"[mcp.servers.x]\n{body}\n")
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    assert problem in str(caught.value)


def test_a_server_name_that_cannot_be_a_tool_name_segment_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "config.toml"
    path.write_text('[mcp.servers."a.b"]\ncommand = "a"\n')
    with pytest.raises(ConfigError, match=r"in `\$\.mcp\.servers`"):
        load_config(path)


def test_env_takes_vault_handles_and_refuses_anything_else(tmp_path: Path) -> None:
    from tools.handles import VaultHandle

    path = tmp_path / "config.toml"
    path.write_text(
        '[mcp.servers.x]\ncommand = "a"\n'
        'env = { TOKEN = { vault = "api_key" }, AUTH = "Bearer ${vault:api_key}", N = "1" }\n'
        "[mcp.servers.x.tools.t]\nread_only = true\n"
    )
    server = load_config(path).mcp.servers["x"]
    assert server.env == {
        "TOKEN": VaultHandle("api_key"),
        "AUTH": "Bearer ${vault:api_key}",
        "N": "1",
    }
    assert server.tools["t"].read_only is True
    path.write_text('[mcp.servers.x]\ncommand = "a"\nenv = { TOKEN = { vaul = "api_key" } }\n')
    with pytest.raises(ConfigError, match="env"):
        load_config(path)
