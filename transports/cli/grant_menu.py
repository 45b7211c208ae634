"""The approval prompt both ``reel chat`` modes show: each choice with what it grants.

The sentences are the node's (:mod:`actors.approvals.grants`); this module only assigns the letters
and reads the answer, so the gRPC chat and ``reel chat --local`` ask the same question the same way.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, TypeVar

KEYS: dict[tuple[str, str], str] = {
    ("once", "any"): "o",
    ("session", "exact"): "e",
    ("session", "prefix"): "p",
    ("session", "any"): "s",
    ("always", "any"): "a",
}
"""The letter for each (scope, match) choice; ``d`` (or an empty answer) denies."""
CANCEL = "/cancel"
"""The answer that cancels the run instead of deciding (its approval ends with the run)."""


class Option(Protocol):
    @property
    def scope(self) -> str: ...
    @property
    def match(self) -> str: ...
    @property
    def covers(self) -> str: ...


def menu(tool: str, options: Sequence[Option]) -> str:
    """The prompt's text, one line per choice."""
    lines = [f"   allow {tool}?"]
    lines += [f"     [{KEYS[(o.scope, o.match)]}] {o.scope}: {o.covers}" for o in options]
    lines.append("     [d] deny")
    lines.append(f"     {CANCEL}: cancel the run")
    return "\n".join(lines)


def cancels(answer: str) -> bool:
    """The answer asks to cancel the run (:data:`CANCEL`)."""
    return answer.strip().lower() == CANCEL


OptionT = TypeVar("OptionT", bound=Option)


def known(options: Sequence[OptionT]) -> list[OptionT]:
    """The options this prompt can offer (a newer node may offer more)."""
    return [o for o in options if (o.scope, o.match) in KEYS]


def pick(answer: str, options: Sequence[OptionT]) -> OptionT | bool | None:
    """The option an answer names; False for a deny; None to ask again."""
    letter = answer.strip().lower()[:1]
    if letter in ("", "d"):
        return False
    for option in options:
        if KEYS[(option.scope, option.match)] == letter:
            return option
    return None
