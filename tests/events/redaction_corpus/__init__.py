"""The labelled redaction corpus: secrets of every shape reel must catch (secrets.toml) and
harmless look-alikes it must leave alone (harmless.toml). Figures in docs/redaction.md."""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import NamedTuple

HERE = Path(__file__).parent


class Secret(NamedTuple):
    """A text holding secrets: ``shape`` labels the family, ``values`` must all be gone."""

    shape: str
    text: str
    values: tuple[str, ...]


def _load(name: str) -> list[dict[str, object]]:
    with (HERE / name).open("rb") as f:
        entries: list[dict[str, object]] = next(iter(tomllib.load(f).values()))
    return entries


SECRETS: list[Secret] = [
    Secret(str(e["shape"]), str(e["text"]), tuple(map(str, e["secret"])))  # type: ignore[call-overload]
    for e in _load("secrets.toml")
]
HARMLESS: list[str] = [str(e["text"]) for e in _load("harmless.toml")]

REQUIRED_SHAPES = frozenset(
    {
        # issue 11, finding 2: shapes that were not caught
        "password_prose",
        "private_key_pgp",
        "url_userinfo",
        "stripe_key",
        "secret_key_assignment",
        "aws_secret_key",
        "json_escaped_pair",
        # the shapes caught before, which must stay caught
        "openai_key",
        "anthropic_key",
        "github_token",
        "aws_access_key_id",
        "slack_token",
        "google_api_key",
        "jwt",
        "bearer",
        "basic",
        "cookie",
        "private_key_pem",
        "password_pair",
        # issue 12: reel's own API and admin tokens
        "reel_token",
        # issue 21, finding 2: values inside an encoding
        "json_escaped_newline",
        "unicode_escaped_json",
        # issue 21, finding 5: one of each family outside the corpus before
        "vendor_doppler",
        "cli_mysql_attached",
        "cli_curl_user",
        "cli_password_flag",
        "xml_element",
        "yaml_block_scalar",
        "env_glued_name",
        "private_key_putty",
        "private_key_ssh2",
        "password_mandarin",
        "password_spanish",
        "password_hindi",
        "password_arabic",
        "password_french",
        "password_bengali",
        "password_portuguese",
        "password_russian",
        "password_japanese",
        "password_german",
    }
)
"""Every shape the corpus must hold at least one entry of, each caught in full."""
