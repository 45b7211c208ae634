"""Options shared by several commands."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

DataOption = Annotated[
    Path | None,
    typer.Option(
        "--data",
        help="Data dir (default: $REEL_DATA, else $XDG_DATA_HOME/reel).",
        show_default=False,
    ),
]
JsonOption = Annotated[bool, typer.Option("--json", help="Machine-readable JSON output.")]
TokenFileOption = Annotated[
    Path | None,
    typer.Option(
        "--token-file",
        help="While a node runs: the token to ask its API with (default REEL_TOKEN, "
        "else the data dir's admin.token).",
    ),
]
