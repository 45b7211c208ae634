"""``[channels.<name>]``: every mistake stops the node with the key's path, before anything
opens; the webhook secret is read from the environment variable the config names."""

from __future__ import annotations

from pathlib import Path

import pytest

from actors.channels.config import ChannelConfig
from tests.transports.channels.kit import SECRET_ENV
from transports.config import ConfigError, NodeConfig, load_config
from transports.runtime import open_runtime


@pytest.mark.parametrize(
    ("toml", "key"),
    [
        ('[channels.Hook]\nkind = "webhook"\n', "channels.Hook"),
        ('[channels.http]\nkind = "webhook"\n', "channels.http"),
        ('[channels.hook]\nkind = "webhook"\ndm_policy = "maybe"\n', "channels.hook.dm_policy"),
        (
            '[channels.hook]\nkind = "webhook"\ngroup_policy = "allow"\n',
            "channels.hook.group_policy",
        ),
        ('[channels.hook]\nkind = "webhook"\ngroup_policy = 1\n', "channels.hook.group_policy"),
        ('[channels.hook]\nkind = "webhook"\nallow_frm = []\n', "channels.hook.allow_frm"),
        ('[channels.hook]\nkind = "webhook"\ncoalesce_ms = -5\n', "channels.hook.coalesce_ms"),
        ('[channels.hook]\nkind = "webhook"\npairing_ttl = "2d"\n', "channels.hook"),
        ('[channels.hook]\nkind = "webhook"\nmention_patterns = ["("]\n', "channels.hook"),
    ],
)
def test_a_bad_channel_config_names_the_key(tmp_path: Path, toml: str, key: str) -> None:
    path = tmp_path / "config.toml"
    path.write_text(toml)
    with pytest.raises(ConfigError) as refused:
        load_config(path, environ={})
    assert f"config key {key}" in str(refused.value)


@pytest.mark.parametrize(
    ("channel", "problem"),
    [
        (ChannelConfig(kind="carrier-pigeon"), "channels.hook.kind: unknown kind"),
        (ChannelConfig(kind="webhook"), "channels.hook.secret_env"),
        (ChannelConfig(kind="webhook", secret_env="REEL_TEST_UNSET"), "is not set"),
        (
            ChannelConfig(kind="webhook", secret_env=SECRET_ENV, outbound_url="ftp://x"),
            "channels.hook.outbound_url",
        ),
        (
            ChannelConfig(
                kind="webhook", secret_env=SECRET_ENV, homeserver="https://matrix.example.org"
            ),
            "channels.hook.homeserver: a webhook channel does not take it",
        ),
        (
            ChannelConfig(kind="webhook", secret_env=SECRET_ENV, allow_rooms=("*",)),
            "channels.hook.allow_rooms: a webhook channel does not take it",
        ),
    ],
)
def test_a_connector_that_cannot_work_stops_the_node_before_it_opens(
    data_dir: Path, channel: ChannelConfig, problem: str
) -> None:
    with pytest.raises(ConfigError) as refused:
        open_runtime(data_dir, config=NodeConfig(channels={"hook": channel}))
    assert problem in str(refused.value)
    assert not (data_dir / "journal.db").exists()


def test_the_environment_names_no_channel_keys() -> None:
    from transports.config import env_names

    assert env_names()["channels"] == ()
