"""How the CLI turns outcomes into exit codes: one line on stderr for a failure, never a traceback.

The exit codes of every ``reel`` command (README.md's table says the same, tested)::

    0    done
    1    a negative outcome: the run failed or was cancelled; nothing changed (already decided,
         already ended, nothing to condense); ``journal verify`` / ``replay`` found the journal
         tampered or the views different
    2    a usage error or a command that cannot proceed: bad input (one line naming the option),
         no data dir or token, the node unreachable or refusing the token, the journal refused
         (tampered, held by another process)
    3    denied by policy: the node's Cedar policy does not let the token's principal do this
         (HTTP 403, gRPC PERMISSION_DENIED)
    4    an approval left pending: ``reel chat``'s prompt ended without an answer (end of input,
         a lost terminal); nothing was decided, the approval waits for the console,
         ``reel approvals approve|deny`` or its time-out
    130  interrupted (Ctrl-C)
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from transports.failures import Kind, kind_of

EXIT_OK = 0
EXIT_NEGATIVE = 1
EXIT_UNUSABLE = 2
EXIT_DENIED = 3
EXIT_PENDING = 4
EXIT_INTERRUPTED = 130

EXIT_CODES: dict[int, str] = {
    EXIT_OK: "done",
    EXIT_NEGATIVE: "a negative outcome",
    EXIT_UNUSABLE: "a usage error, or the command cannot proceed",
    EXIT_DENIED: "denied by policy",
    EXIT_PENDING: "an approval left pending",
    EXIT_INTERRUPTED: "interrupted",
}
"""Every exit code and its name (the docs' table is checked against it)."""


EXITS: Final[dict[Kind, int]] = {
    "invalid_argument": EXIT_UNUSABLE,
    "unauthenticated": EXIT_UNUSABLE,
    "permission_denied": EXIT_DENIED,
    "not_found": EXIT_UNUSABLE,
    "method_not_allowed": EXIT_UNUSABLE,
    "conflict": EXIT_NEGATIVE,
    "budget_exceeded": EXIT_NEGATIVE,
    "already_exists": EXIT_NEGATIVE,
    "payload_too_large": EXIT_UNUSABLE,
    "unavailable": EXIT_UNUSABLE,
    "unusable": EXIT_UNUSABLE,
    "internal": EXIT_UNUSABLE,
}
"""Each kind of failure (:mod:`transports.failures`) as an exit code."""

NO_OPTIONS: Final[Mapping[str, str]] = {}


class CliError(Exception):
    """A failure to report as ``reel: error: <message>`` with an exit code (default 2)."""

    def __init__(self, message: str, code: int = EXIT_UNUSABLE) -> None:
        super().__init__(message)
        self.code = code


def refusal(
    kind: Kind, message: str, field: str | None = None, options: Mapping[str, str] = NO_OPTIONS
) -> CliError:
    """The one line for a failure of ``kind``: a field the command takes as an option (or
    argument) is named as the command line names it (``options``: field -> ``--scope``), and a
    negative outcome says that nothing changed."""
    option = options.get(field) if field is not None else None
    if option is not None:
        message = f"{option}: {message.removeprefix(f'{field}: ')}"
    code = EXITS[kind]
    return CliError(f"{message}; nothing changed" if code == EXIT_NEGATIVE else message, code)


def failed(exc: BaseException, options: Mapping[str, str] = NO_OPTIONS) -> CliError | None:
    """The :func:`refusal` for one of reel's own exceptions; None for a bug (kind
    ``internal``) or an exception none of reel's trees holds."""
    kind = kind_of(exc)
    if kind is None or kind == "internal":
        return None
    field = getattr(exc, "field", None) if kind == "invalid_argument" else None
    return refusal(kind, str(exc), field if isinstance(field, str) else None, options)
