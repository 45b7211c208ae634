"""A matrix channel's config, checked when its connector is built, and the bot's login it
names.

The keys only Matrix reads: ``homeserver`` (an http:// or https:// URL), ``user_id``
(``@name:server``), exactly one of ``password_env`` and ``access_token_env`` (the name of an
environment variable that holds the secret: a secret is never in the config, the journal or a
log line) and ``allow_rooms`` (room ids, user ids or ``*``); the webhook's keys are refused
(:func:`transports.config.foreign_keys`).
Each problem is a :class:`~transports.channels.connector.ConnectorError` whose text starts with
the key: the hub reports it as ``config key channels.<name>.<key>: ...``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal, NamedTuple

from actors.channels.config import ChannelConfig
from transports.channels.connector import ConnectorError
from transports.channels.matrix_events import ANY_INVITER, ROOM_ID, USER_ID
from transports.config import foreign_keys


class Login(NamedTuple):
    """How the bot logs in: with a password, or with an access token the operator made."""

    mode: Literal["password", "token"]
    key: str
    """The config key that names the secret's environment variable."""
    secret: str


def login_of(config: ChannelConfig, environ: Mapping[str, str]) -> Login:
    """The login ``config`` names, its secret read from ``environ``, once every matrix key
    was checked (:class:`ConnectorError` naming the first key that is wrong)."""
    if not config.homeserver.startswith(("http://", "https://")):
        raise ConnectorError(
            "homeserver: a matrix channel needs the homeserver's http:// or https:// URL"
        )
    if not USER_ID.fullmatch(config.user_id):
        raise ConnectorError("user_id: a matrix channel needs the bot's user id (@name:server)")
    if bool(config.password_env) == bool(config.access_token_env):
        raise ConnectorError(
            "password_env: a matrix channel needs exactly one of password_env and "
            "access_token_env (the name of an environment variable, never the secret)"
        )
    key = "password_env" if config.password_env else "access_token_env"
    variable = config.password_env or config.access_token_env
    secret = environ.get(variable, "")
    if not secret:
        raise ConnectorError(f"{key}: the environment variable {variable} is not set")
    for entry in config.allow_rooms:
        if entry != ANY_INVITER and not (ROOM_ID.fullmatch(entry) or USER_ID.fullmatch(entry)):
            raise ConnectorError(
                f"allow_rooms: {entry[:64]!r} is neither a room id (!id:server), a user id "
                "(@name:server) nor *"
            )
    if extra := foreign_keys(config):
        raise ConnectorError(f"{extra[0]}: a matrix channel does not take it")
    return Login("password" if config.password_env else "token", key, secret)
