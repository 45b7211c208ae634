"""A call's *subject*: what an argument-bound approval grant compares.

A human who approves ``shell.run ["git", "status"]`` for the session may bind the grant to the
call's subject instead of allowing the tool with any arguments: ``git status`` then covers
``git status --short`` but not ``git push``. A subject is a tuple of components and a prefix
matches component by component, never character by character, so ``docs`` covers
``docs/a.md`` but not ``docs2/a.md``, and ``https://example.com`` never covers
``https://example.com.evil.org``.

Argument types that support prefixes implement :class:`Subjected`; the subject is computed from
the *validated* arguments, the same value the runtime executes. Tools without a subject allow
only ``any`` and ``exact`` grants.

``exact`` grants compare :func:`arguments_digest`: SHA-256 of the validated arguments'
canonical JSON (msgspec encodes a Struct's fields in declaration order), so key order and
defaults in the model's JSON cannot make one call look like another.
"""

from __future__ import annotations

import hashlib
import posixpath
from typing import Protocol, runtime_checkable
from urllib.parse import unquote, urlsplit

import msgspec


@runtime_checkable
class Subjected(Protocol):
    """Arguments with a subject a grant can be bound to by prefix."""

    def subject(self) -> tuple[str, ...]:
        """This call's subject."""
        ...

    @classmethod
    def parse_subject(cls, text: str) -> tuple[str, ...]:
        """The components of a prefix a human typed; ValueError says what is wrong."""
        ...

    @classmethod
    def subject_kind(cls) -> str:
        """What the prefix is, for the prompt: ``argv``, ``path``, ``method and URL``."""
        ...


def arguments_digest(args: msgspec.Struct) -> bytes:
    """SHA-256 of the validated arguments' canonical JSON."""
    return hashlib.sha256(msgspec.json.encode(args)).digest()


def prefix_kind(args_type: type[msgspec.Struct]) -> str | None:
    """What a prefix names for this argument type, or None when it has no subject."""
    return args_type.subject_kind() if issubclass(args_type, Subjected) else None


def parse_prefix(args_type: type[msgspec.Struct], text: str) -> tuple[str, ...]:
    """A typed prefix as components; ValueError when the tool has no subject or the text is
    not a valid prefix (empty, unbalanced quotes, not a URL, ...)."""
    if not issubclass(args_type, Subjected):
        raise ValueError("this tool's grants cannot be bound to a prefix (use exact or any)")
    if not text.strip():
        raise ValueError("must not be empty")
    parts = args_type.parse_subject(text)
    if not parts:
        raise ValueError("must name at least one component")
    return parts


def covered(args: msgspec.Struct, prefix: tuple[str, ...]) -> bool:
    """Whether the call's subject starts with ``prefix``, component by component."""
    if not isinstance(args, Subjected):
        return False
    subject = args.subject()
    return len(prefix) <= len(subject) and subject[: len(prefix)] == prefix


def path_subject(path: str) -> tuple[str, ...]:
    """A workspace path as components, normalised the way the file tools resolve it
    (``a/./b/../c`` is ``a/c``). A path that climbs out (``../x``) or is absolute keeps its
    ``..`` / empty first component, so no relative prefix covers it."""
    normal = posixpath.normpath(path)
    if normal == ".":
        return ()
    return tuple(normal.split("/"))


def parse_path_prefix(text: str) -> tuple[str, ...]:
    parts = path_subject(text.strip())
    if parts and parts[0] in ("", ".."):
        raise ValueError("a path prefix must be relative and stay inside the workspace")
    return parts


def url_subject(method: str, url: str) -> tuple[str, ...]:
    """``(METHOD, scheme, host, port, *path segments)``; the query and fragment are not part of
    it. Host is lower-cased; the port is explicit (default 80/443). The path is percent-decoded
    before dot segments are removed, so ``/docs/%2e%2e/admin`` is ``admin``, never under
    ``docs``: a server may decode what the grant did not."""
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    try:
        port = parts.port
    except ValueError:
        return (method.upper(), scheme, "", "?")  # no prefix names a bad port
    host = (parts.hostname or "").lower()
    default = {"http": 80, "https": 443}.get(scheme, 0)
    path = posixpath.normpath("/" + unquote(parts.path or "/"))
    segments = tuple(s for s in path.split("/") if s)
    return (method.upper(), scheme, host, str(port or default), *segments)


def parse_url_prefix(text: str) -> tuple[str, ...]:
    """``[METHOD ]URL``; the method defaults to GET."""
    words = text.split()
    if len(words) == 2:
        method, url = words
    elif len(words) == 1:
        method, url = "GET", words[0]
    else:
        raise ValueError("expected [METHOD] URL, e.g. 'GET https://api.example.com/v1'")
    parsed = urlsplit(url)
    if parsed.scheme.lower() not in ("http", "https") or not parsed.hostname:
        raise ValueError("expected an http:// or https:// URL with a host")
    if parsed.query or parsed.fragment:
        raise ValueError("a URL prefix has no query or fragment")
    try:
        _ = parsed.port
    except ValueError:
        raise ValueError("the URL's port is not a number") from None
    return url_subject(method, url)
