"""What kind of failure each exception is: the one table every edge reads.

Each package draws its exception tree in its ``__init__`` (events, actors, tools, policies,
projections, transports). :data:`KINDS` gives every class of those trees one :data:`Kind`; an
edge keeps only its own ``Kind -> answer`` table, as httpx keeps one mapping of transport
errors: HTTP a status and code (:data:`transports.http.failures.STATUS`), gRPC a status
(:data:`transports.grpc.status.STATUS`), the CLI an exit code (:data:`transports.cli.errors.
EXIT`), a chat channel an outcome (:data:`transports.channels.commands.OUTCOME`). A test walks
every exception class of every tree and proves each has a kind, and each kind an answer on every
edge (tests/transports/test_failures.py).

The table is keyed by the classes' dotted names and looked up along the exception's MRO, so a
subclass takes its nearest listed ancestor's kind, and reading it imports nothing: the CLI
consults it for whatever a command raised without loading the node's packages (an exception's
own module is loaded by the time it is raised). The test holds every name to a class.

Classes whose name starts with ``_`` are private control flow and never leave their module;
:class:`transports.http.failures.ApiError` and :class:`transports.cli.errors.CliError` are an
edge's answer already (they carry their status or exit code), not failures to classify.
"""

from __future__ import annotations

from typing import Final, Literal, NamedTuple, get_args

from events.errors import AppendRejected, JournalClosed, JournalUnavailable

Kind = Literal[
    "invalid_argument",
    "unauthenticated",
    "permission_denied",
    "not_found",
    "method_not_allowed",
    "conflict",
    "budget_exceeded",
    "already_exists",
    "payload_too_large",
    "unavailable",
    "unusable",
    "internal",
]
"""What went wrong, in words every edge can answer:

- ``invalid_argument``: the input is bad (names the field when it can);
- ``unauthenticated``, ``permission_denied``: no valid token; Cedar did not permit it;
- ``not_found``: what the request names does not exist;
- ``method_not_allowed``, ``payload_too_large``: the request's shape (HTTP's own);
- ``conflict``: the current state refuses a valid command (nothing changed);
- ``budget_exceeded``: a hard usage budget refuses the run (docs/usage.md; the refusal is on
  the journal, nothing else changed);
- ``already_exists``: what it would create exists (a session key taken);
- ``unavailable``: not now (draining, the journal unavailable, a vendor or homeserver down);
- ``unusable``: the node's own files or settings cannot be used (a tampered journal, a bad key,
  witness, policy, config or plugin, a port taken): the operator fixes them; an API caller
  hears only "internal error";
- ``internal``: a bug.
"""

ALL_KINDS: Final[tuple[Kind, ...]] = get_args(Kind)

