"""The memory tools: ``memory.search`` and ``memory.write``, over a port the node injects.

Nothing here knows where memory lives: the node hands :func:`tools.build.build_catalog` a
:class:`MemoryStore` (transports' ``NodeMemory``: the memory view to search, the journal to
record a write on). Each call acts for the run that made it, as
:class:`~tools.context.ExecutionContext` says: a search sees what that run's principal may see
in that session (global items, the principal's own, the session's); a write is recorded as
that principal, and an item of scope ``session`` belongs to the run's own session.

``memory.search`` only reads: low risk, allowed without asking. ``memory.write`` declares the
capability ``memory.write`` (sensitive, like ``fs.write``: an item written once is shown to
later runs, of every principal when it is global, so it can steer them long after the run that
wrote it), and asks a human each time by default.

Bad input the store refuses (oversized text, too many tags, an expiry in the past) is a failed
call of kind ``invalid`` with the store's message, which names the argument.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Literal, Protocol

import msgspec

from tools.config import ToolsConfig
from tools.context import ExecutionContext
from tools.result import Output, ToolFault
from tools.runtime import ToolRuntime
from tools.spec import ToolSpec

__all__ = [
    "FoundItem",
    "MemorySearchArgs",
    "MemoryStore",
    "MemoryToolsRuntime",
    "MemoryWriteArgs",
]

SEARCH_K_MAX = 20
"""The most hits one ``memory.search`` call returns."""
TIMEOUT_S = 30.0
"""A search embeds the query (a real model takes tens of milliseconds) and reads views.db; a
write waits for the journal's commit. Both are far below this."""


class FoundItem(msgspec.Struct, frozen=True, kw_only=True):
    """One search hit as the tool reports it: the item and how it scored (each in [0, 1])."""

    item_id: str
    text: str
    tags: tuple[str, ...]
    scope: str
    lexical: float
    vector: float
    recency: float
    final: float


class MemoryStore(Protocol):
    """The node's memory, as the tools use it. ``write`` raises ``ValueError`` (whose message
    names the argument) for input it refuses."""

    def search(
        self, query: str, k: int, *, principal: str | None, session_id: str | None
    ) -> Sequence[FoundItem]: ...

    def write(
        self,
        text: str,
        *,
        tags: tuple[str, ...],
        scope: str,
        expires_in_s: int | None,
        principal: str,
        session_id: str | None,
        causation_id: str | None,
    ) -> str:
        """Record the item; returns its id."""
        ...

    def refusal(self, text: str, tags: tuple[str, ...]) -> str | None:
        """Why an item with this text and these tags would be refused (over a cap, blank),
        or None: asked before a human is asked to approve a write that cannot happen."""
        ...


class MemorySearchArgs(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    query: Annotated[
        str, msgspec.Meta(min_length=1, max_length=2000, description="What to look for.")
    ]
    k: Annotated[
        int,
        msgspec.Meta(ge=1, le=SEARCH_K_MAX, description="How many items at most (default 5)."),
    ] = 5


class MemoryWriteArgs(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    text: Annotated[str, msgspec.Meta(description="The fact to remember, in one or a few lines.")]
    tags: Annotated[
        tuple[str, ...], msgspec.Meta(description="Short labels to find it by (optional).")
    ] = ()
    scope: Annotated[
        Literal["principal", "session", "global"],
        msgspec.Meta(
            description="Who is shown it later: principal (runs for the same user, the "
            "default), session (runs of this session) or global (every run)."
        ),
    ] = "principal"
    expires_in_s: (
        Annotated[
            int, msgspec.Meta(ge=1, description="Forget it after this many seconds (optional).")
        ]
        | None
    ) = None


class MemoryToolsRuntime(ToolRuntime):
    """``memory.search`` and ``memory.write`` over ``store`` (None: the catalog lists them, as
    the node would, but a call fails: this catalog was built without the node's memory)."""

    def __init__(self, config: ToolsConfig, store: MemoryStore | None = None) -> None:
        self._config = config
        self._store = store

    def specs(self) -> Sequence[ToolSpec]:
        cap = self._config.default_output_cap_bytes
        return (
            ToolSpec(
                name="memory.search",
                description="Search durable memory (facts kept across runs and sessions) by "
                "words and meaning; returns the best items with their scores.",
                args_type=MemorySearchArgs,
                capabilities=frozenset(),
                risk="low",
                default_posture="always_allow",
                timeout_s=TIMEOUT_S,
                output_cap_bytes=cap,
                runtime="builtin",
                read_only=True,
            ),
            ToolSpec(
                name="memory.write",
                description="Remember a durable fact for later runs (a preference, a decision, "
                "a detail worth keeping). Returns the item's id.",
                args_type=MemoryWriteArgs,
                capabilities=frozenset({"memory.write"}),
                risk="medium",
                default_posture="ask_each_time",
                timeout_s=TIMEOUT_S,
                output_cap_bytes=cap,
                runtime="builtin",
            ),
        )

    def precheck(self, name: str, args: msgspec.Struct) -> str | None:
        if isinstance(args, MemoryWriteArgs) and self._store is not None:
            return self._store.refusal(args.text, args.tags)
        return None

    def run(self, name: str, args: msgspec.Struct, ctx: ExecutionContext) -> Output:
        store = self._store
        if store is None:
            raise ToolFault("failed", f"{name}: this catalog has no memory (not built by a node)")
        if isinstance(args, MemorySearchArgs):
            hits = store.search(
                args.query, args.k, principal=ctx.principal, session_id=ctx.session_id
            )
            cap = ctx.output_cap(self._config.default_output_cap_bytes)
            return Output(text=_hits_json(list(hits), cap))
        if isinstance(args, MemoryWriteArgs):
            if ctx.principal is None:
                raise ToolFault("invalid", "memory.write: the call acts for no principal")
            if args.scope == "session" and ctx.session_id is None:
                raise ToolFault("invalid", "scope: session needs a call made in a session")
            try:
                item_id = store.write(
                    args.text,
                    tags=args.tags,
                    scope=args.scope,
                    expires_in_s=args.expires_in_s,
                    principal=ctx.principal,
                    session_id=ctx.session_id if args.scope == "session" else None,
                    causation_id=ctx.invocation_id,
                )
            except ValueError as exc:
                raise ToolFault("invalid", str(exc)) from None
            body = {"item_id": item_id, "scope": args.scope}
            return Output(text=msgspec.json.encode(body).decode())
        raise ValueError(f"memory runtime has no tool {name!r}")


def _hits_json(hits: list[FoundItem], cap: int) -> str:
    """``{"hits": [...]}`` within ``cap`` bytes: the lowest-ranked hits are left out (and
    ``truncated`` says so) rather than an item's text cut."""
    for keep in range(len(hits), -1, -1):
        body: dict[str, object] = {"hits": hits[:keep]}
        if keep < len(hits):
            body["truncated"] = True
        text = msgspec.json.encode(body)
        if len(text) <= cap:
            return text.decode()
    return '{"hits":[],"truncated":true}'
