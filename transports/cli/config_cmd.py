"""``reel config show``: the configuration ``reel node`` would run with, and where each value
comes from.

It reads what the node reads at start (``--config``, else ``$REEL_CONFIG``, else
``<data>/config.toml``, then the ``REEL_*`` variables of this environment), never the node: it
works the same with or without a node running, and says what the *next* start takes up, since a
running node reads its config only when it starts (:data:`transports.config.RELOADED_LIVE`).
Values pass through the journal's redaction (:func:`events.redaction.redact.redact_value`), so a
secret pasted into a key is never printed; a config the node would refuse is its one line, exit 2.
"""

from __future__ import annotations

from typing import Any

import msgspec
import typer

from transports.cli.data_dir import resolve
from transports.cli.node_cmd import ConfigOption, chosen_config
from transports.cli.options import DataOption, JsonOption
from transports.config import Setting, effective_settings

app = typer.Typer(help="The node's configuration.", no_args_is_help=True)
_json = msgspec.json.Encoder()


class Shown(msgspec.Struct, frozen=True, kw_only=True):
    """``reel config show --json``."""

    config_file: str | None
    """The file read (None: there is none, the node runs on the embedded defaults)."""
    settings: list[Setting]
    """Every key, its value redacted."""


@app.command("show")
def show_cmd(
    data: DataOption = None, config: ConfigOption = None, json: JsonOption = False
) -> None:
    """Every config key the node would run with, its value and where it comes from (default,
    the config file, or a REEL_* variable); keys marked (restart) take effect only when the
    node starts. Reads the config, not the node; secrets are redacted."""
    from events.redaction.redact import redact_value

    path = chosen_config(resolve(data), config)
    settings = [
        msgspec.structs.replace(s, value=redact_value(s.value)[0]) for s in effective_settings(path)
    ]
    found = path if path.is_file() else None
    if json:
        shown = Shown(config_file=None if found is None else str(found), settings=settings)
        print(_json.encode(shown).decode())
        return
    print(f"# config file: {found}" if found else f"# no {path}: embedded defaults")
    print(
        "# (restart): a running node reads this key only when it starts, so a change takes "
        "effect at its next start (docs/operations.md, 'What a running node reads')"
    )
    for s in settings:
        where = "default" if s.origin is None else s.origin
        print(f"{s.key} = {_value(s.value)}  # {where}{' (restart)' if s.restart else ''}")


def _value(value: Any) -> str:
    return "(unset)" if value is None else _json.encode(value).decode()