KINDS: Final[dict[str, Kind]] = {
    # events
    "events.errors.JournalError": "unusable",
    "events.errors.JournalUnavailable": "unavailable",
    "events.errors.JournalClosed": "unavailable",
    "events.errors.Fenced": "unavailable",
    "events.errors.ShardNotOwned": "unavailable",
    "events.errors.ShardsFixed": "invalid_argument",
    "events.errors.AppendRejected": "invalid_argument",
    "events.note.NoteError": "unusable",
    "events.redaction.vendor_rules.RulesError": "unusable",
    # actors
    "actors.errors.ActorsError": "internal",
    "transports.cluster.errors.ClusterError": "unavailable",
    "transports.cluster.errors.ClusterStartError": "unusable",
    "transports.cluster.errors.ForwardRefused": "permission_denied",
    "actors.errors.InvalidCommand": "invalid_argument",
    "actors.errors.NotFound": "not_found",
    "actors.errors.Conflict": "conflict",
    "actors.errors.SessionKeyTaken": "already_exists",
    "actors.errors.NodeDraining": "unavailable",
    "actors.errors.BudgetExceeded": "budget_exceeded",
    "actors.provider.ProviderError": "unavailable",
    "actors.learning.desk.UnknownRunToReflect": "not_found",
    "actors.learning.rules.InvalidReflection": "internal",
    "actors.tasks.handlers.TaskInterrupted": "internal",
    "actors.tasks.handlers.PermanentFailure": "internal",
    "actors.channels.message.InvalidMessage": "invalid_argument",
    "actors.memory.items.MemoryInputError": "invalid_argument",
    "actors.memory.items.UnknownMemoryItem": "not_found",
    "actors.memory.items.MemoryItemAlreadyDeleted": "conflict",
    "actors.vault.decide.VaultError": "invalid_argument",
    "actors.vault.decide.SecretExists": "already_exists",
    "actors.vault.decide.UnknownSecret": "not_found",
    "actors.vault.store.VaultKeyError": "unusable",
    "actors.schedules.decide.ScheduleError": "conflict",
    "actors.schedules.decide.InvalidSchedule": "invalid_argument",
    "actors.schedules.decide.ScheduleExists": "already_exists",
    "actors.schedules.decide.UnknownSchedule": "not_found",
    "actors.schedules.times.InvalidSpec": "invalid_argument",
    "actors.schedules.desk.ScheduleRefused": "permission_denied",
    # tools
    "tools.errors.ToolsError": "internal",
    "tools.errors.UnknownTool": "not_found",
    "tools.errors.InvalidArguments": "invalid_argument",
    "tools.errors.PluginError": "unusable",
    "tools.plugins.schema.SchemaError": "unusable",
    "tools.result.ToolFault": "internal",
    "tools.handles.MissingSecret": "not_found",
    # policies
    "policies.errors.PolicyError": "unusable",
    "policies.errors.PolicyRequestError": "invalid_argument",
    # projections
    "projections.memory.embedders.EmbedderUnavailable": "unusable",
    # transports
    "transports.access.authority.AccessError": "internal",
    "transports.access.authority.PermissionDenied": "permission_denied",
    "transports.access.authority.ResourceNotFound": "not_found",
    "transports.access.tokens.TokenError": "invalid_argument",
    "transports.access.tokens.UnknownToken": "not_found",
    "transports.access.tokens.TokenAlreadyRevoked": "conflict",
    "transports.config.ConfigError": "unusable",
    "transports.channels.configured.UnknownChannel": "not_found",
    "transports.channels.commands.CommandSyntaxError": "invalid_argument",
    "transports.channels.connector.ConnectorError": "unavailable",
    "transports.channels.matrix_answers.Refused": "unusable",
    "transports.channels.matrix_answers.Unavailable": "unavailable",
    "transports.channels.matrix_answers.CursorRefused": "internal",
    "transports.channels.matrix_answers.RateLimited": "unavailable",
    "transports.grpc.errors.GrpcTransportError": "unusable",
    "transports.grpc.errors.GrpcClientError": "unavailable",
    "transports.grpc.wire.MalformedMessage": "invalid_argument",
    "transports.http.server.HttpStartError": "unusable",
    "transports.models.sse.SSEError": "unavailable",
    "transports.cli.grpc_chat.ChatUsageError": "invalid_argument",
    "transports.cli.node_start.OptionRefused": "invalid_argument",
}
"""Every exception class of every tree (by dotted name) -> its kind; subclasses inherit."""

ANSWERS: Final[frozenset[str]] = frozenset(
    {"transports.http.failures.ApiError", "transports.cli.errors.CliError"}
)
"""Exceptions that are an edge's answer already, never classified."""

HIDDEN: Final[frozenset[Kind]] = frozenset({"unusable", "internal"})
"""Kinds an API caller hears only as "internal error" (the node's log has the rest)."""


class Failure(NamedTuple):
    """A failure as an API edge reports it."""

    kind: Kind
    message: str
    """Safe to show the caller (reel's messages never quote a secret)."""
    field: str | None = None
    """The request field at fault (``decision``, ``roles``), for ``invalid_argument``."""


def kind_of(exc: BaseException) -> Kind | None:
    """The kind of ``exc`` (its nearest listed class's), or None for an exception none of
    reel's trees holds (a bug, or a library's own error an edge translates itself)."""
    return kind_of_class(type(exc))


def kind_of_class(cls: type[BaseException]) -> Kind | None:
    """The kind of an exception class (see :func:`kind_of`)."""
    for klass in cls.__mro__:
        kind = KINDS.get(f"{klass.__module__}.{klass.__qualname__}")
        if kind is not None:
            return kind
    return None


def public(exc: BaseException) -> Failure:
    """``exc`` as an API caller hears it: its kind, a message and the field it names.

    ``unusable`` and ``internal`` (and anything unclassified) say only "internal error"; the
    journal's own refusals say so without their details."""
    kind = kind_of(exc) or "internal"
    if kind in HIDDEN:
        return Failure(kind, "internal error")
    if isinstance(exc, JournalUnavailable | JournalClosed):
        return Failure(kind, "the journal is not available")
    if isinstance(exc, AppendRejected):  # its field is the event's, not the request's
        return Failure(kind, f"the journal refused the input: {exc}")
    field = getattr(exc, "field", None) if kind == "invalid_argument" else None
    if not isinstance(field, str):
        return Failure(kind, str(exc))
    field = field.removeprefix("context.")  # a Cedar context key is the request's own field
    return Failure(kind, str(exc), _REQUEST_FIELDS.get(field, field))


_REQUEST_FIELDS: Final[dict[str, str]] = {"role": "roles"}
"""Fields the API's bodies name otherwise: a token's roles are the list ``roles``."""
