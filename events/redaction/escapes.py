"""Text as a reader sees it through its escapes, with a map back to the text as written.

A secret can arrive escaped: a JSON document inside a JSON string (``\\"password\\": ...``), a
config file printed as a Python or JSON literal (``host=db\\npassword=...``, where the line break
is the two characters ``\\n``), quotes written as ``\\u0022``. Detectors read the text a reader
would see, so :func:`unescaped` decodes every escape sequence, at any depth of backslashes, into
the one character it stands for, and keeps where each came from: a span found in the view maps
back to the characters to replace in the original.

Recognised: ``\\n \\r \\t \\b \\f \\v \\0 \\" \\' \\/ \\\\``, ``\\u`` with four hex
digits and ``\\x`` with two, each preceded by one or more backslashes. A backslash before
anything else is left as it is.
"""

from __future__ import annotations

import bisect
import re
from typing import NamedTuple

ESCAPE = re.compile(
    # Only from the start of a run of backslashes: a run without an escape letter after it is
    # read once, not once from each of its backslashes (quadratic: 8,000 took 1.7 s).
    r"(?<!\\)\\+(?:u(?P<u>[0-9A-Fa-f]{4})|x(?P<x>[0-9A-Fa-f]{2})|(?P<c>[nrtbfv0\"'/]))"
)
PARTIAL_ESCAPE = re.compile(r"\\+(?:u[0-9A-Fa-f]{0,3}|x[0-9A-Fa-f]?)?\Z")
"""An escape a text ends part-way through (``\\``, ``\\u00``): what it stands for is not known
yet (streaming text may be cut there)."""
_SIMPLE = {"n": "\n", "r": "\r", "t": "\t", "b": "\b", "f": "\f", "v": "\v", "0": "\0"}


class View(NamedTuple):
    """The unescaped text and, for each escape, where it is in the view and in the original."""

    text: str
    at: list[int]
    """View positions of the characters that stand for an escape, ascending."""
    origin: list[int]
    """Original start of each of those escapes."""
    width: list[int]
    """Original length of each escape."""

    def start(self, pos: int) -> int:
        """Where the view character at ``pos`` starts in the original."""
        i = bisect.bisect_right(self.at, pos) - 1
        if i < 0:
            return pos
        if self.at[i] == pos:
            return self.origin[i]
        return self.origin[i] + self.width[i] + (pos - self.at[i] - 1)

    def end(self, pos: int) -> int:
        """Where a view span ending (exclusive) at ``pos`` ends in the original."""
        if pos == 0:
            return 0
        last = pos - 1
        i = bisect.bisect_right(self.at, last) - 1
        if i >= 0 and self.at[i] == last:
            return self.origin[i] + self.width[i]
        return self.start(last) + 1

    def find(self, original: int) -> int:
        """The view position of the first character at or after ``original``."""
        i = bisect.bisect_right(self.origin, original) - 1
        if i < 0:
            return original
        if original < self.origin[i] + self.width[i]:
            return self.at[i] + (original > self.origin[i])
        return self.at[i] + 1 + (original - self.origin[i] - self.width[i])


def unescaped(text: str) -> View | None:
    """The view of ``text`` with its escapes decoded, or None when it has none."""
    if "\\" not in text:
        return None
    parts: list[str] = []
    at: list[int] = []
    origin: list[int] = []
    width: list[int] = []
    last = 0
    size = 0
    for match in ESCAPE.finditer(text):
        s, e = match.span()
        parts.append(text[last:s])
        size += s - last
        kind = match.lastgroup  # one group call per escape: a JSON text holds thousands
        code = match.group(kind or "c")
        parts.append(_SIMPLE.get(code, code) if kind == "c" else chr(int(code, 16)))
        at.append(size)
        origin.append(s)
        width.append(e - s)
        size += 1
        last = e
    if not at:
        return None
    parts.append(text[last:])
    return View("".join(parts), at, origin, width)
